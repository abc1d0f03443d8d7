"""Peaks of a process tree's memory, sampled in a daemon thread (:class:`ProcessTreeSampler`).

The summed resident set size of a process and all its descendants (psutil, always) and
their summed NVML per-process GPU memory (when NVML is available), polled at
``sample_hz``; the peaks are kept. The worker points it at itself (through
:class:`tuner.evaluators.memory.PeakMemoryMonitor`); a coordinator can point it at a child
command's pid, whose own children then count too. Bytes throughout.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any, Callable

import psutil

from tuner import gpu


class ProcessTreeSampler:
    """Poll a process tree's RSS and NVML GPU memory in a daemon thread; keep the peaks.

    ``sample_hz`` (> 0) is the target rate of memory samples. The list of pids
    in the tree is refreshed every ``tree_refresh_s`` seconds (walking ``/proc``
    for descendants costs ~1 ms); processes gone between refreshes are skipped.
    One sample is taken synchronously by :meth:`start` and one by :meth:`stop`,
    so even a short window has samples. Use as a context manager or call
    :meth:`start` / :meth:`stop` once each.

    ``gpu_probe`` (test support): a callable returning the tree's device memory in
    bytes, sampled instead of NVML (a simulated device's :meth:`process_memory_bytes`).
    """

    def __init__(self, root_pid: int, sample_hz: float = 100.0, *, use_nvml: bool = True,
                 tree_refresh_s: float = 0.1, gpu_probe: Callable[[], int | None] | None = None) -> None:
        if not sample_hz > 0:
            raise ValueError(f"sample_hz must be > 0, got {sample_hz!r}")
        if not tree_refresh_s > 0:
            raise ValueError(f"tree_refresh_s must be > 0, got {tree_refresh_s!r}")
        self.root_pid = root_pid
        self.sample_hz = float(sample_hz)
        self.tree_refresh_s = float(tree_refresh_s)
        self._use_nvml = use_nvml
        self._gpu_probe = gpu_probe
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._pynvml: Any = None
        self._handles: list[Any] = []
        self._nvml_reason: str | None = "NVML not sampled (use_nvml=False)"
        self._processes: dict[int, psutil.Process] = {}
        self._tree_refreshed_at = -float("inf")
        self._peak_rss_bytes: int | None = None
        self._peak_nvml_bytes: int | None = None
        self._nvml_devices: set[int] = set()
        self._samples = 0
        self._started_at: float | None = None
        self._stopped_at: float | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Open NVML (if wanted and available), take a first sample, start the thread."""
        if self._thread is not None:
            raise RuntimeError("ProcessTreeSampler.start() called twice")
        if self._gpu_probe is not None:
            self._nvml_reason = None
        elif self._use_nvml:
            self._open_nvml()
        self._started_at = time.monotonic()
        self._sample_once()
        self._thread = threading.Thread(
            target=self._run, name=f"memory-sampler-{self.root_pid}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, take a last sample, close NVML. Safe to call twice."""
        if self._thread is None or self._stopped_at is not None:
            return
        self._stop_event.set()
        self._thread.join()
        self._sample_once()
        self._stopped_at = time.monotonic()
        if self._pynvml is not None:
            try:
                self._pynvml.nvmlShutdown()
            except self._pynvml.NVMLError:
                pass
            self._pynvml = None
            self._handles = []

    def __enter__(self) -> "ProcessTreeSampler":
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # -- results -------------------------------------------------------------------
    @property
    def peak_rss_bytes(self) -> int | None:
        """Largest summed RSS of the tree over the samples; None if no process was readable."""
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
    def nvml_reason(self) -> str | None:
        """Why NVML is not sampled (None when it is)."""
        return self._nvml_reason

    @property
    def samples(self) -> int:
        """Number of samples taken so far."""
        with self._lock:
            return self._samples

    @property
    def elapsed_s(self) -> float:
        """Seconds from start to stop (or to now while running); 0 before start."""
        if self._started_at is None:
            return 0.0
        end = self._stopped_at if self._stopped_at is not None else time.monotonic()
        return end - self._started_at

    @property
    def achieved_hz(self) -> float | None:
        """Sampling intervals per second achieved; None before two samples."""
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
        period = 1.0 / self.sample_hz
        next_at = time.monotonic() + period
        while not self._stop_event.wait(max(0.0, next_at - time.monotonic())):
            self._sample_once()
            next_at += period
            now = time.monotonic()
            if next_at < now:  # fell behind: resume the rhythm instead of bursting
                next_at = now

    def _refresh_tree(self) -> None:
        now = time.monotonic()
        if now - self._tree_refreshed_at < self.tree_refresh_s:
            return
        self._tree_refreshed_at = now
        current = gpu.process_tree_pids(self.root_pid)
        found = {pid: self._processes.get(pid) or _process_or_none(pid) for pid in current}
        self._processes = {pid: p for pid, p in found.items() if p is not None}

    def _tree_rss_bytes(self) -> int | None:
        total: int | None = None
        for process in list(self._processes.values()):
            try:
                total = (total or 0) + int(process.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        return total

    def _tree_nvml_bytes(self) -> int | None:
        if self._gpu_probe is not None:
            return self._gpu_probe()
        if self._pynvml is None:
            return None
        try:
            per_device = gpu.tree_memory_by_device(self._pynvml, self._handles, list(self._processes))
        except self._pynvml.NVMLError:
            return None
        with self._lock:
            self._nvml_devices.update(index for index, used in per_device.items() if used > 0)
        return sum(per_device.values()) if per_device else None

    def _sample_once(self) -> None:
        self._refresh_tree()
        rss = self._tree_rss_bytes()
        nvml = self._tree_nvml_bytes()
        with self._lock:
            self._samples += 1
            if rss is not None and (self._peak_rss_bytes is None or rss > self._peak_rss_bytes):
                self._peak_rss_bytes = rss
            if nvml is not None and (self._peak_nvml_bytes is None or nvml > self._peak_nvml_bytes):
                self._peak_nvml_bytes = nvml


def _process_or_none(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
