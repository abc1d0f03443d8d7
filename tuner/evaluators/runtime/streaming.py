"""Streaming figures of a call that delivers its output in chunks (an avatar's clips, a streamed answer).

A workload that generates in chunks times them with a :class:`ChunkClock` inside ``run`` and returns
:meth:`ChunkClock.metrics` from ``measured_metrics`` (the last timed call's), so they become the trial's:

* ``time_to_first_chunk_s``: from the call's start to its first chunk being ready (s);
* ``chunk_latency_p50_s`` / ``chunk_latency_p95_s``: the time each chunk took after the previous one (the
  first: after the start), 50th / 95th percentile (s);
* ``real_time_factor``: seconds of output per second of compute, the output's duration over the time to the
  last chunk (>= 1: faster than real time);
* ``stall_count``: chunks that arrive after a viewer who started playing at the first chunk needs them (chunk
  k is due when the chunks before it have played: ``first + sum(duration of chunks < k)``).

On the CPU a chunk is ready when :meth:`ChunkClock.chunk` is called (wall clock); on CUDA the clock records an
event on the current stream and reads the times once the call is over (:meth:`ChunkClock.metrics` synchronises),
so timing the chunks does not serialise the device. A workload without chunks (every clip decoded at the end)
reports one chunk: time to first chunk = the call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tuner.results import Metric
from tuner.spec.metrics import STREAMING_METRICS  # noqa: F401 - the names metrics() reports


class ChunkClock:
    """Marks a call's start and each chunk with its output duration (seconds of video / audio)."""

    def __init__(self, cuda: Any = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self._cuda = cuda  # torch.cuda when the chunks are made on a CUDA device
        self._clock = clock
        self._start: Any = None
        self._chunks: list[tuple[Any, float]] = []

    def _mark(self) -> Any:
        if self._cuda is None:
            return self._clock()
        event = self._cuda.Event(enable_timing=True)
        event.record()
        return event

    def begin(self) -> None:
        """The call starts (forgets the previous call's chunks)."""
        self._start, self._chunks = self._mark(), []

    def chunk(self, output_s: float) -> None:
        """A chunk of ``output_s`` seconds of output is ready (on CUDA: once the work queued so far is done)."""
        self._chunks.append((self._mark(), float(output_s)))

    def _seconds(self) -> list[float]:
        """Each chunk's time since the start (s)."""
        if self._cuda is None:
            return [at - self._start for at, _ in self._chunks]
        self._cuda.synchronize()
        return [self._start.elapsed_time(event) / 1000.0 for event, _ in self._chunks]

    def metrics(self) -> list[Metric]:
        """The :data:`STREAMING_METRICS` of the last call (none before a call with a chunk)."""
        if self._start is None or not self._chunks:
            return []
        ready = self._seconds()
        gaps = np.diff([0.0, *ready])
        durations = [output_s for _, output_s in self._chunks]
        due = ready[0] + np.concatenate([[0.0], np.cumsum(durations[:-1])])
        stalls = int(sum(1 for at, deadline in zip(ready, due) if at > deadline + 1e-9))
        compute_s = ready[-1]
        return [
            Metric("time_to_first_chunk_s", ready[0], "s", "minimize"),
            Metric("chunk_latency_p50_s", float(np.percentile(gaps, 50)), "s", "minimize"),
            Metric("chunk_latency_p95_s", float(np.percentile(gaps, 95)), "s", "minimize"),
            Metric("real_time_factor", sum(durations) / compute_s if compute_s > 0 else float("inf"), "1", "maximize"),
            Metric("stall_count", float(stalls), "count", "minimize"),
        ]
