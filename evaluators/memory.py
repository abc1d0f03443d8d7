"""Peak memory of a workload: torch allocator peaks, NVML process-tree samples, host RSS.

Units: GB means 1e9 bytes (decimal gigabytes), as in :mod:`tuner.gpu`.

Two pieces:

* :class:`ProcessTreeSampler` -- a daemon thread that polls a process and all its
  descendants at ``sample_hz``: the summed resident set size (psutil, always)
  and the summed NVML per-process GPU memory (when NVML is available). It keeps
  the peaks. The worker points it at itself; a coordinator can point it at a
  child command's pid, whose own children then count too.
* :class:`PeakMemoryMonitor` -- the context manager a worker wraps around the
  timed runs. It resets torch's CUDA allocator peaks on entry (only when the
  workload already imported torch and initialised CUDA; this module never imports
  torch), runs a sampler on its own process tree, and reports :meth:`metrics`.

``peak_vram_gb`` / ``peak_vram_reserved_gb`` are torch's ``max_memory_allocated`` /
``max_memory_reserved`` summed over the visible devices (each device's own peak,
which need not coincide in time). ``peak_vram_nvml_gb`` is the peak of the
sampled NVML per-process memory of the tree (allocator plus CUDA context and
anything outside torch's allocator).

Peak host RSS of the window is the max of (a) the process's own high-water mark
``VmHWM`` from ``/proc/self/status``, reset on entry by writing ``5`` to
``/proc/self/clear_refs`` (Linux >= 4.0) after ``malloc_trim(0)`` (else what a warm
process freed but glibc kept reads as every later window's peak), (b) ``RUSAGE_CHILDREN``'s ``ru_maxrss``
if it rose during the window (it never resets), and (c) the sampled tree peak.
``RUSAGE_SELF``'s ``ru_maxrss`` is only a fallback where ``/proc`` is missing: it
cannot be reset, and after a fork/vfork + exec it keeps the *parent's* peak (a
worker spawned by a 1 GB coordinator reports 1 GB), so it would leak the
coordinator's or an earlier trial's peak into this one. RSS counts shared pages
once per process, so a tree sum can exceed physical use.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import threading
import time
from types import TracebackType
from typing import Any

import psutil

from tuner import gpu
from tuner.results import Metric

BYTES_PER_GB = 1e9
MIN_MONITOR_SAMPLE_HZ = 50.0
_TORCH_UNAVAILABLE = "no CUDA device / torch CUDA not in use"


class ProcessTreeSampler:
    """Poll a process tree's RSS and NVML GPU memory in a daemon thread; keep the peaks.

    ``sample_hz`` (> 0) is the target rate of memory samples. The list of pids
    in the tree is refreshed every ``tree_refresh_s`` seconds (walking ``/proc``
    for descendants costs ~1 ms); processes gone between refreshes are skipped.
    One sample is taken synchronously by :meth:`start` and one by :meth:`stop`,
    so even a short window has samples. Use as a context manager or call
    :meth:`start` / :meth:`stop` once each.
    """

    def __init__(self, root_pid: int, sample_hz: float = 100.0, *, use_nvml: bool = True,
                 tree_refresh_s: float = 0.1) -> None:
        if not sample_hz > 0:
            raise ValueError(f"sample_hz must be > 0, got {sample_hz!r}")
        if not tree_refresh_s > 0:
            raise ValueError(f"tree_refresh_s must be > 0, got {tree_refresh_s!r}")
        self.root_pid = root_pid
        self.sample_hz = float(sample_hz)
        self.tree_refresh_s = float(tree_refresh_s)
        self._use_nvml = use_nvml
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
        self._samples = 0
        self._started_at: float | None = None
        self._stopped_at: float | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Open NVML (if wanted and available), take a first sample, start the thread."""
        if self._thread is not None:
            raise RuntimeError("ProcessTreeSampler.start() called twice")
        if self._use_nvml:
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
        if self._pynvml is None:
            return None
        try:
            return gpu.tree_memory_from_handles(self._pynvml, self._handles, list(self._processes))
        except self._pynvml.NVMLError:
            return None

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


def _own_peak_rss_bytes() -> int:
    """This process's RSS high-water mark in bytes: VmHWM, else ``ru_maxrss`` (see module doc)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return _ru_maxrss_bytes(resource.RUSAGE_SELF)


def _ru_maxrss_bytes(who: int) -> int:
    """``ru_maxrss`` in bytes (Linux reports KiB, macOS bytes)."""
    maxrss = int(resource.getrusage(who).ru_maxrss)
    return maxrss if sys.platform == "darwin" else maxrss * 1024


def _reset_own_peak_rss() -> bool:
    """Reset VmHWM to the current RSS after ``malloc_trim(0)`` (see module docs); False if not permitted."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the peak may include what earlier calls freed
        pass
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _torch_cuda() -> Any:
    """``torch.cuda`` when the workload already imported torch and initialised CUDA, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = torch.cuda
        if cuda.is_available() and cuda.is_initialized():
            return cuda
    except Exception:  # a half-imported or broken torch must not break measuring
        return None
    return None


class PeakMemoryMonitor:
    """Peak memory of this process (and its children) while the ``with`` block runs.

    Entry resets torch's CUDA allocator peaks on every visible device (only if
    torch is already imported and CUDA initialised), resets the process's RSS
    high-water mark, and starts a :class:`ProcessTreeSampler` on
    ``os.getpid()`` at ``sample_hz`` (>= 50). Exit stops it and reads the
    allocator peaks. :meth:`metrics` is valid after exit; see the module
    docstring for how each figure is obtained.
    """

    def __init__(self, sample_hz: float = 100.0) -> None:
        if not sample_hz >= MIN_MONITOR_SAMPLE_HZ:
            raise ValueError(
                f"sample_hz must be >= {MIN_MONITOR_SAMPLE_HZ:g} to catch short peaks, "
                f"got {sample_hz!r}"
            )
        self.sample_hz = float(sample_hz)
        self._sampler: ProcessTreeSampler | None = None
        self._rss_reset = False
        self._children_maxrss_at_entry = 0
        self._peak_rss_bytes: int | None = None
        self._torch_allocated_bytes: int | None = None
        self._torch_reserved_bytes: int | None = None
        self._torch_reason: str = _TORCH_UNAVAILABLE
        self._torch_reset_failed = False
        self._exited = False

    @property
    def rss_window_reset(self) -> bool:
        """True when the RSS high-water mark was reset on entry (peak is for the window)."""
        return self._rss_reset

    def __enter__(self) -> "PeakMemoryMonitor":
        if self._sampler is not None:
            raise RuntimeError("PeakMemoryMonitor is single-use")
        cuda = _torch_cuda()
        if cuda is not None:
            try:
                for device in range(cuda.device_count()):
                    cuda.reset_peak_memory_stats(device)
            except Exception as error:  # peaks would include earlier work: do not report them
                self._torch_reset_failed = True
                self._torch_reason = f"could not reset torch CUDA peak stats: {error}"
        self._rss_reset = _reset_own_peak_rss()
        self._children_maxrss_at_entry = _ru_maxrss_bytes(resource.RUSAGE_CHILDREN)
        self._sampler = ProcessTreeSampler(os.getpid(), self.sample_hz)
        self._sampler.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._sampler is None:
            raise RuntimeError("PeakMemoryMonitor.__exit__ without __enter__")
        self._sampler.stop()
        self._read_torch_peaks()
        self._peak_rss_bytes = self._combined_peak_rss(self._sampler)
        self._exited = True

    def _read_torch_peaks(self) -> None:
        cuda = _torch_cuda()
        if cuda is None or self._torch_reset_failed:
            return
        try:
            devices = range(cuda.device_count())
            self._torch_allocated_bytes = sum(int(cuda.max_memory_allocated(d)) for d in devices)
            self._torch_reserved_bytes = sum(int(cuda.max_memory_reserved(d)) for d in devices)
        except Exception as error:  # report, never guess
            self._torch_allocated_bytes = self._torch_reserved_bytes = None
            self._torch_reason = f"torch CUDA allocator stats failed: {error}"

    def _combined_peak_rss(self, sampler: ProcessTreeSampler) -> int:
        candidates = [_own_peak_rss_bytes()]
        children_maxrss = _ru_maxrss_bytes(resource.RUSAGE_CHILDREN)
        if children_maxrss > self._children_maxrss_at_entry:
            candidates.append(children_maxrss)
        if sampler.peak_rss_bytes is not None:
            candidates.append(sampler.peak_rss_bytes)
        return max(candidates)

    def metrics(self) -> list[Metric]:
        """``peak_vram_gb``, ``peak_vram_reserved_gb``, ``peak_vram_nvml_gb``,
        ``peak_rss_gb`` (GB, minimize), ``memory_samples`` (count) and
        ``memory_sample_hz`` (Hz). Raises RuntimeError before the block has exited."""
        if not self._exited or self._sampler is None:
            raise RuntimeError("PeakMemoryMonitor.metrics() is available after the with block")
        sampler = self._sampler
        metrics = [
            _gb_metric("peak_vram_gb", self._torch_allocated_bytes, self._torch_reason),
            _gb_metric("peak_vram_reserved_gb", self._torch_reserved_bytes, self._torch_reason),
        ]
        if sampler.nvml_reason is not None:
            nvml_reason = sampler.nvml_reason
        else:
            nvml_reason = (
                "NVML reported no per-process memory for this process tree (no GPU work, "
                "usedGpuMemory not available, or a container PID namespace hides host PIDs)"
            )
        metrics.append(_gb_metric("peak_vram_nvml_gb", sampler.peak_nvml_bytes, nvml_reason))
        metrics.append(_gb_metric("peak_rss_gb", self._peak_rss_bytes, "no RSS readable"))
        metrics.append(Metric("memory_samples", float(sampler.samples), "count", "maximize"))
        achieved_hz = sampler.achieved_hz
        if achieved_hz is None:
            metrics.append(Metric.unavailable(
                "memory_sample_hz", "Hz", "maximize", "fewer than two samples"
            ))
        else:
            metrics.append(Metric("memory_sample_hz", achieved_hz, "Hz", "maximize"))
        return metrics


def _gb_metric(name: str, value_bytes: int | None, reason: str) -> Metric:
    if value_bytes is None:
        return Metric.unavailable(name, "GB", "minimize", reason)
    return Metric(name, value_bytes / BYTES_PER_GB, "GB", "minimize")
