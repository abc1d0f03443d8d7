"""The cost structure of a measured call: its phases and its repeated steps, for a cost model.

A diffusion call is a text encoding, ``steps x (1 + CFG)`` denoiser passes and one VAE decode; an
audio-visual LLM call is its encoders and prefill, then one decoding step per new token. A workload that
knows its structure times it with a :class:`Timeline` and returns, from
:meth:`tuner.workloads.base.Workload.call_structure`, the last call's report::

    {"phases": {"text": s, "denoise": s, "decode": s, ...},   # seconds of each phase of the call
     "series": {"steps": [s, ...]} or {"tokens": [s, ...]},   # seconds of each repeated step, in order
     "counts": {"passes_per_step": 2, ...}}                  # what a step is made of (info only)

Every part is optional. The worker reads it after each timed repeat; :func:`structure_metrics` turns the
timed repeats' reports into medians (:data:`PHASE_METRICS`, :data:`SERIES_METRICS`: ``text_s``, ``denoise_s``,
``denoise_step_s``, ``decode_s``, ``prefill_s``, ``decode_token_s``), and :func:`structure_info` into the trial's
``info["call_structure"]`` (every phase's median, each step's median over the repeats, the counts): the
per-step list keeps what a median hides (a cache that skips blocks on some steps, a slow first token).

These phases lie *inside* the call's spans (:mod:`.spans`: text encoding inside ``prepare``, the denoising
steps and the decode inside ``model``): they split a span further, they are not spans, so ``outside_spans_s``
is unchanged by them. A workload that reports none (a command, an HTTP service) reports no such metric; its
cost stays a black box.

Timing: :class:`Timeline` records a mark on the host clock, or, given the CUDA API, as a CUDA event on the
current stream -- no synchronisation inside the call (each event costs a few microseconds of launch; the
host keeps queueing ahead as it would without the timeline), read once after the call, which has
synchronised by then (a pipeline that ends in a host copy, or the worker's own synchronise).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tuner.results import Metric

PHASE_METRICS: dict[str, str] = {"text": "text_s", "denoise": "denoise_s", "decode": "decode_s", "prefill": "prefill_s"}
"""Phase name -> metric (s, the median over the timed repeats of the phase's seconds in one call)."""
SERIES_METRICS: dict[str, str] = {"steps": "denoise_step_s", "tokens": "decode_token_s"}
"""Series name -> metric (s, the median over the timed repeats of one call's median step)."""
STRUCTURE_METRICS: tuple[str, ...] = (*PHASE_METRICS.values(), *SERIES_METRICS.values())
MAX_SERIES = 1024
"""Steps kept per series in ``info["call_structure"]`` (the first ones; the metrics use every step)."""


class Timeline:
    """Named marks of one call, each ending an interval that began at the previous mark (or at ``start``).

    ``cuda``: an API with ``Event`` (torch.cuda) to mark on the device's current stream without waiting; None:
    the host clock (exact where the work marked is done on the host, or synchronised before the mark)."""

    def __init__(self, cuda: Any = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self._cuda = cuda
        self._clock = clock
        self._marks: list[tuple[str, Any]] = []

    def start(self) -> None:
        """A call starts (forgets the previous call's marks)."""
        self._marks = [("", self._now())]

    def mark(self, name: str) -> None:
        """An interval named ``name`` ends now; ignored before :meth:`start`."""
        if self._marks:
            self._marks.append((name, self._now()))

    def intervals(self) -> list[tuple[str, float]]:
        """``(name, seconds)`` of every interval in order (CUDA: waits for the last mark's event, then reads
        the elapsed times)."""
        if len(self._marks) < 2:
            return []
        stamps = [stamp for _, stamp in self._marks]
        if self._cuda is not None:
            stamps[-1].synchronize()
            seconds = [stamps[i - 1].elapsed_time(stamps[i]) / 1000.0 for i in range(1, len(stamps))]
        else:
            seconds = [stamps[i] - stamps[i - 1] for i in range(1, len(stamps))]
        return [(name, max(0.0, float(s))) for (name, _), s in zip(self._marks[1:], seconds)]

    def _now(self) -> Any:
        if self._cuda is None:
            return self._clock()
        event = self._cuda.Event(enable_timing=True)
        event.record()
        return event


def named(intervals: Sequence[tuple[str, float]], name: str) -> list[float]:
    """The seconds of every interval called ``name``, in order."""
    return [seconds for label, seconds in intervals if label == name]


def structure_metrics(calls: Sequence[Mapping[str, Any]]) -> list[Metric]:
    """Medians over ``calls`` (the timed repeats' reports, see the module docstring) of each phase of
    :data:`PHASE_METRICS` and of each call's median step of :data:`SERIES_METRICS`, in s; none when no call
    reported the phase or series."""
    metrics = []
    for name, metric in PHASE_METRICS.items():
        values = [float(call["phases"][name]) for call in calls if name in (call.get("phases") or {})]
        if values:
            metrics.append(Metric(metric, float(np.median(values)), "s", "minimize"))
    for name, metric in SERIES_METRICS.items():
        medians = [float(np.median(steps)) for call in calls if (steps := (call.get("series") or {}).get(name))]
        if medians:
            metrics.append(Metric(metric, float(np.median(medians)), "s", "minimize"))
    return metrics


def structure_info(calls: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``info["call_structure"]`` of ``calls``: ``<phase>_s`` (every phase's median, s), ``<series>_s`` (each
    step's median over the calls when they have as many steps, else the last call's steps; at most
    :data:`MAX_SERIES`, rounded to the microsecond), ``<series>`` (its length), the last call's counts and
    ``calls`` (how many reported); None when none did."""
    reported = [call for call in calls if call]
    if not reported:
        return None
    info: dict[str, Any] = {}
    phases = list(dict.fromkeys(name for call in reported for name in (call.get("phases") or {})))
    for name in phases:
        values = [float(call["phases"][name]) for call in reported if name in (call.get("phases") or {})]
        info[f"{name}_s"] = round(float(np.median(values)), 6)
    series = list(dict.fromkeys(name for call in reported for name in (call.get("series") or {})))
    for name in series:
        runs = [list(map(float, call["series"][name])) for call in reported if name in (call.get("series") or {})]
        steps = np.median(np.array(runs), axis=0).tolist() if len({len(run) for run in runs}) == 1 else runs[-1]
        info[name] = len(steps)
        info[f"{name}_s"] = [round(float(s), 6) for s in steps[:MAX_SERIES]]
    info.update({str(k): v for k, v in (reported[-1].get("counts") or {}).items()})
    info["calls"] = len(reported)
    return info


__all__ = [
    "PHASE_METRICS",
    "SERIES_METRICS",
    "STRUCTURE_METRICS",
    "Timeline",
    "named",
    "structure_info",
    "structure_metrics",
]
