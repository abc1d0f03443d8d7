"""A simulated CUDA-like device for CPU tests: asynchronous kernels, events, a caching allocator.

Not a GPU and not a model of one's speed: a test double with CUDA's *semantics*
where the tuner's measurement depends on them, so that code paths which must
synchronise, reset or read peaks fail on the CPU exactly where they would fail on
a real GPU.

* **Asynchronous kernels.** :meth:`SimulatedCudaDevice.launch` returns at once; the
  device runs kernels one after another on one queue (a kernel starts when the
  previous one ends, or at launch if the queue is idle). With ``strict=True`` (the
  default) a kernel counts as complete only once the host *waited* for it
  (:meth:`synchronize`, or :meth:`SimulatedEvent.synchronize` on a later event) --
  the worst case a real device may show, made deterministic: code that reads
  results without waiting fails every time, not on a slow day. Waiting sleeps
  until the queue's real end time, so a synchronised timer measures the kernels.
* **Events.** :meth:`SimulatedCudaDevice.event` records a point on the queue;
  :meth:`SimulatedEvent.elapsed_time` raises :class:`SimulatedCudaError` ("event
  not complete", as ``cudaEventElapsedTime`` returns ``cudaErrorNotReady``) when
  either event is not complete, else gives milliseconds between them.
* **Caching allocator.** :meth:`allocate` / :meth:`free` keep torch's counters:
  ``memory_allocated`` (live tensors), ``memory_reserved`` (segments taken from the
  device, including freed blocks kept in the cache) and their peaks since
  :meth:`reset_peak_memory_stats` (which resets each peak to its current value, as
  torch does). Freed memory stays reserved until :meth:`empty_cache`. An
  allocation that does not fit first frees the cache and retries, then raises
  :class:`SimulatedOutOfMemoryError` (classified OOM by the worker).
  :meth:`process_memory_bytes` is what NVML would report for the process: the CUDA
  context (from the first use on) plus the reserved pool.

Use it in a process by :func:`tuner.evaluators.cuda_api.install_simulated` (the workloads in
:mod:`tuner.testing.simulated_workloads` do that in ``setup``); the worker's
``synchronize``, memory monitor and cache release then act on it. Bytes and
seconds throughout, milliseconds for :meth:`SimulatedEvent.elapsed_time` as in CUDA.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tuner.errors import WorkloadError

SEGMENT_BYTES = 2 * 2**20
"""Reserved memory grows in 2 MiB segments (torch's large-segment size)."""


class SimulatedCudaError(WorkloadError, RuntimeError):
    """What the simulated device raises where CUDA returns an error (e.g. an event not complete)."""


class OutOfMemoryError(WorkloadError, MemoryError):
    """The simulated device's OOM; named like torch's so the worker classifies it the same way."""


SimulatedOutOfMemoryError = OutOfMemoryError


@dataclass
class SimulatedEvent:
    """A point on the device queue (see module docs). ``at`` is the real time it completes."""

    device: SimulatedCudaDevice
    at: float | None = None

    def record(self) -> None:
        """Mark the current end of the queue."""
        self.at = self.device._queue_end()

    def query(self) -> bool:
        """True when the event is complete (waited for, under ``strict``)."""
        return self.at is not None and self.device._complete(self.at)

    def synchronize(self) -> None:
        """Wait until the event completes."""
        if self.at is None:
            raise SimulatedCudaError("event was never recorded")
        self.device._wait_until(self.at)

    def elapsed_time(self, end: SimulatedEvent) -> float:
        """Milliseconds from this event to ``end``; raises when either is not complete."""
        if not (self.query() and end.query()):
            raise SimulatedCudaError(
                "event not complete: elapsed_time read before the device reached it (cudaErrorNotReady)"
            )
        assert self.at is not None and end.at is not None
        return (end.at - self.at) * 1000.0


@dataclass
class _Allocator:
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    live: dict[int, int] = field(default_factory=dict)


class SimulatedCudaDevice:
    """One simulated device (ordinal 0): see the module docstring for its semantics.

    ``total_bytes``: device memory; ``context_bytes``: what the CUDA context takes once
    the device is first used; ``strict``: kernels complete only when waited for;
    ``clock`` / ``sleep``: real time by default.
    """

    def __init__(
        self,
        total_bytes: int = 80 * 10**9,
        context_bytes: int = 500 * 2**20,
        strict: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.total_bytes = int(total_bytes)
        self.context_bytes = int(context_bytes)
        self.strict = strict
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._end = 0.0  # real time at which the last queued kernel ends
        self._waited = 0.0  # the host waited for everything that ends by this time
        self._memory = _Allocator()
        self._next_handle = 1
        self._initialised = False
        self.kernels_launched = 0
        self.empty_cache_calls = 0

    # -- the torch.cuda subset (tuner.evaluators.cuda_api.CudaApi) ------------------------------------
    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self._initialised

    def device_count(self) -> int:
        return 1

    def synchronize(self) -> None:
        """Wait for every queued kernel."""
        self._wait_until(self._queue_end())

    def reset_peak_memory_stats(self, device: int = 0) -> None:
        with self._lock:
            self._memory.peak_allocated = self._memory.allocated
            self._memory.peak_reserved = self._memory.reserved

    def memory_allocated(self, device: int = 0) -> int:
        return self._memory.allocated

    def memory_reserved(self, device: int = 0) -> int:
        return self._memory.reserved

    def max_memory_allocated(self, device: int = 0) -> int:
        return self._memory.peak_allocated

    def max_memory_reserved(self, device: int = 0) -> int:
        return self._memory.peak_reserved

    def empty_cache(self) -> None:
        """Return the cached (reserved but unallocated) segments to the device."""
        with self._lock:
            self.empty_cache_calls += 1
            self._memory.reserved = _segments(self._memory.allocated)

    # -- work and memory -----------------------------------------------------------
    def event(self) -> SimulatedEvent:
        """A new, unrecorded event (``torch.cuda.Event(enable_timing=True)``)."""
        return SimulatedEvent(self)

    def launch(self, duration_s: float) -> None:
        """Queue a kernel of ``duration_s`` seconds; returns at once."""
        if duration_s < 0:
            raise ValueError("a kernel cannot take negative time")
        with self._lock:
            self._initialised = True
            self.kernels_launched += 1
            self._end = max(self._clock(), self._end) + duration_s

    def allocate(self, nbytes: int) -> int:
        """Allocate ``nbytes``; returns a handle for :meth:`free`. Raises OutOfMemoryError."""
        with self._lock:
            self._initialised = True
            memory = self._memory
            need = _segments(memory.allocated + nbytes)
            grow = max(0, need - memory.reserved)
            if grow and self.context_bytes + memory.reserved + grow > self.total_bytes:
                memory.reserved = _segments(memory.allocated)  # torch frees the cache and retries
                grow = need - memory.reserved
                if self.context_bytes + need > self.total_bytes:
                    raise OutOfMemoryError(
                        f"CUDA out of memory (simulated): tried to allocate {nbytes} bytes; "
                        f"{memory.allocated} allocated, {memory.reserved} reserved of {self.total_bytes}"
                    )
            memory.reserved += grow
            memory.allocated += nbytes
            memory.peak_allocated = max(memory.peak_allocated, memory.allocated)
            memory.peak_reserved = max(memory.peak_reserved, memory.reserved)
            handle = self._next_handle
            self._next_handle += 1
            memory.live[handle] = nbytes
            return handle

    def free(self, handle: int) -> None:
        """Free an allocation; its memory stays reserved (cached)."""
        with self._lock:
            self._memory.allocated -= self._memory.live.pop(handle)

    def process_memory_bytes(self) -> int:
        """What NVML would report for this process: context (once used) + reserved pool."""
        return (self.context_bytes if self._initialised else 0) + self._memory.reserved

    # -- internals -------------------------------------------------------------------
    def _queue_end(self) -> float:
        with self._lock:
            self._end = max(self._end, self._clock()) if self._end <= self._waited else self._end
            return self._end

    def _complete(self, at: float) -> bool:
        if self.strict:
            return at <= self._waited
        return at <= self._clock()

    def _wait_until(self, at: float) -> None:
        remaining = at - self._clock()
        if remaining > 0:
            self._sleep(remaining)
        with self._lock:
            self._waited = max(self._waited, at)


def _segments(nbytes: int) -> int:
    """``nbytes`` rounded up to whole segments."""
    return -(-nbytes // SEGMENT_BYTES) * SEGMENT_BYTES
