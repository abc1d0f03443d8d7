"""The bare twin of a measured call: the same loaded call timed with nothing of the tuner around it.

After the tuner's measured repeats (warm-up, timed repeats, the memory sampler running), the worker times
``measurement.bare_twin`` more calls of the same loaded workload with the same setting and input: synchronise,
start, call, synchronise, stop -- on a CUDA device with CUDA events recorded around the call on the current
stream, elsewhere with the monotonic clock; no memory sampler, no adaptive stopping, no deadline bookkeeping.
It reports ``bare_p50_s`` and ``twin_ratio`` = the tuner's ``latency_p50_s`` / ``bare_p50_s``: how much of the
tuner's figure is the tuner. A ratio near 1 says the measurement adds nothing; what is left above it is the
workload's own work outside the model call (its ``run`` converting the output) or the measurement's. Calls
start only while the input's share of the measurement window has room for one more (the last call's time),
so the twin never pushes a trial into its timeout; with no room it is unavailable with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tuner.results import Metric


def bare_timings(
    call: Callable[[], Any],
    synchronize: Callable[[], None],
    repeats: int,
    deadline: float,
    cuda: Any = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Seconds of up to ``repeats`` bare calls (see the module docstring); none starts that would end after
    ``deadline`` (``clock``'s seconds) by the last call's time. ``cuda``: an API with ``Event`` (torch.cuda)."""
    seconds: list[float] = []
    last = 0.0
    for _ in range(repeats):
        if clock() + last > deadline:
            break
        synchronize()
        if cuda is not None and hasattr(cuda, "Event"):
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            synchronize()
            last = start.elapsed_time(end) / 1000.0
        else:
            began = clock()
            call()
            synchronize()
            last = clock() - began
        seconds.append(last)
    return seconds


def twin_metrics(seconds: list[float], tuner_p50: Metric | None) -> list[Metric]:
    """``bare_p50_s`` and ``twin_ratio`` from the bare calls' ``seconds`` and the tuner's p50."""
    if not seconds:
        why = "no time left in the measurement window for a bare call"
        return [
            Metric.unavailable("bare_p50_s", "s", "minimize", why),
            Metric.unavailable("twin_ratio", "1", "minimize", why),
        ]
    bare = float(np.median(seconds))
    metrics = [Metric("bare_p50_s", bare, "s", "minimize")]
    if tuner_p50 is None or not tuner_p50.available or tuner_p50.value is None or bare <= 0:
        metrics.append(Metric.unavailable("twin_ratio", "1", "minimize", "no tuner p50 (or a bare call of 0 s)"))
    else:
        metrics.append(Metric("twin_ratio", float(tuner_p50.value) / bare, "1", "minimize"))
    return metrics
