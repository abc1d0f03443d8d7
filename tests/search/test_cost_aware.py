"""Cost-aware TPE (tuner.search.cost_aware): options, the cost model, cheap start-up draws, and the
sampler's preference for cheaper settings (in-memory Optuna studies, seeded: deterministic)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import create_trial

from tuner.search.cost_aware import PRESETS, CostAwareOptions, CostModel, cheap_half_value, cost_aware_tpe, features
from tuner.search.samplers import make_sampler
from tuner.spec.loading import parse_spec

SPACE = {
    "steps": IntDistribution(1, 8),
    "resolution": CategoricalDistribution([32, 48, 64]),
    "online": CategoricalDistribution([False, True]),
}
RES_FACTOR = {32: 1.0, 48: 2.25, 64: 4.0}

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _seconds(params: dict[str, Any]) -> float:
    """A multiplicative cost: steps x pixels, online decode +50 %."""
    return 0.1 * params["steps"] * RES_FACTOR[params["resolution"]] * (1.5 if params["online"] else 1.0)


def _trial(params: dict[str, Any], seconds: float | None, outcome: str = "OK", measured: bool = True) -> Any:
    attrs: dict[str, Any] = {"outcome": outcome, "measured": measured}
    if seconds is not None:
        attrs["cost"] = {"device_s": seconds}
    return create_trial(params=params, distributions=dict(SPACE), values=[seconds or 1.0, 0.0], user_attrs=attrs)


def test_presets_and_mappings_parse_and_bad_values_are_refused() -> None:
    assert CostAwareOptions.parse("off") == CostAwareOptions()
    assert CostAwareOptions.parse("ei-per-second").weight == 1.0
    assert CostAwareOptions.parse("cheap-start").cheap_start
    assert CostAwareOptions.parse({"weight": 0.5, "cool_over": 50}) == CostAwareOptions(0.5, 50)
    assert set(PRESETS) >= {"cheap-start", "ei-per-second", "ei-per-second-cooled"}
    for bad in ("fastest", {"wieght": 1}, {"weight": -1}, {"cool_over": 0}, 3):
        with pytest.raises(ValueError, match="cost_aware"):
            CostAwareOptions.parse(bad)


def test_cooling_falls_linearly_to_zero() -> None:
    options = CostAwareOptions(weight=2.0, cool_over=100)
    assert [options.weight_after(n) for n in (0, 50, 100, 150)] == [2.0, 1.0, 0.0, 0.0]
    assert CostAwareOptions(weight=1.0).weight_after(10_000) == 1.0


def test_features_log_scale_numbers_and_one_hot_choices() -> None:
    internal = {
        "steps": np.array([1.0, 8.0, math.sqrt(8.0)]),
        "resolution": np.array([0.0, 2.0, 1.0]),
        "online": np.array([1.0, 0.0, 0.0]),
    }
    x = features(internal, SPACE)
    assert x.shape == (3, 1 + 2 + 1)
    assert x[:, 0] == pytest.approx([0.0, 1.0, 0.5])  # log scale: sqrt(8) is halfway from 1 to 8
    assert x[:, 1:3].tolist() == [[0, 0], [0, 1], [1, 0]]
    assert x[:, 3].tolist() == [1, 0, 0]


def test_cost_model_learns_a_multiplicative_cost_from_measured_runs_only() -> None:
    rng = np.random.RandomState(0)
    trials = []
    for _ in range(30):
        params = {
            "steps": int(rng.randint(1, 9)),
            "resolution": [32, 48, 64][rng.randint(3)],
            "online": bool(rng.randint(2)),
        }
        trials.append(_trial(params, _seconds(params)))
    cheap, dear = {"steps": 1, "resolution": 32, "online": False}, {"steps": 8, "resolution": 64, "online": True}
    trials += [_trial(cheap, 1000.0, outcome="OOM"), _trial(cheap, 1000.0, measured=False), _trial(dear, None)]
    model = CostModel.fit(trials, SPACE, ridge=1e-3)
    assert model is not None and model.runs == 30  # the OOM, the copy and the cost-less run are left out
    assert model.predict_s(cheap) == pytest.approx(_seconds(cheap), rel=0.05)
    assert model.predict_s(dear) == pytest.approx(_seconds(dear), rel=0.05)


def test_cost_model_needs_two_runs() -> None:
    one = [_trial({"steps": 2, "resolution": 32, "online": False}, 0.2)]
    assert CostModel.fit(one, SPACE) is None
    assert CostModel.fit([], SPACE) is None


def test_cheap_half_draws_stay_in_the_declared_cheaper_half() -> None:
    rng = np.random.RandomState(1)
    draws = {
        name: {cheap_half_value(d, rng) for _ in range(200)}
        for name, d in {
            "int": IntDistribution(6, 24, step=6),
            "steps": IntDistribution(1, 8),
            "choices": CategoricalDistribution([0.5, 1.0, 2.0, 4.0, 8.0]),
            "bool": CategoricalDistribution([False, True]),
            "float": FloatDistribution(0.0, 1.0),
            "log": FloatDistribution(1.0, 100.0, log=True),
            "stepped": FloatDistribution(0.0, 1.0, step=0.25),
        }.items()
    }
    assert draws["int"] == {6, 12}
    assert draws["steps"] == {1, 2, 3, 4}
    assert draws["choices"] == {0.5, 1.0, 2.0}
    assert draws["bool"] == {False}
    assert all(0.0 <= v <= 0.5 for v in draws["float"])
    assert all(1.0 <= v <= 10.0 + 1e-9 for v in draws["log"])
    assert draws["stepped"] <= {0.0, 0.25, 0.5}


def test_make_sampler_pops_the_option_and_leaves_the_default_alone() -> None:
    text = (
        "name: s\nworkload: {class: 'm:W'}\nparameters: {x: {type: int, low: 1, high: 4}}\n"
        "objectives: [{metric: latency_p50_s, direction: minimize}]\nbudget: {trials: 4}\nsampler: {name: tpe, predicted_gain: null, options: %s}\n"
    )
    plain = make_sampler("tpe", parse_spec(text % "{}", source="t"), 0)
    assert type(plain) is optuna.samplers.TPESampler
    aware = make_sampler("tpe", parse_spec(text % "{cost_aware: ei-per-second, n_startup_trials: 3}", source="t"), 0)
    assert isinstance(aware, optuna.samplers.TPESampler) and type(aware) is not optuna.samplers.TPESampler
    assert aware.cost == CostAwareOptions(weight=1.0) and aware._n_startup_trials == 3
    with pytest.raises(ValueError, match="unknown preset"):
        make_sampler("tpe", parse_spec(text % "{cost_aware: fastest}", source="t"), 0)


def _study(sampler: optuna.samplers.BaseSampler, trials: int) -> list[dict[str, Any]]:
    """A study where cost and quality trade off (quality = steps x pixels): every setting is on the front."""
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)
    proposed = []
    for _ in range(trials):
        trial = study.ask(dict(SPACE))
        seconds = _seconds(trial.params)
        trial.set_user_attr("outcome", "OK")
        trial.set_user_attr("measured", True)
        trial.set_user_attr("cost", {"device_s": seconds})
        study.tell(trial, [seconds, math.log(seconds) + (0.3 if trial.params["online"] else 0.0)])
        proposed.append(trial.params)
    return proposed


def test_cheap_start_draws_the_start_up_trials_from_the_cheap_half() -> None:
    proposed = _study(cost_aware_tpe("cheap-start", seed=3, multivariate=True, n_startup_trials=6), 6)
    assert all(p["steps"] <= 4 and p["resolution"] in (32, 48) and p["online"] is False for p in proposed)


def test_cost_weight_makes_tpe_propose_cheaper_settings() -> None:
    def plain() -> optuna.samplers.BaseSampler:
        return optuna.samplers.TPESampler(seed=5, multivariate=True, n_startup_trials=5)

    baseline = _study(plain(), 30)
    aware = _study(cost_aware_tpe({"weight": 2.0}, seed=5, multivariate=True, n_startup_trials=5), 30)
    assert aware[:5] == baseline[:5]  # the same random start-up draws: the cost term acts only after them
    assert sum(_seconds(p) for p in aware[5:]) < 0.7 * sum(_seconds(p) for p in baseline[5:])
