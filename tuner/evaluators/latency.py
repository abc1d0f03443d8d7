"""Latency of a callable: warmup, device-synchronised timed repeats, adaptive stopping.

Protocol (:func:`measure_latency`)::

    warmup x (call(); synchronize())                  # not timed
    repeat:
        synchronize(); t0 = clock()
        result = call()
        synchronize(); t1 = clock()                   # sample = t1 - t0 seconds
    until  n >= min_repeats and CV <= cv_target       (converged)
       or  n == max_repeats
       or  n >= min_repeats and sum(samples) >= max_seconds   (when set)
       or  n >= 1 and the next call would end past ``deadline``   (when given)
       or  n >= 1 and min(samples) > ceiling_s x (1 + CEILING_MARGIN)   (when set: past_ceiling)
       or  n >= 2 and no threshold in [min x (1 - m), max x (1 + m)]     (when set: settled, m = CEILING_MARGIN)

With ``count_warmup_within`` set, the last warmup call is timed as a repeat is
and counted as the first sample while it lies within that share of the timed
repeats' median (``LatencySettings``): a first call as fast as the rest is not
thrown away, and one that is slower stays a warmup.

With a ``deadline`` (an absolute time on ``clock``) no call starts that is
predicted to end after it: a further repeat is predicted to take as long as
the longest timed repeat so far, a further warmup call as long as the last
one. One timed repeat is always made. A measurement the
deadline stopped before its other rules is ``cut_short``: fewer repeats than
asked, reported as such rather than lost to a timeout.

``synchronize`` waits for queued device work (e.g. ``torch.cuda.synchronize``)
so that asynchronous kernels are charged to the repeat that launched them. Each
warmup call is synchronised too: its kernels finish before the next call starts
(a workload that reads the previous call's CUDA events finds them complete), and
the warmup's measured duration, which predicts the next one under a deadline, is
the device's, not the launch's.

Statistics: times are seconds. p50/p95 use linear interpolation between order
statistics (``numpy.percentile``'s default). CV is the *sample* standard
deviation (ddof=1, Bessel-corrected) divided by the mean; it needs at least two
samples and a positive mean, otherwise it is unavailable (``None``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from tuner.results import Metric


class PhaseMarks(Protocol):
    """Where :func:`measure_latency` notes when the timed repeats begin (a dict, a phase clock's marks)."""

    def __setitem__(self, phase: str, at: float) -> None: ...


T = TypeVar("T")
CEILING_MARGIN = 0.05
"""How far past ``LatencySettings.ceiling_s`` every sample must lie to stop the repeats: a timing's own noise."""
SETTLE_MIN_SAMPLES = 2
"""The fewest timed samples whose spread can settle a trial's place (:func:`settled`): one call tells no spread."""


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"LatencySettings.{name} must be an int >= {minimum}, got {value!r}")


def _require_ratio(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
        raise ValueError(f"LatencySettings.{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class LatencySettings:
    """How to measure latency.

    ``warmup``: untimed calls first (>= 0). ``min_repeats`` / ``max_repeats``:
    bounds on timed repeats (1 <= min <= max). ``cv_target``: stop early once
    the CV is at or below this (ratio, e.g. 0.05 = 5 %). ``noisy_cv``: a final
    CV above this flags the measurement as noisy. ``max_seconds``: optional
    budget of timed seconds after which no further repeat starts (min_repeats
    are always run). ``count_warmup_within`` (ratio, optional): the last warmup
    call is timed like a repeat and counted as one -- the first of the samples --
    while it lies within this share of the timed repeats' median (a first call
    as fast as the rest is a measurement; a slow one, compiling or lazy set-up,
    stays a warmup). Counted, it bounds how far the p50 moves: half this share
    with two samples, less with more. ``ceiling_s`` (seconds, optional): once every
    timed sample so far is slower than it by more than :data:`CEILING_MARGIN`, no
    further repeat starts, min_repeats or not: the p50 is past the ceiling whatever
    the next calls take (a trial the front surely beats, :mod:`tuner.search.dominance`).
    ``thresholds_s`` (seconds): the latencies at which the trial's place on the front changes (the front's
    latencies); once :data:`SETTLE_MIN_SAMPLES` or more samples, widened by :data:`CEILING_MARGIN` each way,
    hold none of them, no further repeat starts, min_repeats or not: more repeats could move the p50, not the
    trial's place (:func:`settled`).
    """

    warmup: int = 1
    min_repeats: int = 3
    max_repeats: int = 10
    cv_target: float = 0.05
    noisy_cv: float = 0.10
    max_seconds: float | None = None
    count_warmup_within: float | None = None
    ceiling_s: float | None = None
    thresholds_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        _require_int("warmup", self.warmup, 0)
        _require_int("min_repeats", self.min_repeats, 1)
        _require_int("max_repeats", self.max_repeats, 1)
        if self.max_repeats < self.min_repeats:
            raise ValueError(
                f"LatencySettings.max_repeats ({self.max_repeats}) must be >= min_repeats ({self.min_repeats})"
            )
        _require_ratio("cv_target", self.cv_target)
        _require_ratio("noisy_cv", self.noisy_cv)
        if self.max_seconds is not None:
            _require_ratio("max_seconds", self.max_seconds)
            if self.max_seconds == 0:
                raise ValueError("LatencySettings.max_seconds must be > 0 (or None for no budget)")
        if self.count_warmup_within is not None:
            _require_ratio("count_warmup_within", self.count_warmup_within)
        if self.ceiling_s is not None:
            _require_ratio("ceiling_s", self.ceiling_s)
        object.__setattr__(self, "thresholds_s", tuple(self.thresholds_s))  # a list from JSON: hashable, frozen
        for threshold in self.thresholds_s:
            _require_ratio("thresholds_s", threshold)


def coefficient_of_variation(samples_s: list[float] | tuple[float, ...]) -> float | None:
    """Sample std (ddof=1) / mean; None with fewer than two samples or a mean <= 0."""
    if len(samples_s) < 2:
        return None
    mean = float(np.mean(samples_s))
    if mean <= 0:
        return None
    return float(np.std(samples_s, ddof=1)) / mean


@dataclass(frozen=True)
class LatencyStats:
    """Summary of the timed repeats (all times in seconds).

    ``std_s`` is the sample standard deviation (ddof=1) and ``cv`` = std / mean;
    both are None with a single sample (``cv`` also when the mean is 0).
    ``noisy`` is True when ``cv > noisy_cv`` (False when ``cv`` is None: the
    metric :meth:`to_metrics` then reports ``latency_noisy`` as unavailable).
    ``converged`` is True when the final ``cv <= cv_target``. ``cut_short`` is
    True when a deadline stopped the warmup or the repeats before the settings
    did (``warmup`` then counts the warmup calls actually made). ``warmup_counted``:
    the last warmup call was counted as a repeat (``samples_s[0]``; ``warmup``
    then excludes it: see ``LatencySettings.count_warmup_within``). ``past_ceiling``:
    the repeats stopped because every sample was past ``LatencySettings.ceiling_s``. ``settled``: the
    repeats stopped before the other rules would have, the samples clear of every threshold (:func:`settled`).
    """

    samples_s: tuple[float, ...]
    warmup: int
    p50_s: float
    p95_s: float
    mean_s: float
    std_s: float | None
    cv: float | None
    noisy: bool
    converged: bool
    cut_short: bool = False
    warmup_counted: bool = False
    past_ceiling: bool = False
    settled: bool = False

    @staticmethod
    def from_samples(
        samples_s: list[float] | tuple[float, ...],
        warmup: int,
        settings: LatencySettings,
        cut_short: bool = False,
        warmup_counted: bool = False,
        past_ceiling: bool = False,
        settled: bool = False,
    ) -> LatencyStats:
        """Summarise ``samples_s`` (at least one) under ``settings``' thresholds."""
        if not samples_s:
            raise ValueError("LatencyStats needs at least one sample")
        cv = coefficient_of_variation(samples_s)
        return LatencyStats(
            samples_s=tuple(float(s) for s in samples_s),
            warmup=warmup,
            p50_s=float(np.percentile(samples_s, 50)),
            p95_s=float(np.percentile(samples_s, 95)),
            mean_s=float(np.mean(samples_s)),
            std_s=float(np.std(samples_s, ddof=1)) if len(samples_s) >= 2 else None,
            cv=cv,
            noisy=cv is not None and cv > settings.noisy_cv,
            converged=cv is not None and cv <= settings.cv_target,
            cut_short=cut_short,
            warmup_counted=warmup_counted,
            past_ceiling=past_ceiling,
            settled=settled,
        )

    def to_metrics(self, items: int) -> list[Metric]:
        """The latency metrics; ``items`` = requests served per call (>= 1) for throughput."""
        if isinstance(items, bool) or not isinstance(items, int) or items < 1:
            raise ValueError(f"items must be an int >= 1, got {items!r}")
        spread_reason = "needs at least two repeats" if len(self.samples_s) < 2 else "mean latency is 0"
        metrics = [
            Metric("latency_p50_s", self.p50_s, "s", "minimize"),
            Metric("latency_p95_s", self.p95_s, "s", "minimize"),
            Metric("latency_mean_s", self.mean_s, "s", "minimize"),
        ]
        if self.cv is None:
            metrics.append(Metric.unavailable("latency_cv", "1", "minimize", spread_reason))
            metrics.append(Metric.unavailable("latency_noisy", "1", "minimize", spread_reason))
        else:
            metrics.append(Metric("latency_cv", self.cv, "1", "minimize"))
            metrics.append(Metric("latency_noisy", 1.0 if self.noisy else 0.0, "1", "minimize"))
        metrics.append(Metric("repeats", float(len(self.samples_s)), "count", "maximize"))
        if self.p50_s > 0:
            metrics.append(Metric("throughput_items_per_s", items / self.p50_s, "items/s", "maximize"))
        else:
            metrics.append(Metric.unavailable("throughput_items_per_s", "items/s", "maximize", "median latency is 0"))
        return metrics


def past_ceiling(samples_s: list[float], settings: LatencySettings) -> bool:
    """Every sample is slower than ``settings.ceiling_s`` by more than :data:`CEILING_MARGIN` (False without one)."""
    ceiling = settings.ceiling_s
    return ceiling is not None and bool(samples_s) and min(samples_s) > ceiling * (1 + CEILING_MARGIN)


def settled(samples_s: list[float], settings: LatencySettings) -> bool:
    """At least :data:`SETTLE_MIN_SAMPLES` samples, and no threshold of ``settings.thresholds_s`` within
    ``[min(samples) x (1 - CEILING_MARGIN), max(samples) x (1 + CEILING_MARGIN)]``: wherever the p50 lands in
    that span, the trial is faster or slower than each front trial as it is now (False without thresholds)."""
    if not settings.thresholds_s or len(samples_s) < SETTLE_MIN_SAMPLES:
        return False
    low, high = min(samples_s) * (1 - CEILING_MARGIN), max(samples_s) * (1 + CEILING_MARGIN)
    return not any(low <= threshold <= high for threshold in settings.thresholds_s)


def _should_stop(samples_s: list[float], settings: LatencySettings) -> bool:
    return past_ceiling(samples_s, settings) or _done(samples_s, settings) or settled(samples_s, settings)


def _done(samples_s: list[float], settings: LatencySettings) -> bool:
    """The protocol's own rules: max_repeats, or min_repeats with the CV target or the time budget met."""
    count = len(samples_s)
    if count >= settings.max_repeats:
        return True
    if count < settings.min_repeats:
        return False
    cv = coefficient_of_variation(samples_s)
    if cv is not None and cv <= settings.cv_target:
        return True
    return settings.max_seconds is not None and sum(samples_s) >= settings.max_seconds


def _past_deadline(clock: Callable[[], float], deadline: float | None, expected_s: float | None) -> bool:
    """True when a call expected to take ``expected_s`` seconds, started now, would end after ``deadline``."""
    return deadline is not None and expected_s is not None and clock() + expected_s > deadline


def measure_latency(
    call: Callable[[], T],
    synchronize: Callable[[], None],
    settings: LatencySettings,
    clock: Callable[[], float] = time.perf_counter,
    deadline: float | None = None,
    marks: PhaseMarks | None = None,
    warmup_call: Callable[[], Any] | None = None,
) -> tuple[LatencyStats, T]:
    """Time ``call`` under the protocol in the module docstring.

    ``clock`` returns seconds (monotonic); inject a fake one in tests.
    ``deadline`` (seconds on ``clock``, optional): no call starts that would
    end after it, except the first timed repeat. Returns the statistics and the
    value of the last (timed) call. Exceptions from ``call`` or ``synchronize``
    propagate unchanged (an OOM stays an OOM). Raises RuntimeError if ``clock``
    runs backwards. ``marks`` (optional): ``marks["measured"]`` is set to ``clock()`` when the warmup
    is over and the timed repeats begin (the worker's cost accounting splits warm-up from measured
    runs with it, even when a call then fails). ``warmup_call`` (optional): a cheaper call that warms what
    ``call`` needs (:meth:`tuner.workloads.base.Workload.warmup_settings`); the warmup calls are made with it
    and none is counted as a repeat.
    """
    count_within = settings.count_warmup_within if warmup_call is None else None
    warm = warmup_call if warmup_call is not None else call
    warmup_done = 0
    last_warmup_s: float | None = None
    for index in range(settings.warmup):
        if _past_deadline(clock, deadline, last_warmup_s):
            break
        if index == settings.warmup - 1 and count_within is not None:
            synchronize()  # the candidate for counting is timed as a repeat is
        started = clock()
        warm()
        synchronize()  # a warmup's kernels end inside the warmup: read as done, timed as they run
        warmup_done += 1
        last_warmup_s = clock() - started
    cut_short = warmup_done < settings.warmup
    candidate = last_warmup_s if warmup_done == settings.warmup else None
    if marks is not None:
        marks["measured"] = clock()
    samples_s: list[float] = []
    while True:
        synchronize()
        start = clock()
        result = call()
        synchronize()
        end = clock()
        if end < start:
            raise RuntimeError(f"clock went backwards: {start} -> {end}")
        samples_s.append(end - start)
        counted = _counted(candidate, samples_s, count_within)
        if _should_stop(counted + samples_s, settings):
            break
        if _past_deadline(clock, deadline, max(samples_s)):
            cut_short = True
            break
    every = counted + samples_s
    early = settled(every, settings) and not _done(every, settings) and not past_ceiling(every, settings)
    return LatencyStats.from_samples(
        every, warmup_done - len(counted), settings, cut_short, bool(counted), past_ceiling(every, settings), early
    ), result


def _counted(candidate: float | None, samples_s: list[float], within: float | None) -> list[float]:
    """``[candidate]`` (the last warmup call's seconds) when it counts as a repeat: it lies within ``within``
    (a share) of the median of ``samples_s``; else ``[]``."""
    if candidate is None or within is None or not samples_s:
        return []
    median = float(np.median(samples_s))
    return [candidate] if abs(candidate - median) <= within * median else []
