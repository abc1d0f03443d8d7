"""Proposals chosen by predicted hypervolume gain per second (issue 38: predict before measuring): the candidate
pool, the choice on an exactly predictable cost and quality, trials asked ahead counted as measured, the wrapper
around the spec's sampler, and a study replayed through the real coordinator."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pytest

from tuner.errors import SpecError
from tuner.pareto import dominates
from tuner.search.predicted_gain import candidate_pool, predicted_gain_sampler
from tuner.search.prediction import LATENCY
from tuner.search.samplers import make_sampler
from tuner.spec.loading import parse_spec
from tuner.spec.search.sampler import DEFAULT_RELOAD_LOOKAHEAD
from tuner.spec.space import distributions

SPEC = """
name: gain
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 60}
parameters:
  steps: {type: int, low: 1, high: 12}
  res: {type: categorical, choices: [32, 64, 128]}
  fast: {type: bool}
rules:
  - {expr: "not (steps == 1 and res == 128)", message: "one step at 128 px is refused"}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {steps: 12, res: 128, fast: false}
budget: {trials: 10}
seed: 5
"""


def latency_of(steps: int, res: int, fast: bool) -> float:
    """A multiplicative cost: steps x pixels, halved by ``fast`` (exact in the predictor's log features)."""
    return 0.002 * steps * (res / 32) ** 2 * (0.5 if fast else 1.0)


def psnr_of(steps: int, res: int, fast: bool) -> float:
    """A quality linear in the features: more steps and pixels agree better, ``fast`` loses 3 dB."""
    return 20.0 + 4.0 * math.log(steps) + 0.05 * res - (3.0 if fast else 0.0)


NUMBERS = iter(range(10**6))  # a study numbers its trials; these are made outside one


def measured(spec_text: str, params: dict[str, Any]) -> optuna.trial.FrozenTrial:
    latency, psnr = latency_of(**params), psnr_of(**params)
    trial = optuna.trial.create_trial(
        params=params,
        distributions=distributions(parse_spec(spec_text)),
        values=[latency, psnr],
        user_attrs={
            "measured": True,
            "outcome": "OK",
            "metrics": {LATENCY: {"value": latency, "unit": "s"}, "psnr_db": {"value": psnr, "unit": "dB"}},
        },
    )
    trial.number = next(NUMBERS)
    return trial


FIRST = [
    {"steps": 1, "res": 32, "fast": True},
    {"steps": 2, "res": 64, "fast": False},
    {"steps": 3, "res": 32, "fast": False},
    {"steps": 4, "res": 128, "fast": True},
    {"steps": 6, "res": 64, "fast": True},
    {"steps": 8, "res": 32, "fast": True},
    {"steps": 5, "res": 128, "fast": False},
    {"steps": 2, "res": 32, "fast": False},
]


def test_the_pool_is_the_grid_when_small_and_a_seeded_sample_otherwise() -> None:
    spec = parse_spec(SPEC)
    pool = candidate_pool(spec, seed=0)
    assert len(pool) == 12 * 3 * 2 - 2, "every setting of the grid but the two the rule refuses"
    assert {"steps": 1, "res": 128, "fast": True} not in pool
    wide = parse_spec(SPEC.replace("{type: int, low: 1, high: 12}", "{type: float, low: 0.5, high: 12.0, log: true}"))
    drawn = candidate_pool(wide, seed=1, pool=50)
    assert len(drawn) == 50, "a float without a step: a sample of the pool's size (no rule refuses these)"
    assert drawn == candidate_pool(wide, seed=1, pool=50), "seeded"
    assert drawn != candidate_pool(wide, seed=2, pool=50)
    assert all(0.5 <= setting["steps"] <= 12.0 for setting in drawn)


def test_the_base_proposes_until_enough_trials_are_measured_then_a_setting_the_front_does_not_beat() -> None:
    spec = parse_spec(SPEC)
    sampler = predicted_gain_sampler(
        spec, optuna.samplers.RandomSampler(seed=0), seed=0, after=len(FIRST), start="sampler"
    )
    trials = [measured(SPEC, params) for params in FIRST]
    assert sampler.choose(trials[:-1]) is None, "fewer measured trials than `after`: the base proposes"
    choice = sampler.choose(trials)
    assert choice is not None
    setting, gain = choice
    assert gain > 0
    assert setting not in FIRST, "never a setting already asked"
    truth = (latency_of(**setting), psnr_of(**setting))
    beaten = [t.params for t in trials if dominates(t.values, truth, ["minimize", "maximize"])]
    assert beaten == [], f"the chosen setting, measured, joins the front: beaten by {beaten}"


def test_the_spread_start_proposes_far_from_every_asked_setting_for_few_predicted_seconds() -> None:
    import numpy as np

    from tuner.search.setting_features import setting_features

    spec = parse_spec(SPEC)
    sampler = predicted_gain_sampler(spec, optuna.samplers.RandomSampler(seed=0), seed=0, after=len(FIRST))
    trials = [measured(SPEC, params) for params in FIRST]
    assert sampler.choose(trials[:2]) is None, "no latency predicted yet (fewer than 3 runs): the base proposes"
    choice = sampler.choose(trials[:-1])
    assert choice is not None, "before `after` trials, once the latency is predicted: the spread start"
    picked, score = choice
    assert score > 0 and picked not in FIRST[:-1]
    space = distributions(spec)
    asked = np.asarray([setting_features(params, space, prior=False) for params in FIRST[:-1]])
    pool = [setting for setting in candidate_pool(spec, seed=0) if setting not in FIRST[:-1]]
    rows = np.asarray([setting_features(setting, space, prior=False) for setting in pool])
    nearest = ((rows[:, None, :] - asked[None, :, :]) ** 2).sum(axis=2).min(axis=1)
    latency = sampler._predictor.centres(rows)[LATENCY]
    mine = pool.index(picked)
    better = [
        pool[i] for i in range(len(pool)) if nearest[i] > nearest[mine] and latency[i] < latency[mine] * (1 - 1e-9)
    ]
    assert better == [], f"farther from every asked setting and predicted faster than the pick: {better}"


def test_a_trial_asked_but_not_told_counts_as_measured() -> None:
    spec = parse_spec(SPEC)
    sampler = predicted_gain_sampler(spec, optuna.samplers.RandomSampler(seed=0), seed=0, after=len(FIRST))
    trials = [measured(SPEC, params) for params in FIRST]
    first = sampler.choose(trials)
    assert first is not None
    running = optuna.trial.create_trial(
        state=optuna.trial.TrialState.RUNNING, params=first[0], distributions=distributions(spec)
    )
    running.number = next(NUMBERS)
    second = sampler.choose([*trials, running])
    assert second is not None
    assert second[0] != first[0], "the running trial's setting is not proposed again"
    assert second[1] <= first[1], "its predicted point is on the front: what is left adds no more"


def test_the_spec_default_wraps_the_sampler_and_takes_proposals_in_order() -> None:
    spec = parse_spec(SPEC)
    assert spec.sampler.predicted_gain is not None and spec.sampler.predicted_gain.after == 10
    assert spec.sampler.predicted_gain.start == "spread"
    assert spec.sampler.lookahead() == 1, "a proposal chosen by predicted gain runs at once"
    assert hasattr(make_sampler("tpe", spec, 0), "choose")
    assert not hasattr(make_sampler("grid", spec, 0), "choose"), "the grid proposes every setting once"
    off = parse_spec(SPEC + "sampler: {name: tpe, predicted_gain: null}\n")
    assert isinstance(make_sampler("tpe", off, 0), optuna.samplers.TPESampler)
    assert off.sampler.lookahead() == DEFAULT_RELOAD_LOOKAHEAD
    explicit = parse_spec(SPEC + "sampler: {name: tpe, reload_lookahead: 2}\n")
    assert explicit.sampler.lookahead() == 2, "a lookahead the spec sets wins"
    with pytest.raises(SpecError, match="predicted_gain"):
        parse_spec(SPEC + "sampler: {name: tpe, predicted_gain: {after: 1}}\n")


def test_an_ask_tell_study_proposes_by_predicted_gain_once_enough_trials_are_measured() -> None:
    spec = parse_spec(SPEC)
    sampler = predicted_gain_sampler(spec, optuna.samplers.TPESampler(seed=0), seed=0, after=6)
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)
    space = distributions(spec)
    for _ in range(16):
        trial = study.ask(space)
        params = dict(trial.params)
        latency, psnr = latency_of(**params), psnr_of(**params)
        trial.set_user_attr("measured", True)
        trial.set_user_attr("outcome", "OK")
        trial.set_user_attr(
            "metrics", {LATENCY: {"value": latency, "unit": "s"}, "psnr_db": {"value": psnr, "unit": "dB"}}
        )
        study.tell(trial, [latency, psnr])
    trials = study.get_trials(deepcopy=False)
    chosen = sorted(sampler.chosen)
    assert chosen and chosen[0] >= 6, "the base and the spread start propose the first 6; then the predicted gain"
    assert sorted(sampler.spread) == [3, 4, 5], "the spread start once 3 runs predict the latency"
    assert all(gain > 0 for gain in sampler.chosen.values())
    for number in [*sampler.spread, *chosen]:
        earlier = [t.params for t in trials if t.number < number]
        assert trials[number].params not in earlier, f"trial {number} was chosen again"


def test_a_settings_device_seconds_follow_the_line_through_the_trials_recorded_cost() -> None:
    import numpy as np

    from tuner.search.trial_cost import device_seconds

    def costed(latency: float) -> optuna.trial.FrozenTrial:
        trial = measured(SPEC, {"steps": 1, "res": 32, "fast": True})
        trial.user_attrs["metrics"] = {LATENCY: {"value": latency, "unit": "s"}}
        trial.user_attrs["cost"] = {"device_s": 0.5 + 3.0 * latency}  # start-up, a warm-up and two timed calls
        return trial

    spec = parse_spec(SPEC)
    sampler = predicted_gain_sampler(spec, optuna.samplers.RandomSampler(seed=0), seed=0, after=3)
    sampler.choose([costed(latency) for latency in (0.1, 0.2, 0.4)])  # folds each trial's recorded cost in
    assert device_seconds([(s.latency_s, s.device_s) for s in sampler._cost.samples], np.array([0.3]))[
        0
    ] == pytest.approx(0.5 + 3.0 * 0.3)
    assert device_seconds([(s.latency_s, s.device_s) for s in sampler._cost.samples][:2], np.array([0.3]))[
        0
    ] == pytest.approx(0.3), "too few: the latency"


def test_a_huge_integer_range_is_sampled_not_enumerated() -> None:
    """A billion integers (the no-op specs' ``x``) must not be listed: the grid is counted before it is built."""
    wide = parse_spec(SPEC.replace("{type: int, low: 1, high: 12}", "{type: int, low: 0, high: 1000000000}"))
    drawn = candidate_pool(wide, seed=0, pool=40)
    assert len(drawn) <= 40 and all(0 <= setting["steps"] <= 1_000_000_000 for setting in drawn)
