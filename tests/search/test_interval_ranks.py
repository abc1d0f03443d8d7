"""Intervals fitted on a study's first runs hold what they claim (issue 38, item 2): a prediction's interval is
bounded by finite-sample ranks of the held-out errors (:func:`tuner.search.fitting.recorded_errors.rank_bounds`), not interpolated
quantiles, which lie inside the errors' extremes however few there are."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.search.fitting.recorded_errors import rank_bounds
from tuner.search.fitting.split_latency import SplitLatency, split_or_plain
from tuner.search.prediction import FLOOR, INTERVAL, LogRidge

TRUE_COEF = np.array([1.0, -0.7])
NOISE_SD = 0.1
"""A log latency linear in two features plus Gaussian noise of this sd (log units: about 10 %)."""


def coverage(runs: int, repetitions: int = 200, fresh: int = 20) -> float:
    """Share of fresh measurements inside the intervals of models fitted on ``runs`` runs (seeded)."""
    rng = np.random.default_rng(0)
    inside = []
    for _ in range(repetitions):
        rows = rng.random((runs, 2))
        model = LogRidge(rows, 0.5 + rows @ TRUE_COEF + rng.normal(0.0, NOISE_SD, runs))
        for row in rng.random((fresh, 2)):
            truth = 0.5 + float(row @ TRUE_COEF) + rng.normal(0.0, NOISE_SD)
            _, low, high = model.predict(row)
            inside.append(low <= truth <= high)
    return float(np.mean(inside))


@pytest.mark.parametrize("runs", [8, 12])
def test_intervals_on_a_handful_of_runs_hold_near_their_share(runs: int) -> None:
    # Interpolated quantiles of 8 or 12 runs' held-out errors held 66 % and 68 % here (meant: 80 %).
    assert coverage(runs) >= 0.75


def test_intervals_on_many_runs_are_not_widened_past_their_share() -> None:
    assert 0.75 <= coverage(40) <= 0.88


def test_ranks_of_few_errors_reach_the_extremes() -> None:
    errors = [0.05, -0.2, 0.1, -0.01]
    assert rank_bounds(errors, (0.1, 0.9), 0.0) == (-0.2, 0.1)  # ranks 0 and 5 of 4: the extremes
    low, high = np.quantile(errors, (0.1, 0.9))
    assert low > -0.2 and high < 0.1  # what interpolation gave: inside them


def test_ranks_of_many_errors_are_the_conformal_order_statistics() -> None:
    errors = list(np.random.default_rng(1).normal(0.0, 0.1, 99))
    ordered = sorted(errors)
    assert rank_bounds(errors, (0.1, 0.9), 0.0) == (ordered[9], ordered[89])  # floor(10) and ceil(90), 1-based


def test_floor_and_bad_arguments() -> None:
    assert rank_bounds([0.001, -0.001, 0.0], (0.1, 0.9), math.log1p(0.02)) == (-math.log1p(0.02), math.log1p(0.02))
    with pytest.raises(ValueError, match="at least one"):
        rank_bounds([], (0.1, 0.9), 0.0)
    with pytest.raises(ValueError, match="0 < low < high < 1"):
        rank_bounds([0.1], (0.9, 0.1), 0.0)


def test_the_split_latency_interval_takes_the_same_ranks() -> None:
    rng = np.random.default_rng(2)
    rows = rng.random((8, 2))
    once = rows @ np.array([0.2, 0.1]) + rng.normal(0.0, 0.01, 8)  # a once-per-call part that barely moves
    rest = rows @ np.array([3.0, -2.0]) + rng.normal(0.0, 0.01, 8)  # and a repeated part that does
    latency = np.logaddexp(once, rest)  # their sum: not log-linear, so the split predicts it better
    parts = (LogRidge(rows, once), LogRidge(rows, rest))
    model = split_or_plain(LogRidge(rows, latency), parts, (latency, once, rest), INTERVAL, FLOOR)
    assert isinstance(model, SplitLatency)
    centre, low, high = model.predict(rows[0])
    assert (low - centre, high - centre) == pytest.approx(rank_bounds(model.errors, INTERVAL, FLOOR))
    assert model.errors.min() == pytest.approx(low - centre) or low - centre == pytest.approx(-FLOOR)
