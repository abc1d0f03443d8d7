"""The statistic of ``tuner check``: exact Mann–Whitney counts, the shift test, and the sequential gate's error rates.

The error rates are simulated (seeded) with the check's own constants on the acceptance
scenario: per-round medians of 25 repeats of a workload whose latency CV is 0.3.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.ship.check import ALPHA, DEFAULT_MAX_ROUNDS, DEFAULT_ROUNDS, MAX_MARGIN, MIN_MARGIN, margin_of
from tuner.ship.config_schema import Spread
from tuner.ship.stats import shift_test, u_null_counts


def test_null_counts_are_the_gaussian_binomial() -> None:
    assert u_null_counts(3, 3).tolist() == [1, 1, 2, 3, 3, 3, 3, 2, 1, 1]
    for n, m in ((1, 1), (2, 5), (4, 4), (7, 3), (12, 12)):
        counts = u_null_counts(n, m)
        assert counts.sum() == math.comb(n + m, n) and counts.tolist() == counts[::-1].tolist()
    assert u_null_counts(0, 4).tolist() == [1]


def test_separated_samples_reach_the_exact_extreme_p_value() -> None:
    base, chosen = [2.0, 2.1, 2.2, 2.05], [1.0, 1.01, 0.99, 1.02]
    above = shift_test(base, chosen, floor=1.5, alpha=ALPHA)
    assert above.p_above == pytest.approx(1 / math.comb(8, 4)) and above.confirmed and not above.regression
    assert above.low > 1.5 and above.low <= above.estimate <= above.high
    below = shift_test(base, chosen, floor=2.5, alpha=ALPHA)
    assert below.p_below == pytest.approx(1 / 70) and below.regression and below.high < 2.5
    three = shift_test(base[:3], chosen[:3], floor=1.5, alpha=ALPHA)
    assert three.p_above == pytest.approx(1 / 20) and not three.confirmed, "3 rounds cannot decide at 2.5 %"
    assert three.low == 0.0 and three.high == math.inf


def test_estimate_and_interval_agree_with_the_test() -> None:
    rng = np.random.default_rng(3)
    base, chosen = np.exp(rng.normal(np.log(2.0), 0.1, 9)), np.exp(rng.normal(0.0, 0.1, 9))
    test = shift_test(list(base), list(chosen), floor=1.0, alpha=ALPHA)
    ratios = np.sort((base[:, None] / chosen[None, :]).ravel())
    assert test.estimate == pytest.approx(float(np.median(ratios)))
    for floor in np.linspace(1.2, 3.0, 40):
        at = shift_test(list(base), list(chosen), floor=float(floor), alpha=ALPHA)
        assert at.confirmed == (floor < test.low) and at.regression == (floor > test.high), floor


def test_the_margin_never_lets_the_floor_reach_zero() -> None:
    quiet = Spread(latency_p50_s=0.02, latency_p95_s=0.021, latency_cv=0.01, repeats=10, noisy=False)
    wild = Spread(latency_p50_s=0.02, latency_p95_s=0.09, latency_cv=3.0, repeats=3, noisy=True)
    assert margin_of(quiet, quiet) == MIN_MARGIN
    assert margin_of(wild, wild) == MAX_MARGIN < 1 - 1 / 1.3, "a 1.3x slowdown is always below the floor"
    assert pytest.approx(1 - 1 / math.sqrt(1.3), abs=0.005) == MIN_MARGIN


def _gate(true_ratio: float, floor: float, spread: float, rng: np.random.Generator) -> bool:
    """One simulated check as run_check decides it; True when it fails."""
    base: list[float] = []
    chosen: list[float] = []
    for rounds in range(1, DEFAULT_MAX_ROUNDS + 1):
        base.append(true_ratio * math.exp(rng.normal(0, spread)))
        chosen.append(math.exp(rng.normal(0, spread)))
        if rounds < DEFAULT_ROUNDS:
            continue
        test = shift_test(base, chosen, floor, ALPHA)
        if test.regression or test.confirmed:
            return test.regression
    return test.estimate < floor


def test_sequential_gate_error_rates_at_latency_cv_0_3() -> None:
    sigma = math.sqrt(math.log1p(0.3**2))
    per_round = math.sqrt(math.pi / 2) * sigma / math.sqrt(25)  # spread of a median of 25 repeats
    rng = np.random.default_rng(2024)
    floor = 1 - MIN_MARGIN
    unchanged = sum(_gate(1.0, floor, per_round, rng) for _ in range(400))
    slower = sum(_gate(1 / 1.3, floor, per_round, rng) for _ in range(400))
    assert unchanged <= 2 and slower >= 398, (unchanged, slower)
