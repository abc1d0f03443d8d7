"""Peaks of a process tree's memory, sampled in a daemon thread (:class:`ProcessTreeSampler`).

The summed resident set size of a process and all its descendants and their summed NVML
per-process GPU memory (when NVML is available); the peaks are kept. The worker points it at
itself (through :class:`tuner.evaluators.memory.PeakMemoryMonitor`); a coordinator can point it
at a child command's pid, whose own children then count too. Bytes throughout.

What a sample costs (issue 27), on Linux: the kernel keeps each process's RSS high-water mark
(``VmHWM``), so a spike *between* two reads of a process that is still alive at the second is
not lost. Fast sampling is kept only where that does not suffice: a process other than the
sampling one, which could spike and exit between two reads, and GPU memory (NVML keeps no
high-water mark). The tree is not re-walked per sample (:mod:`tuner.evaluators.proc_tree`:
members' files stay open, births are found by pid; all of ``/proc`` is re-scanned every
``tree_refresh_s``, a safety net). Without ``/proc``: the psutil walk. ``bench/memory_sampler.py``
measures the cost.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from tuner import gpu
from tuner.evaluators.proc_tree import ProcTree, PsutilTree
from tuner.evaluators.runtime.device_activity import DeviceActivity

SLOW_HZ = 10.0
"""Sampling rate while the sampling process is alone in its tree, settled, holding no GPU memory."""
SETTLE_S = 0.25
"""Seconds of fast sampling after the start and after any birth or exit in the tree."""
NVML_ALL_DEVICES_S = 1.0
"""Most seconds between NVML queries of every device; in between only devices the tree was seen on."""


class ProcessTreeSampler:
    """Poll a process tree's RSS and NVML GPU memory in a daemon thread; keep the peaks.

    Rates: ``sample_hz`` (> 0) for ``settle_s`` seconds after the start and after any birth or
    exit in the tree, and for as long as the tree holds a process other than the sampling one or
    holds GPU memory; otherwise (the sampling process alone, whose spikes its high-water mark
    keeps and which is read again by :meth:`stop`) ``slow_hz`` = ``min(SLOW_HZ, sample_hz)``.
    Births are looked for at every sample. The marks (``status``) are read at ``slow_hz``, on a
    member's first read and by :meth:`start` / :meth:`stop`; the samples in between read the
    current RSS (``statm``). Use as a context manager or call :meth:`start` / :meth:`stop` once each.

    RSS peak: the largest sum over the samples of each member's RSS at the sample, or its
    ``VmHWM`` where that rose since its previous read (the spike in between). So it is at least
    the tree's RSS at every sample instant, and a member's spike of any length counts if the
    member is read once after it, alive; two members' spikes between the same two reads are
    summed though they need not coincide. Members alive at :meth:`start` count from their RSS
    then (their earlier marks are not the window's); members born later count their whole mark.
    A member counts until it exits (an orphan too).

    ``gpu_probe`` (test support): a callable returning the tree's device memory in bytes, sampled
    instead of NVML (a simulated device's :meth:`process_memory_bytes`). NVML queries every
    device at least every ``NVML_ALL_DEVICES_S``, in between only those the tree was seen on.
    """

    def __init__(
        self,
        root_pid: int,
        sample_hz: float = 100.0,
        *,
        use_nvml: bool = True,
        tree_refresh_s: float = 5.0,
        settle_s: float = SETTLE_S,
        gpu_probe: Callable[[], int | None] | None = None,
    ) -> None:
        if not sample_hz > 0:
            raise ValueError(f"sample_hz must be > 0, got {sample_hz!r}")
        if not tree_refresh_s > 0:
            raise ValueError(f"tree_refresh_s must be > 0, got {tree_refresh_s!r}")
        self.root_pid = root_pid
        self.sample_hz = float(sample_hz)
        self.slow_hz = min(SLOW_HZ, self.sample_hz)
        self.tree_refresh_s = float(tree_refresh_s)
        self.settle_s = float(settle_s)
        self._own_pid = os.getpid()
        self._use_nvml = use_nvml
        self._gpu_probe = gpu_probe
        self._lock = threading.Lock()
        self._wake_read, self._wake_write = -1, -1
        self._thread: threading.Thread | None = None
        self._pynvml: Any = None
        self._handles: list[Any] = []
        self._nvml_reason: str | None = "NVML not sampled (use_nvml=False)"
        self._nvml_all_at = -float("inf")
        self._tree: ProcTree | PsutilTree | None = None
        self._scanned_at = self._marks_at = 0.0
        self._changed_at = 0.0
        self._holds_gpu = False
        self._peak_rss_bytes: int | None = None
        self._peak_nvml_bytes: int | None = None
        self._nvml_devices: set[int] = set()
        self.activity = DeviceActivity()  # utilization and power of the devices the tree holds memory on
        self._samples = 0
        self._started_at: float | None = None
        self._stopped_at: float | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Open NVML (if wanted and available), find the tree, take a first sample, start the thread."""
        if self._thread is not None:
            raise RuntimeError("ProcessTreeSampler.start() called twice")
        if self._gpu_probe is not None:
            self._nvml_reason = None
        elif self._use_nvml:
            self._open_nvml()
        self._started_at = self._scanned_at = self._changed_at = time.monotonic()
        self._tree = ProcTree(self.root_pid) if ProcTree.usable() else PsutilTree(self.root_pid, self.tree_refresh_s)
        self._wake_read, self._wake_write = os.pipe()
        self._sample_once(force_marks=True)
        self._thread = threading.Thread(target=self._run, name=f"memory-sampler-{self.root_pid}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, take a last sample, close NVML and the tree's files. Safe to call twice."""
        if self._thread is None or self._stopped_at is not None:
            return
        os.write(self._wake_write, b"x")
        self._thread.join()
        self._sample_once(force_marks=True)
        self._stopped_at = time.monotonic()
        for fd in (self._wake_read, self._wake_write):
            os.close(fd)
        if self._tree is not None:
            self._tree.close()
        if self._pynvml is not None:
            try:
                self._pynvml.nvmlShutdown()
            except self._pynvml.NVMLError:
                pass
            self._pynvml = None
            self._handles = []

    def __enter__(self) -> ProcessTreeSampler:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    # -- results -------------------------------------------------------------------
    @property
    def peak_rss_bytes(self) -> int | None:
        """Largest summed RSS of the tree (see the class doc); None if no process was readable."""
        with self._lock:
            return self._peak_rss_bytes

    @property
    def peak_nvml_bytes(self) -> int | None:
        """Largest summed NVML GPU memory of the tree; None if NVML knew none (see nvml_reason)."""
        with self._lock:
            return self._peak_nvml_bytes

    @property
    def nvml_devices(self) -> list[int]:
        """NVML indices on which NVML saw the tree hold memory in any sample (sorted; [] when none)."""
        with self._lock:
            return sorted(self._nvml_devices)

    @property
    def simulated(self) -> bool:
        """Whether a ``gpu_probe`` stands in for NVML (test support)."""
        return self._gpu_probe is not None

    @property
    def nvml_reason(self) -> str | None:
        """Why NVML is not sampled (None when it is)."""
        return self._nvml_reason

    @property
    def samples(self) -> int:
        """Number of samples taken so far."""
        with self._lock:
            return self._samples

    @property
    def current_hz(self) -> float:
        """The rate the next sample is scheduled at: ``sample_hz`` or ``slow_hz`` (see the class doc)."""
        with self._lock:
            members = list(self._tree.members) if self._tree is not None else []
            fast = (
                self._holds_gpu
                or time.monotonic() - self._changed_at < self.settle_s
                or any(pid != self._own_pid for pid in members)
            )
        return self.sample_hz if fast else self.slow_hz

    @property
    def elapsed_s(self) -> float:
        """Seconds from start to stop (or to now while running); 0 before start."""
        if self._started_at is None:
            return 0.0
        end = self._stopped_at if self._stopped_at is not None else time.monotonic()
        return end - self._started_at

    @property
    def achieved_hz(self) -> float | None:
        """Sampling intervals per second achieved on average (fast and slow); None before two samples."""
        elapsed, samples = self.elapsed_s, self.samples
        return (samples - 1) / elapsed if samples >= 2 and elapsed > 0 else None

    # -- internals -----------------------------------------------------------------
    def _open_nvml(self) -> None:
        try:
            pynvml = gpu._import_pynvml()
            pynvml.nvmlInit()
        except gpu.NvmlUnavailable as error:
            self._nvml_reason = f"NVML unavailable: {error}"
            return
        except Exception as error:  # pynvml.NVMLError; pynvml may be half-imported
            self._nvml_reason = f"NVML unavailable: NVML init failed: {error}"
            return
        try:
            self._handles = gpu.all_device_handles(pynvml)
        except pynvml.NVMLError as error:
            pynvml.nvmlShutdown()
            self._nvml_reason = f"NVML unavailable: cannot list devices: {error}"
            return
        self._pynvml = pynvml
        self._nvml_reason = None

    def _run(self) -> None:
        next_at = time.monotonic() + 1.0 / self.current_hz
        while not select.select([self._wake_read], [], [], max(0.0, next_at - time.monotonic()))[0]:
            self._sample_once()
            next_at += 1.0 / self.current_hz
            now = time.monotonic()
            if next_at < now:  # fell behind: resume the rhythm instead of bursting
                next_at = now

    def _tree_nvml_bytes(self, pids: list[int]) -> int | None:
        if self._gpu_probe is not None:
            return self._gpu_probe()
        if self._pynvml is None:
            return None
        now = time.monotonic()
        indices = sorted(self._nvml_devices)
        if not indices or now - self._nvml_all_at >= NVML_ALL_DEVICES_S:
            indices, self._nvml_all_at = list(range(len(self._handles))), now
        try:
            found = gpu.tree_memory_by_device(self._pynvml, [self._handles[i] for i in indices], pids)
        except self._pynvml.NVMLError:
            return None
        per_device = {indices[position]: used for position, used in found.items()}
        with self._lock:
            self._nvml_devices.update(index for index, used in per_device.items() if used > 0)
        return sum(per_device.values()) if per_device else None

    def _sample_once(self, force_marks: bool = False) -> None:
        assert self._tree is not None
        now = time.monotonic()
        full = now - self._scanned_at >= self.tree_refresh_s
        marks = force_marks or full or now - self._marks_at >= 1.0 / self.slow_hz
        if full:
            self._scanned_at = now
        if marks:
            self._marks_at = now
        settling = now - self._changed_at < self.settle_s
        added = self._tree.update(full) if marks or settling else False
        rss, exited = self._tree.sample(marks)
        nvml = self._tree_nvml_bytes(list(self._tree.members))
        if self._pynvml is not None:
            self.activity.sample(self._pynvml, self._handles, self.nvml_devices, now)
        with self._lock:
            self._samples += 1
            if added or exited:
                self._changed_at = now
            self._holds_gpu = bool(nvml)
            if rss is not None and (self._peak_rss_bytes is None or rss > self._peak_rss_bytes):
                self._peak_rss_bytes = rss
            if nvml is not None and (self._peak_nvml_bytes is None or nvml > self._peak_nvml_bytes):
                self._peak_nvml_bytes = nvml
