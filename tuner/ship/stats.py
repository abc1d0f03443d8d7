"""The statistics of ``tuner check``: is the speed-up still above its floor, given the noise?

Samples: per round, one median latency (seconds) of the baseline and one of the chosen
setting (the alternating ABBA runs of :mod:`tuner.ship.check`). On their logarithms the
speed ratio is a shift: ``log(baseline) - log(chosen) = log(speed-up)``.

Statistic: the Mann–Whitney U test of that shift against ``log(floor)`` — distribution-free
(no normality, a single slow round moves it by one rank, not by its size), exact (the null
distribution of U is counted, not approximated), and valid for the few rounds a CI gate can
afford. Its companions are the Hodges–Lehmann estimate of the speed-up (the median of the
``n × m`` pairwise ratios ``baseline_i / chosen_j``) and the matching exact confidence
interval (order statistics of those ratios).

One-sided p-values at the floor ``F``:

* ``p_below`` — evidence the speed-up is below ``F`` (a regression): small when most
  pairwise ratios are below ``F``;
* ``p_above`` — evidence it is above ``F`` (confirmed).

Only numpy is used (scipy is not a dependency of the project).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ShiftTest", "u_null_counts", "shift_test"]


@functools.cache
def _counts(n: int, m: int) -> tuple[float, ...]:
    if n == 0 or m == 0:
        return (1.0,)
    fewer_x, fewer_y = _counts(n - 1, m), _counts(n, m - 1)
    out = np.zeros(n * m + 1)
    out[m : m + len(fewer_x)] += fewer_x  # the largest value is an x: it beats all m y's
    out[: len(fewer_y)] += fewer_y  # the largest value is a y: it beats no x
    return tuple(float(v) for v in out)


def u_null_counts(n: int, m: int) -> np.ndarray:
    """Number of orderings of ``n`` x's and ``m`` y's giving U = 0 .. n·m (U = pairs with x > y).

    Exact (the Gaussian binomial coefficient); sums to C(n + m, n). Floats: exact below 2**53,
    which holds up to n = m = 28 and is relatively exact (1e-16) beyond.
    """
    if n < 0 or m < 0:
        raise ValueError(f"sample sizes must be >= 0, got {n} and {m}")
    return np.array(_counts(n, m))


@dataclass(frozen=True)
class ShiftTest:
    """The test of speed-up = baseline / chosen against ``floor`` (all ratios dimensionless).

    ``estimate``: Hodges–Lehmann speed-up. ``low`` / ``high``: the exact two-sided
    ``1 - 2 alpha`` confidence interval of the speed-up (``low = 0`` / ``high = inf`` while
    too few rounds exist to bound it). ``p_below`` / ``p_above``: one-sided p-values at the
    floor (see module docs). ``rounds``: samples per side.
    """

    estimate: float
    low: float
    high: float
    p_below: float
    p_above: float
    floor: float
    alpha: float
    rounds: int

    @property
    def regression(self) -> bool:
        """The speed-up is below the floor with confidence ``1 - alpha``."""
        return self.p_below <= self.alpha

    @property
    def confirmed(self) -> bool:
        """The speed-up is above the floor with confidence ``1 - alpha``."""
        return self.p_above <= self.alpha


def shift_test(baseline_s: Sequence[float], chosen_s: Sequence[float], floor: float, alpha: float) -> ShiftTest:
    """Mann–Whitney test of ``baseline / chosen`` against ``floor`` at one-sided level ``alpha``.

    ``baseline_s`` / ``chosen_s``: per-round median latencies (seconds, > 0, at least one
    each). ``floor`` > 0. Ties between a ratio and the floor count one half.
    """
    if not baseline_s or not chosen_s:
        raise ValueError("each side needs at least one sample")
    if min(*baseline_s, *chosen_s) <= 0 or floor <= 0 or not 0 < alpha < 0.5:
        raise ValueError("latencies and the floor must be > 0 and alpha in (0, 0.5)")
    x, y = np.log(np.asarray(baseline_s, float)), np.log(np.asarray(chosen_s, float))
    differences = np.sort((x[:, None] - y[None, :]).ravel())
    shift = math.log(floor)
    below = float(np.sum(differences < shift) + 0.5 * np.sum(differences == shift))
    counts = u_null_counts(len(x), len(y))
    probabilities = counts / counts.sum()
    u = np.arange(len(probabilities))
    # Under H0 (shift == log floor) the count of differences below the shift is U-distributed.
    p_below = float(probabilities[u >= below].sum())
    p_above = float(probabilities[u <= below].sum())
    cumulative = np.cumsum(probabilities)
    # c = k - 1 is the largest u with P(U <= u) <= alpha; the bounds are the (c+1)-th smallest and
    # largest differences: exactly the floors this test would confirm / reject (ties aside).
    k = int(np.searchsorted(cumulative, alpha * (1 + 1e-9), side="right"))
    total = len(differences)
    low = math.exp(differences[k - 1]) if k > 0 else 0.0
    high = math.exp(differences[total - k]) if k > 0 else math.inf
    return ShiftTest(
        estimate=math.exp(float(np.median(differences))),
        low=low,
        high=high,
        p_below=min(1.0, p_below),
        p_above=min(1.0, p_above),
        floor=floor,
        alpha=alpha,
        rounds=min(len(x), len(y)),
    )
