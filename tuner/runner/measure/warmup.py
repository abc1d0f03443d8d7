"""How many untimed warm-up calls a trial makes before its timed repeats.

``measurement.warmup`` is an int or ``auto`` (:class:`tuner.spec.measure.measurement.MeasurementSpec`):

* an int ``n``: ``max(n, workload.warmup_calls(params))`` -- the spec's calls are a floor, and the workload
  raises them for what it knows is new (torch.compile's first call of a shape, CUDA graph capture);
* ``auto``: when the workload knows its warm-up (:meth:`tuner.workloads.base.Workload.knows_warmup`), exactly
  ``workload.warmup_calls(params)`` -- none for a setting whose shape, backend, compiled graph and calibration
  this process has already run, so a warm worker spends the device on measured calls; a workload that cannot
  tell gets ``max(AUTO_UNKNOWN, warmup_calls)``, the spec's default. And a warm-up call that proves as fast as
  the timed repeats (within :data:`COUNT_WITHIN` of their median) is counted as one of them, its time measured.

Latency truth: a workload that knows its warm-up promises that a call it asks none for is as fast as one after
a warm-up. ``tests/runner/test_warmup_auto.py`` holds a known-answer workload's p50 within 2 % whether the
warm-up was skipped or made, and shows that a wrongly skipped one would move it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.workloads.base import Workload

AUTO = "auto"
COUNT_WITHIN = 0.04
"""Under ``auto`` the last warm-up call is timed and counted as a repeat while it lies within this share of the
repeats' median (:class:`tuner.evaluators.latency.LatencySettings`): the p50 moves at most half of it (two
samples; less with more), within issue 38's 2 %."""
AUTO_UNKNOWN = 1
"""The warm-up calls ``auto`` gives a setting whose workload cannot tell what it needs (the spec's default)."""


def floor_of(asked: Any) -> int:
    """The spec's warm-up as the int floor the latency protocol takes: ``auto`` counts as :data:`AUTO_UNKNOWN`
    (the figure a timeout's forecast and the cut-short note use); an int is itself."""
    return AUTO_UNKNOWN if asked == AUTO else int(asked)


def counted_within(asked: Any) -> float | None:
    """:data:`COUNT_WITHIN` under ``auto`` (a warm-up call as fast as the repeats counts as one); None for an int
    (the spec's warm-up calls are never counted)."""
    return COUNT_WITHIN if asked == AUTO else None


def planned_warmup(asked: Any, workload: Workload, params: Mapping[str, Any]) -> int:
    """The warm-up calls this trial makes: ``asked`` is the request's ``measurement.warmup`` (an int, ``auto``,
    or None for the protocol's default 1); ``workload`` is set up for ``params`` (module docstring)."""
    needed = max(0, int(workload.warmup_calls(params) or 0))
    if asked == AUTO:
        return needed if workload.knows_warmup() else max(AUTO_UNKNOWN, needed)
    return max(1 if asked is None else int(asked), needed)
