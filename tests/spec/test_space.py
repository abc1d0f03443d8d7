"""Search space: distributions, derived values, rules and canonical keys."""

from __future__ import annotations

from pathlib import Path

import optuna

from tuner.spec.candidate import canonical_key
from tuner.spec.loading import parse_spec
from tuner.spec.space import distributions, grid, resolve, suggest

SPEC = parse_spec((Path(__file__).parents[1] / "specs" / "fake_ok.yaml").read_text())


def test_distributions_follow_the_spec() -> None:
    dists = distributions(SPEC)
    assert isinstance(dists["noise"], optuna.distributions.IntDistribution)
    assert dists["noise"].step == 5
    assert isinstance(dists["batch_size"], optuna.distributions.CategoricalDistribution)


def test_derived_values_and_rules() -> None:
    candidate, problem = resolve(SPEC, {"sleep_s": 0.01, "noise": 5, "batch_size": 2})
    assert problem is None and candidate is not None
    assert candidate.derived["total_frames"] == 8
    assert candidate.settings["total_frames"] == 8 and candidate.settings["noise"] == 5
    rejected, why = resolve(SPEC, {"sleep_s": 0.01, "noise": 40, "batch_size": 2})
    assert rejected is None and why == "noise 40 with batch 2 is refused by a rule"


def test_canonical_key_ignores_order_and_float_spelling() -> None:
    assert canonical_key({"a": 1, "b": 0.5}) == canonical_key({"b": 0.50, "a": 1})
    assert canonical_key({"a": 1}) != canonical_key({"a": 2})
    assert canonical_key({"a": True}) != canonical_key({"a": 1})


def test_suggest_draws_every_parameter() -> None:
    study = optuna.create_study(directions=["minimize", "maximize"])
    trial = study.ask()
    params = suggest(trial, SPEC)
    assert set(params) == set(SPEC.parameters)
    assert 0 <= params["noise"] <= 40 and params["noise"] % 5 == 0


def test_grid_lists_every_value() -> None:
    values = grid(SPEC)
    assert values["noise"] == [0, 5, 10, 15, 20, 25, 30, 35, 40]
    assert len(values["sleep_s"]) == 20
