"""What measuring a candidate costs before it runs (issue 38): the latency line, a reload's extra seconds where a
warm worker's ``reload_on`` value changes, and the shape reference a candidate at a new shape queues first."""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np
import optuna
import pytest

from tuner.search.predicted_gain import predicted_gain_sampler
from tuner.search.prediction import LATENCY
from tuner.search.trial_cost import ShapeCosts, TrialCost, device_seconds
from tuner.spec.loading import parse_spec
from tuner.spec.space import distributions

WARM = """
name: costs
workload:
  worker: warm
  python: {factory: "tuner.testing.simulated_reloads:make_simulated_model", reload_on: [precision]}
parameters:
  frames: {type: categorical, choices: [5, 9, 17]}
  steps: {type: categorical, choices: [4, 12]}
  precision: {type: categorical, choices: [fp32, bf16]}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {frames: 17, steps: 12, precision: fp32}
reference_shape: {per: [frames]}
budget: {trials: 10}
"""

START = datetime.datetime(2026, 12, 7, 2, 0, 0)


def ran(spec_text: str, params: dict[str, Any], number: int, device_s: float, latency: float) -> Any:
    """A measured trial started ``number`` seconds after :data:`START` with its recorded cost."""
    trial = optuna.trial.create_trial(
        params=params,
        distributions=distributions(parse_spec(spec_text)),
        values=[latency, 40.0],
        user_attrs={
            "measured": True,
            "outcome": "OK",
            "metrics": {LATENCY: {"value": latency, "unit": "s"}},
            "cost": {"device_s": device_s},
        },
    )
    trial.number = number
    trial.datetime_start = START + datetime.timedelta(seconds=number)
    return trial


def test_the_line_is_the_latency_until_three_trials_then_fits_their_cost() -> None:
    costs = [(0.1, 0.5 + 3 * 0.1), (0.2, 0.5 + 3 * 0.2), (0.4, 0.5 + 3 * 0.4)]
    assert device_seconds(costs[:2], np.array([0.3]))[0] == pytest.approx(0.3)
    assert device_seconds(costs, np.array([0.3]))[0] == pytest.approx(0.5 + 3 * 0.3)


def test_a_reload_is_charged_only_to_a_candidate_whose_reload_on_value_differs_from_the_loaded_one() -> None:
    spec = parse_spec(WARM)
    cost = TrialCost(spec)
    assert cost.reload_on == ("precision",)
    precisions = ["fp32", "fp32", "bf16", "bf16", "fp32", "fp32", "bf16"]  # reloads at 2, 4 and 6
    for number, precision in enumerate(precisions):
        latency = 0.1 * (1 + number % 3)
        reloaded = number > 0 and precision != precisions[number - 1]
        device_s = 0.05 + 3 * latency + (0.4 if reloaded else 0.0)
        trial = ran(WARM, {"frames": 5, "steps": 4, "precision": precision}, number, device_s, latency)
        cost.add(trial, latency, device_s)
    assert cost.reload_s() == pytest.approx(0.4)
    seconds = cost.seconds(np.array([0.2, 0.2]), [("bf16",), ("fp32",)], loaded=("bf16",))
    assert seconds[0] == pytest.approx(0.05 + 3 * 0.2)
    assert seconds[1] == pytest.approx(0.05 + 3 * 0.2 + 0.4), "a change of precision loads the model again"


def test_a_workload_that_never_reloads_is_charged_the_line_alone() -> None:
    spec = parse_spec(WARM.replace("worker: warm", "worker: fresh"))
    cost = TrialCost(spec)
    assert cost.reload_on == ()
    for number, precision in enumerate(["fp32", "bf16", "fp32", "bf16"]):
        latency = 0.1 * (number + 1)
        trial = ran(WARM, {"frames": 5, "steps": 4, "precision": precision}, number, 0.1 + 3 * latency, latency)
        cost.add(trial, latency, 0.1 + 3 * latency)
    assert cost.reload_s() == 0.0 and cost.loaded([]) is None
    assert cost.seconds(np.array([0.2]), [("bf16",)], loaded=None)[0] == pytest.approx(0.1 + 3 * 0.2)


def test_the_loaded_values_are_those_of_the_trial_started_last() -> None:
    cost = TrialCost(parse_spec(WARM))
    earlier = ran(WARM, {"frames": 5, "steps": 4, "precision": "bf16"}, 3, 1.0, 0.1)
    later = ran(WARM, {"frames": 9, "steps": 4, "precision": "fp32"}, 8, 1.0, 0.1)
    assert cost.loaded([later, earlier]) == ("fp32",)


def test_a_shape_is_missing_until_a_trial_there_ran_or_waits_and_the_references_own_shape_never_is() -> None:
    spec = parse_spec(WARM)
    candidates = [
        {"frames": frames, "steps": steps, "precision": precision}
        for frames in (5, 9, 17)
        for steps in (4, 12)
        for precision in ("fp32", "bf16")
    ]
    shapes = ShapeCosts(spec, distributions(spec), candidates)
    assert shapes.missing([]) == [("5",), ("9",)], "17 frames is the spec's reference's shape"
    assert shapes.params[("9",)] == {"frames": 9, "steps": 12, "precision": "fp32"}
    assert [c for c, flag in zip(candidates, shapes.is_reference, strict=True) if flag] == [
        {"frames": 5, "steps": 12, "precision": "fp32"},
        {"frames": 9, "steps": 12, "precision": "fp32"},
        {"frames": 17, "steps": 12, "precision": "fp32"},
    ]
    at_five = ran(WARM, {"frames": 5, "steps": 4, "precision": "bf16"}, 1, 1.0, 0.1)
    assert shapes.missing([at_five]) == [("9",)]
    skipped = ran(WARM, {"frames": 9, "steps": 4, "precision": "bf16"}, 2, 0.0, 0.1)
    skipped.user_attrs["measured"] = False  # a proposal recorded without running queues no reference
    assert shapes.missing([at_five, skipped]) == [("9",)]


def test_without_a_reference_per_shape_no_shape_is_ever_missing() -> None:
    spec = parse_spec(WARM.replace("reference_shape: {per: [frames]}\n", ""))
    candidates = [{"frames": frames, "steps": 4, "precision": "fp32"} for frames in (5, 9, 17)]
    shapes = ShapeCosts(spec, distributions(spec), candidates)
    assert shapes.missing([]) == [] and shapes.rows == {}


def test_a_candidate_at_a_shape_whose_reference_has_not_run_is_charged_that_reference_too() -> None:
    import numpy as np

    spec = parse_spec(WARM)
    sampler = predicted_gain_sampler(spec, optuna.samplers.RandomSampler(seed=0), seed=0, after=3)
    candidates = sampler._candidates
    at_five = candidates.index({"frames": 5, "steps": 4, "precision": "bf16"})
    reference_at_five = candidates.index({"frames": 5, "steps": 12, "precision": "fp32"})
    at_seventeen = candidates.index({"frames": 17, "steps": 4, "precision": "bf16"})
    missing = sampler._shapes.missing([])
    first = {shape: len(candidates) + n for n, shape in enumerate(missing)}
    seconds = np.concatenate([np.full(len(candidates), 1.0), np.full(len(missing), 5.0)])
    assert sampler._spent(at_five, at_five, seconds, first) == 6.0, "its own second and the reference's five"
    assert sampler._spent(reference_at_five, reference_at_five, seconds, first) == 1.0, "it is that reference"
    assert sampler._spent(at_seventeen, at_seventeen, seconds, first) == 1.0, "the spec's reference's shape"
