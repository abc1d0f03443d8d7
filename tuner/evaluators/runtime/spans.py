"""Where a measured call's time goes: the model's work against what surrounds it.

A workload splits its ``run`` into named spans with a :class:`CallSpans` clock -- ``begin()`` at the call's
start, ``mark(name)`` where span ``name`` ends (from the previous mark) -- and returns the last call's seconds
from :meth:`tuner.workloads.base.Workload.call_spans`. The spans the tuner knows (:data:`SPAN_METRICS`):

* ``prepare``: what precedes the model's work in the call -- per-setting configuration (a scheduler swap,
  cache hooks), the generator, text conditioning fetched from a cache;
* ``model``: the model's own work (a pipeline call, the sampling loop and decode): what a bare timing of the
  model call measures;
* ``postprocess``: turning the model's result into the returned output (device to host, clip, uint8).

The worker reads the spans after each timed repeat and reports each one's median over the repeats as
``<span>_s`` (``model_s``, ``postprocess_s`` ...), plus ``outside_spans_s`` = ``latency_p50_s`` minus their sum:
what the call spent outside every span (the workload's own glue and the tuner's timing itself). With the bare
twin (:mod:`.bare_twin`) that splits the tuner's figure against a bare timing of the model call: ``model_s`` is
the model, the other spans are the workload's own host work, ``twin_ratio`` the measurement's share.

Host clock: a span ends when ``mark`` is called. A workload whose model call ends in a host copy (a pipeline
returning numpy) is exact so; one that queues device work across a mark synchronises there first (the
CUDA-aware :meth:`CallSpans.mark` does when given the device's API), which costs the overlap it removes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tuner.results import Metric

SPAN_NAMES = ("prepare", "model", "postprocess")
SPAN_METRICS: dict[str, str] = {f"{name}_s": name for name in SPAN_NAMES}
OUTSIDE_SPANS = "outside_spans_s"


class CallSpans:
    """The spans of one call at a time (see the module docstring). ``cuda``: an API with ``synchronize``
    (torch.cuda) to wait for queued device work at each mark; None: the host clock alone."""

    def __init__(self, cuda: Any = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self._cuda = cuda
        self._clock = clock
        self._last = 0.0
        self._spans: dict[str, float] = {}

    def begin(self) -> None:
        """A call starts (forgets the previous call's spans)."""
        if self._cuda is not None:
            self._cuda.synchronize()
        self._spans, self._last = {}, self._clock()

    def mark(self, name: str) -> None:
        """Span ``name`` ends now (it began at the previous mark or at ``begin``); a repeated name adds up."""
        if self._cuda is not None:
            self._cuda.synchronize()
        now = self._clock()
        self._spans[name] = self._spans.get(name, 0.0) + (now - self._last)
        self._last = now

    def seconds(self) -> dict[str, float]:
        """The last call's seconds by span name."""
        return dict(self._spans)


def span_metrics(calls: Sequence[Mapping[str, float]], latency_p50: Metric | None) -> list[Metric]:
    """``<span>_s`` (each span's median over ``calls``, the timed repeats' spans) and :data:`OUTSIDE_SPANS`;
    none when no call reported spans. Spans outside :data:`SPAN_NAMES` are reported too, as ``span_<name>_s``."""
    reported = [call for call in calls if call]
    if not reported:
        return []
    names = list(dict.fromkeys(name for call in reported for name in call))
    medians = {name: float(np.median([call.get(name, 0.0) for call in reported])) for name in names}
    metrics = [
        Metric(f"{name}_s" if name in SPAN_NAMES else f"span_{name}_s", seconds, "s", "minimize")
        for name, seconds in medians.items()
    ]
    if latency_p50 is not None and latency_p50.available and latency_p50.value is not None:
        metrics.append(Metric(OUTSIDE_SPANS, float(latency_p50.value) - sum(medians.values()), "s", "minimize"))
    return metrics
