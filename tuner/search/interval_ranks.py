"""A prediction's interval from a handful of held-out errors: finite-sample ranks, not interpolated quantiles.

An interval meant to hold a share ``q_high - q_low`` of measurements is bounded by order statistics of the
held-out errors of the runs fitted (log units). With ``m`` errors, the low end is the ``floor((m + 1) * q_low)``-th
smallest and the high end the ``ceil((m + 1) * q_high)``-th smallest -- the ranks split-conformal prediction uses,
so that a new error, exchangeable with the ``m``, falls outside either end with at most that share. Where a rank
falls outside the sample (fewer than ``1 / q_low - 1`` errors), the end is the sample's extreme: the widest the
errors can say, and still short of the nominal share (a study's first runs: see
``tests/search/test_interval_ranks.py``).

Interpolated quantiles (numpy's default) lie inside the extremes however few the errors, and so understate:
with under ten runs, intervals meant to hold four measurements in five held about half to three in five of a
replayed study's next settings (issue 38; ``bench/prediction_error.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["rank_bounds"]


def rank_bounds(errors: Iterable[float], interval: tuple[float, float], floor: float) -> tuple[float, float]:
    """The interval's low and high offsets from its centre (log units): the finite-sample ranks of ``errors`` at
    ``interval`` (``(q_low, q_high)``, shares in (0, 1)), at least ``floor`` (>= 0) either side. ``errors``:
    signed held-out errors, measured - predicted (log units); at least one."""
    low_share, high_share = interval
    if not 0.0 < low_share < high_share < 1.0:
        raise ValueError(f"interval must be two shares 0 < low < high < 1, got {interval}")
    ordered = sorted(float(error) for error in errors)
    if not ordered:
        raise ValueError("rank_bounds needs at least one held-out error")
    count = len(ordered)
    low_rank = math.floor((count + 1) * low_share)  # 1-based; 0: below the smallest
    high_rank = math.ceil((count + 1) * high_share)  # count + 1: above the largest
    low = ordered[low_rank - 1] if low_rank >= 1 else ordered[0]
    high = ordered[high_rank - 1] if high_rank <= count else ordered[-1]
    return min(-floor, low), max(floor, high)
