"""One measured call tells what its neighbours along its count knob cost (issue 38, item 2): a run whose series of
steps was uniform stands for its setting at the knob's other values; the predictor fits on those derived runs
but never counts them as runs nor lets them narrow its interval."""

from __future__ import annotations

import random
import statistics
from typing import Any

import numpy as np
import optuna
import pytest

from tuner.search.fitting.count_neighbours import CountNeighbours, count_values, derived_groups, held_out_by_group
from tuner.search.prediction import LATENCY, OutcomePredictor
from tuner.spec.loading import parse_spec
from tuner.spec.space import distributions

SPEC = """
name: neighbours
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 60}
parameters:
  num_frames: {type: categorical, choices: [5, 9, 17, 33]}
  num_inference_steps: {type: categorical, choices: [4, 8, 16, 32]}
  guidance_scale: {type: categorical, choices: [1.0, 5.0]}
  precision: {type: categorical, choices: [fp32, bf16]}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: peak_rss_gb, direction: minimize}
measurement: {warmup: 0, min_repeats: 3, max_repeats: 3}
budget: {trials: 10}
sampler: {name: random}
seed: 3
"""
TEXT_S = 0.01


def step_s(params: dict[str, Any]) -> float:
    """One denoising step (s): frames x passes (CFG above 1: two) x a precision factor."""
    passes = 2 if params["guidance_scale"] > 1 else 1
    return 0.002 * params["num_frames"] * passes * (0.6 if params["precision"] == "bf16" else 1.0)


def decode_s(params: dict[str, Any]) -> float:
    return 0.003 * params["num_frames"]


def latency_s(params: dict[str, Any]) -> float:
    return TEXT_S + params["num_inference_steps"] * step_s(params) + decode_s(params)


def finished(params: dict[str, Any], number: int, series: bool = True, skipped: float = 0.0) -> Any:
    """A measured run of the stand-in diffusion call; ``series``: it reports its phases and median step;
    ``skipped``: the share of steps a cache made free (the median step then no longer the mean)."""
    latency = latency_s(params) - skipped * params["num_inference_steps"] * step_s(params)
    metrics: dict[str, Any] = {LATENCY: {"value": latency, "unit": "s"}, "peak_rss_gb": {"value": 0.5, "unit": "GB"}}
    if series:
        metrics["text_s"] = {"value": TEXT_S, "unit": "s"}
        metrics["decode_s"] = {"value": decode_s(params), "unit": "s"}
        metrics["denoise_s"] = {"value": latency - TEXT_S - decode_s(params), "unit": "s"}
        metrics["denoise_step_s"] = {"value": step_s(params), "unit": "s"}
    trial = optuna.trial.create_trial(
        params=params,
        distributions=distributions(parse_spec(SPEC)),
        values=[latency, 0.5],
        user_attrs={"measured": True, "outcome": "OK", "metrics": metrics},
    )
    trial.number = number
    return trial


def settings(count: int, seed: int, steps: list[int]) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "num_frames": rng.choice([5, 9, 17, 33]),
            "num_inference_steps": rng.choice(steps),
            "guidance_scale": rng.choice([1.0, 5.0]),
            "precision": rng.choice(["fp32", "bf16"]),
        }
        for _ in range(count)
    ]


def median_error(predictor: OutcomePredictor, unseen: list[dict[str, Any]]) -> float:
    return statistics.median(abs(latency_s(p) / predictor.predict(p)[LATENCY].value - 1.0) for p in unseen)


def test_runs_at_few_steps_predict_the_same_settings_at_many() -> None:
    """Eight runs at 4 or 8 steps; asked about 16 and 32 steps, which no run measured: the derived runs carry the
    count's cost (the count knob found from the runs, named by no one), a fit without them cannot know it."""
    spec = parse_spec(SPEC)
    seen, unseen = settings(8, seed=0, steps=[4, 8]), settings(40, seed=1, steps=[16, 32])
    with_series = OutcomePredictor(spec, distributions(spec))
    with_series.update([finished(p, n) for n, p in enumerate(seen)])
    without = OutcomePredictor(spec, distributions(spec))
    without.update([finished(p, n, series=False) for n, p in enumerate(seen)])
    derived_error, plain_error = median_error(with_series, unseen), median_error(without, unseen)
    assert derived_error < 0.05, f"the derived runs hold the answer ({derived_error:.1%})"
    assert derived_error < plain_error / 3, f"{derived_error:.1%} vs {plain_error:.1%} without the series"
    predicted = with_series.predict(unseen[0])[LATENCY]
    assert predicted.fitted_on == 8, "derived runs are not runs"
    assert predicted.low < predicted.value < predicted.high


def test_the_count_knob_is_the_one_the_series_length_matches() -> None:
    spec = parse_spec(SPEC)
    neighbours = CountNeighbours(distributions(spec))
    runs = settings(5, seed=2, steps=[4, 8, 16])
    for key, params in enumerate(runs):
        neighbours.add(key, params, finished(params, key).user_attrs["metrics"], latency_s(params))
    assert neighbours.knob() == "num_inference_steps"
    derived = neighbours.derived()
    assert len(derived) == 5 * 3, "each run stands for its setting at the three other step counts"
    key, params, latency, parts = derived[0]
    source = runs[key]
    assert {k: v for k, v in params.items() if k != "num_inference_steps"} == {
        k: v for k, v in source.items() if k != "num_inference_steps"
    }
    assert latency == pytest.approx(latency_s(params), rel=1e-9), "uniform steps: the derived latency is exact"
    assert parts is not None and parts[0] == pytest.approx(TEXT_S + decode_s(params))


def test_a_run_whose_steps_differ_in_cost_stands_for_nothing_else() -> None:
    """A cache made half the steps free: its median step is no longer its series' mean, its pattern would change
    with the count -- nothing is derived from it; a generation that stopped before its max: likewise."""
    spec = parse_spec(SPEC)
    neighbours = CountNeighbours(distributions(spec))
    runs = settings(4, seed=3, steps=[4, 8, 16])
    for key, params in enumerate(runs):
        neighbours.add(key, params, finished(params, key).user_attrs["metrics"], latency_s(params))
    cached = {**runs[0], "num_inference_steps": 16}
    trial = finished(cached, 9, skipped=0.5)
    neighbours.add(9, cached, trial.user_attrs["metrics"], trial.values[0])
    assert neighbours.knob() == "num_inference_steps"
    assert all(key != 9 for key, *_ in neighbours.derived()), "the cached run derives nothing"
    assert len(neighbours.derived()) == 4 * 3


def test_without_enough_matching_runs_there_is_no_count_knob() -> None:
    spec = parse_spec(SPEC)
    neighbours = CountNeighbours(distributions(spec))
    params = settings(1, seed=4, steps=[8])[0]
    neighbours.add(0, params, finished(params, 0).user_attrs["metrics"], latency_s(params))
    neighbours.add(1, params, {LATENCY: {"value": 1.0}}, 1.0)  # no series: not a vote
    assert neighbours.knob() is None and neighbours.derived() == []


def test_what_a_count_knob_may_take() -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    assert count_values(CategoricalDistribution([4, 8, 12])) == (4.0, 8.0, 12.0)
    assert count_values(CategoricalDistribution(["a", "b"])) is None
    assert count_values(CategoricalDistribution([True, False])) is None
    assert count_values(IntDistribution(4, 64)) == (4.0, 16.0, 64.0), "the ends and their geometric mean"
    assert count_values(IntDistribution(0, 8)) is None, "a count starts at one"
    assert count_values(FloatDistribution(0.1, 1.0)) is None


def test_a_group_is_held_out_whole() -> None:
    """The held-out error of a measured row left out with its derived copies is that of a refit without all of
    them (exact for a ridge smoother), not the near-zero error of a row whose copy stays in."""
    rng = np.random.default_rng(0)
    measured = rng.normal(size=(12, 3))
    logs = measured @ np.array([0.5, -1.0, 2.0]) + rng.normal(scale=0.3, size=12)
    rows = np.vstack([measured[[2, 7]], measured])  # two derived rows: copies of measured rows 2 and 7
    values = np.concatenate([logs[[2, 7]], logs])
    ridge = 0.1

    def fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.linalg.solve(x.T @ x + ridge * np.eye(3), x.T @ y)  # type: ignore[no-any-return]

    hat = rows @ np.linalg.solve(rows.T @ rows + ridge * np.eye(3), rows.T)
    residual = values - hat @ values
    groups = derived_groups([2, 7], 12)
    assert groups is not None and groups[2] == [4, 0] and groups[7] == [9, 1] and groups[0] == [2]
    grouped = held_out_by_group(np.eye(len(values)) - hat, residual, groups)
    for index in (2, 7, 5):
        keep = [r for r in range(len(values)) if r not in groups[index]]
        refit = fit(rows[keep], values[keep])
        assert grouped[index] == pytest.approx(logs[index] - measured[index] @ refit, rel=1e-9)
    single = residual[4] / (1.0 - hat[4, 4])
    assert abs(single) < abs(grouped[2]), "left in, the copy predicts its own measurement"
    assert derived_groups([], 12) is None
