"""Normalised hypervolume: the exact 2-D sweep against Optuna's, the normalisation, the curve."""

from __future__ import annotations

import math
import random

import numpy as np
import optuna
import pytest
from optuna._hypervolume import compute_hypervolume
from optuna.distributions import FloatDistribution

from tuner.replay.hypervolume import (
    REACH_TOLERANCE,
    REFERENCE,
    Normalizer,
    hypervolume_curve,
    nondominated,
    trials_to_reach,
)


def test_a_hand_computed_case() -> None:
    normalizer = Normalizer(("a", "b"), ("minimize", "minimize"), (False, False), (0.0, 0.0), (1.0, 1.0))
    volume = normalizer.hypervolume([(0.0, 1.0), (1.0, 0.0), (0.5, 0.5)])
    r = REFERENCE
    e = r - 1.0
    # boxes up to (r, r): A = [0,r]x[1,r], B = [1,r]x[0,r], C = [0.5,r]^2; inclusion-exclusion:
    # A + B + C - AB - AC - BC + ABC = re + re + (r-.5)^2 - e^2 - 2e(r-.5) + e^2 = (r-.5)^2 + e
    assert volume == pytest.approx((r - 0.5) ** 2 + e, rel=1e-12)


def test_it_agrees_with_optunas_hypervolume_on_random_points() -> None:
    rng = random.Random(7)
    normalizer = Normalizer.over(
        [(0.01, 0.0), (10.0, 1.0)], ("latency_p50_s", "text_exact_match"), ("minimize", "maximize")
    )
    for _ in range(20):
        points = [(10 ** rng.uniform(-2, 1), rng.random()) for _ in range(rng.randint(1, 30))]
        ours = normalizer.hypervolume(points)
        theirs = compute_hypervolume(np.array([normalizer.normalise(p) for p in points]), np.array([REFERENCE] * 2))
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12)


def test_latency_is_log_scaled_and_maximised_objectives_flipped() -> None:
    normalizer = Normalizer.over(
        [(0.01, 0.2), (1.0, 0.8)], ("latency_p50_s", "text_exact_match"), ("minimize", "maximize")
    )
    assert normalizer.normalise((0.1, 0.8)) == pytest.approx((0.5, 0.0))  # 0.1 s is half-way in log10
    assert normalizer.normalise((1.0, 0.2)) == pytest.approx((1.0, 1.0))
    assert normalizer.log == (True, False)


def test_nondominated_keeps_equal_points_and_drops_dominated_ones() -> None:
    points = {"a": (1.0, 5.0), "b": (1.0, 5.0), "c": (2.0, 2.0), "d": (3.0, 3.0), "e": (4.0, 1.0)}
    assert sorted(nondominated(points, ["minimize", "minimize"])) == ["a", "b", "c", "e"]


def _trial(
    number: int, values: tuple[float, float] | None, measured: bool, placeholder: bool = False, copy: bool = False
) -> optuna.trial.FrozenTrial:
    attrs = {"measured": measured, "placeholder_values": placeholder, **({"duplicate_of": 0} if copy else {})}
    state = optuna.trial.TrialState.COMPLETE if values is not None else optuna.trial.TrialState.FAIL
    trial = optuna.trial.create_trial(
        state=state,
        values=list(values) if values else None,
        params={"x": float(number)},
        distributions={"x": FloatDistribution(0, 100)},
        user_attrs=attrs,
    )
    trial.number = number
    return trial


def test_the_curve_has_one_entry_per_measured_trial_and_free_trials_add_none() -> None:
    normalizer = Normalizer(("a", "b"), ("minimize", "minimize"), (False, False), (0.0, 0.0), (1.0, 1.0))
    trials = [
        _trial(0, (1.0, 0.0), True),
        _trial(1, (0.0, 1.0), True),
        _trial(2, (0.0, 1.0), False, copy=True),  # a copy: free, adds nothing
        _trial(3, None, True),  # a crash: costs a trial, adds nothing
        _trial(4, (0.0, 0.0), False, placeholder=True),  # INVALID wall: free
        _trial(5, (0.5, 0.5), True),
    ]
    curve = hypervolume_curve(trials, normalizer)
    assert len(curve) == 4
    assert curve[1] == curve[2] and curve[3] > curve[2]
    assert curve[3] == pytest.approx(normalizer.hypervolume([(1.0, 0.0), (0.0, 1.0), (0.5, 0.5)]))


def test_trials_to_reach_counts_from_one() -> None:
    fractions = [0.2, 0.5, 0.94, 0.96, 1.0]
    assert trials_to_reach(fractions, 0.95) == 4
    assert trials_to_reach(fractions, 0.9) == 3
    assert trials_to_reach([0.1], 0.5) is None and not math.isnan(trials_to_reach(fractions, 1.0) or 0)


def test_trials_to_reach_counts_the_first_entry_at_the_target_within_rounding() -> None:
    assert trials_to_reach([0.5, 0.95, 0.99], 0.95) == 2  # equal reaches it (not strictly above)
    assert trials_to_reach([0.5, 1.0 - REACH_TOLERANCE / 2], 1.0) == 2  # a rounding error below still does
    assert trials_to_reach([0.5, 1.0 - 10 * REACH_TOLERANCE], 1.0) is None
    assert trials_to_reach([0.96, 0.5, 0.97], 0.95) == 1  # the first reach, whatever follows
    assert trials_to_reach([], 0.95) is None
