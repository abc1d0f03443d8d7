"""Intervals that hold what they claim: their ends from held-out errors, widened by the study's own errors out of
sample (issue 38).

A prediction's interval comes from the held-out (leave-one-out) errors of the runs its model was fitted on
(:class:`tuner.search.prediction.LogRidge`), its ends at finite-sample ranks of them (:func:`rank_bounds`: of m
errors the floor((m + 1) q_low)-th and the ceil((m + 1) q_high)-th smallest, the ranks split-conformal prediction
uses, the extremes where a rank falls outside them; interpolated quantiles lie inside the extremes however few
the errors, and on a study's first runs held about half the measurements or less). Those understate the error at the settings a sampler asks next --
away from the runs, where the model extrapolates: meant to hold four measurements in five, such intervals held
about two in three on the replayed tables (docs/benchmarks.md). Each trial that ran with a prediction recorded
before it (the coordinator's ``prediction`` attribute) is a measurement the model had not seen: its error
``log(measured / predicted)`` is out of sample. :class:`RecordedErrors` keeps the latest :data:`WINDOW` of them
per metric; from :data:`MIN_ERRORS` on, an interval reaches at least the ``coverage`` quantile of their absolute
values either side of its centre (a split-conformal bound on the study's own record), and never narrows.

Only the study's own trials count (a warm start's were predicted on another GPU type), only measured ones with
both figures positive. A metric predicted on its own scale (a quality) keeps ``measured - predicted``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any

WINDOW = 20
"""The latest recorded errors per metric that bound an interval (older ones came from models fitted on fewer runs)."""
MIN_ERRORS = 3
"""Fewest recorded errors of a metric before they widen its intervals."""


class RecordedErrors:
    """The study's recorded prediction errors per metric (see the module docstring). ``coverage``: the share of
    measurements an interval is meant to hold (0.8: four in five)."""

    def __init__(self, coverage: float, linear: Collection[str] = ()) -> None:
        if not 0.0 < coverage < 1.0:
            raise ValueError(f"coverage must lie in (0, 1), got {coverage}")
        self.coverage = coverage
        self._linear = set(linear)
        self._errors: dict[str, list[float]] = {}

    def add(self, prediction: Mapping[str, Any] | None, figures: Mapping[str, Any]) -> None:
        """Take in one finished own trial: its recorded ``prediction`` attribute (metric -> {"value", ...}) and its
        measured figures (metric -> {"value", ...}). A metric without both values is left out."""
        for name, predicted in (prediction or {}).items():
            value = _number(predicted.get("value") if isinstance(predicted, Mapping) else None)
            measured = _number((figures.get(name) or {}).get("value"))
            if value is None or measured is None:
                continue
            if name in self._linear:
                error = measured - value
            elif value > 0 and measured > 0:
                error = math.log(measured) - math.log(value)
            else:
                continue
            kept = self._errors.setdefault(name, [])
            kept.append(error)
            del kept[:-WINDOW]

    def half_width(self, name: str) -> float | None:
        """The ``coverage`` quantile of the metric's latest absolute errors (log units; a quality's own units);
        None before :data:`MIN_ERRORS` of them."""
        errors = sorted(abs(error) for error in self._errors.get(name, ()))
        if len(errors) < MIN_ERRORS:
            return None
        position = self.coverage * (len(errors) - 1)  # linear interpolation between order statistics
        below = math.floor(position)
        above = min(below + 1, len(errors) - 1)
        return errors[below] + (errors[above] - errors[below]) * (position - below)

    def widened(self, name: str, centre: float, low: float, high: float) -> tuple[float, float]:
        """The interval ``[low, high]`` around ``centre`` (the model's scale: log units, or a quality's own),
        widened to at least :meth:`half_width` either side; unchanged before :data:`MIN_ERRORS` errors."""
        width = self.half_width(name)
        if width is None:
            return low, high
        return min(low, centre - width), max(high, centre + width)


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


def _number(value: Any) -> float | None:
    """``value`` as a finite float; None for anything else (missing, a bool, NaN, infinite)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
