"""What measuring a candidate setting costs in device-seconds, before it runs (issue 38: spend the device only
where the answer can change) -- the denominator of :mod:`tuner.search.predicted_gain`'s gain per second.

A trial's recorded device-seconds (:mod:`tuner.storage.cost`) are its start-up, warm-ups, timed calls and
scoring. :class:`TrialCost` learns them from the study's own trials as ``a + b x latency + c x reload``:

* ``a + b x latency``: a line through the trials' (latency, device-seconds) -- ``b >= 1`` (a trial makes one
  call at least), ``a >= 0``;
* ``c``: what a trial that loaded the model again spent beyond one that did not (a warm python workload's
  ``reload_on`` values -- precision, offload, compile -- changed from the trial that started before it on the
  worker; :mod:`tuner.study.load_order`); 0 until both kinds ran, and for workloads that never reload. A
  candidate whose ``reload_on`` values differ from the last started trial's is charged it.

:class:`ShapeCosts`: with ``reference_shape.per`` a trial at a shape whose reference has not run first queues
that reference (:mod:`tuner.study.shapes`): choosing it measures two settings, and its gain and cost are both.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tuner.search.setting_features import setting_features
from tuner.spec.search.reload import reload_values, reloads_on

if TYPE_CHECKING:
    import numpy as np
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from tuner.spec.models import StudySpec

MIN_COSTS = 3
"""Fewest trials with a recorded cost and latency before the line is fitted (before: the latency itself)."""


@dataclass(frozen=True)
class CostSample:
    """One measured trial's cost evidence: when it started, its ``reload_on`` values, its latency and recorded
    device-seconds (s)."""

    started: datetime
    values: tuple[Any, ...]
    latency_s: float
    device_s: float


def device_seconds(costs: Sequence[tuple[float, float]], latency: np.ndarray) -> np.ndarray:
    """``a + b x latency`` (see the module docstring) through ``costs`` -- (latency, recorded device-seconds)
    pairs; fewer than :data:`MIN_COSTS`: the latency itself."""
    import numpy as np

    if len(costs) < MIN_COSTS:
        return latency
    x, y = np.asarray(costs).T
    slope = max(1.0, float(np.polyfit(x, y, 1)[0])) if np.ptp(x) > 0 else 1.0
    intercept = max(0.0, float(np.median(y - slope * x)))
    return intercept + slope * latency  # type: ignore[no-any-return]


class TrialCost:
    """A study's device-seconds per candidate (see the module docstring), fed the measured trials once each."""

    def __init__(self, spec: StudySpec) -> None:
        self.reload_on = reloads_on(spec)
        self.samples: list[CostSample] = []
        self._fit: tuple[float, list[tuple[float, float]]] | None = None  # (reload s, pairs) until a sample comes

    def add(self, trial: FrozenTrial, latency_s: float, device_s: float) -> None:
        """A measured trial's latency (s) and recorded device-seconds."""
        started = trial.datetime_start or trial.datetime_complete or datetime.min
        self.samples.append(CostSample(started, reload_values(self.reload_on, trial.params), latency_s, device_s))
        self._fit = None

    def reload_s(self) -> float:
        """What a reload adds to a trial (s): the median device-seconds beyond the latency line of the trials that
        reloaded, less that of those that did not; 0 when either kind has fewer than two trials."""
        if not self.reload_on or len(self.samples) < MIN_COSTS:
            return 0.0
        ordered, flags = self._in_start_order()
        if sum(flags) < 2 or len(flags) - sum(flags) < 2:
            return 0.0
        slope = _slope(ordered, flags)
        left = [s.device_s - slope * s.latency_s for s in ordered]
        reloaded = [value for value, flag in zip(left, flags, strict=True) if flag]
        kept = [value for value, flag in zip(left, flags, strict=True) if not flag]
        return max(0.0, statistics.median(reloaded) - statistics.median(kept))

    def seconds(self, latency: np.ndarray, values: Sequence[tuple[Any, ...]], loaded: tuple[Any, ...] | None) -> Any:
        """Device-seconds of candidates with predicted ``latency`` (s) and ``reload_on`` ``values``, the worker
        having ``loaded`` (None: unknown, no reload charged)."""
        import numpy as np

        if self._fit is None:  # refitted once per new sample, not per proposal
            extra = self.reload_s()
            self._fit = (extra, self._pairs(extra))
        extra, pairs = self._fit
        if extra <= 0.0 or loaded is None:
            return device_seconds(pairs, latency)
        reloads = np.asarray([value != loaded for value in values], dtype=float)
        return device_seconds(pairs, latency) + extra * reloads

    def loaded(self, trials: Sequence[FrozenTrial]) -> tuple[Any, ...] | None:
        """The ``reload_on`` values of the trial started last (running or finished, with a setting): what the
        worker has loaded when the next proposal starts; None for a workload that never reloads."""
        if not self.reload_on:
            return None
        started = [t for t in trials if t.datetime_start is not None and t.params]
        if not started:
            return None
        return reload_values(self.reload_on, max(started, key=lambda t: t.datetime_start).params)

    def _pairs(self, reload_s: float) -> list[tuple[float, float]]:
        """(latency, device-seconds less the reload where the trial reloaded) of the samples in start order."""
        ordered, flags = self._in_start_order()
        return [(s.latency_s, s.device_s - (reload_s if flag else 0.0)) for s, flag in zip(ordered, flags, strict=True)]

    def _in_start_order(self) -> tuple[list[CostSample], list[bool]]:
        """The samples in the order they started, and whether each reloaded (its ``reload_on`` values differ from
        those of the one started before it)."""
        ordered = sorted(self.samples, key=lambda sample: sample.started)
        return ordered, [index > 0 and s.values != ordered[index - 1].values for index, s in enumerate(ordered)]


def _slope(ordered: Sequence[CostSample], flags: Sequence[bool]) -> float:
    """Device-seconds per second of latency: the least-squares ``b`` of ``a + b x latency + c x reloaded`` through
    the samples, at least 1."""
    import numpy as np

    x = np.asarray([s.latency_s for s in ordered])
    if np.ptp(x) <= 0:
        return 1.0
    design = np.column_stack([np.ones(len(x)), x, np.asarray(flags, dtype=float)])
    coef = np.linalg.lstsq(design, np.asarray([s.device_s for s in ordered]), rcond=None)[0]
    return max(1.0, float(coef[1]))


class ShapeCosts:
    """Which candidates would first queue their shape's reference (see the module docstring). ``of``: each
    candidate's shape (its ``per`` values as text); ``is_reference``: whether the candidate is its shape's
    reference; ``rows`` and ``params``: each shape's reference's feature row and setting. A spec without ``per``: no shape is ever missing."""

    def __init__(
        self, spec: StudySpec, space: Mapping[str, BaseDistribution], candidates: Sequence[Mapping[str, Any]]
    ) -> None:
        from tuner.spec.quality.reference_shape import reference_at

        self.per = list(spec.reference_shape.per) if spec.reference_shape is not None else []
        self.of: list[tuple[str, ...]] = []
        self.is_reference: list[bool] = []
        self.rows: dict[tuple[str, ...], list[float]] = {}
        self.params: dict[tuple[str, ...], dict[str, Any]] = {}
        self._default: tuple[str, ...] | None = None
        for candidate in candidates:
            found = reference_at(spec, candidate)
            shape = self.shape(candidate)
            self.of.append(shape)
            self.is_reference.append(found is not None and _same(found.params, candidate))
            if found is not None and self.per and shape not in self.rows:
                self.rows[shape] = setting_features(found.params, space, prior=False)
                self.params[shape] = dict(found.params)
                if found.default:
                    self._default = shape

    def shape(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        """A setting's shape: its ``per`` parameters' values (as text)."""
        return tuple(repr(params.get(name)) for name in self.per)

    def missing(self, trials: Sequence[FrozenTrial]) -> list[tuple[str, ...]]:
        """The candidates' shapes (in a fixed order) where no trial was measured and none waits or runs; the
        spec's own reference's shape is never missing (the study measures that reference first)."""
        from tuner.storage.attributes import is_measured

        if not self.per:
            return []
        covered = {self._default}
        covered.update(
            self.shape(t.params) for t in trials if t.params and (not t.state.is_finished() or is_measured(t))
        )
        return [shape for shape in self.rows if shape not in covered]


def _same(left: Mapping[str, Any], right: Mapping[str, Any]) -> bool:
    """Whether two settings agree on every parameter of ``right`` (values compared as text, as proposals are)."""
    return all(repr(left.get(name)) == repr(value) for name, value in right.items())
