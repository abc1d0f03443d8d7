"""Peak memory of a workload: torch allocator peaks, NVML process-tree samples, host RSS.

Units: GB means 1e9 bytes (decimal gigabytes), as in :mod:`tuner.gpu`.

Two pieces:

* :class:`~tuner.evaluators.process_tree.ProcessTreeSampler` (its own module) -- a daemon thread
  that samples a process and all its descendants: the summed resident set size (each process's
  kernel high-water mark where it rose between two samples, so a short spike of a process still
  alive at the next sample is kept) and the summed NVML per-process GPU memory (when NVML is
  available). It keeps the peaks. It samples at ``sample_hz`` while that matters (the first
  0.25 s, after a process starts or exits, while there are child processes or GPU memory) and at
  10 Hz while this process is alone in its tree (its own spikes its high-water mark keeps):
  about 0.5 % of a core for a sleeping trial instead of ~5 % (``bench/memory_sampler.py``).
  The worker points it at itself; a coordinator can point it at a child command's pid, whose
  own children then count too.
* :class:`PeakMemoryMonitor` -- the context manager a worker wraps around the
  timed runs. It resets torch's CUDA allocator peaks on entry (only when the
  workload already imported torch and initialised CUDA; this module never imports
  torch), runs a sampler on its own process tree, and reports :meth:`metrics`.

``peak_vram_gb`` / ``peak_vram_reserved_gb`` are torch's ``max_memory_allocated`` /
``max_memory_reserved`` summed over the visible devices (each device's own peak,
which need not coincide in time). ``peak_vram_nvml_gb`` is the peak of the
sampled NVML per-process memory of the tree (allocator plus CUDA context and
anything outside torch's allocator).

``peak_vram_device_gb`` is the figure that decides an out-of-memory error, the one
GPU-memory constraints of in-process workloads should bound: the most device memory
the process was seen to hold, the larger of the NVML peak (context, the allocator's
whole pool with its fragmentation and cache, library workspaces) and the reserved
peak (the pool alone). A CUDA allocation fails when the device cannot give the pool
another segment, so what counts is everything the process holds on the device, not
the live tensors (``peak_vram_gb``), which omit the context (~0.3-0.6 GB) and the
fragmentation that grows exactly where settings approach the wall. Where NVML cannot
see the process (a container's PID namespace), it is the reserved peak: still a lower
bound, short of the context only.

Per-trial figures in a warm worker: on entry the monitor returns the allocator's
cached, unused blocks to the driver (:func:`tuner.evaluators.cuda_api.release_cached_memory`), so
the reserved and NVML peaks start from what the kept model really holds, not from
the previous, larger trial's cache; if that fails, those figures are reported
unavailable with the reason. ``sample_hz=0`` turns the process-tree sampler off
(the allocator peaks and the RSS high-water mark remain; NVML's is unavailable).

Peak host RSS of the window is the max of (a) the process's own high-water mark
``VmHWM`` from ``/proc/self/status``, reset on entry by writing ``5`` to
``/proc/self/clear_refs`` (Linux >= 4.0) after ``malloc_trim(0)`` (else what a warm
process freed but glibc kept reads as every later window's peak), (b) ``RUSAGE_CHILDREN``'s ``ru_maxrss``
if it rose during the window (it never resets): the peak of every descendant reaped through a
child this process waited for in the window, however short it lived, and (c) the sampled tree peak.
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
from types import TracebackType

from tuner.evaluators.cuda_api import active_cuda, release_cached_memory
from tuner.evaluators.process_tree import ProcessTreeSampler
from tuner.results import Metric

BYTES_PER_GB = 1e9
MIN_MONITOR_SAMPLE_HZ = 50.0
_TORCH_UNAVAILABLE = "no CUDA device / torch CUDA not in use"
SAMPLER_OFF = "memory sampler off (measurement.memory_sample_hz: 0)"


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


class PeakMemoryMonitor:
    """Peak memory of this process (and its children) while the ``with`` block runs.

    Entry (when CUDA is in use: :func:`tuner.evaluators.cuda_api.active_cuda`, torch's or a
    simulated device) returns the allocator's cached blocks to the driver and
    resets its peaks on every visible device; then it resets the process's RSS
    high-water mark and starts a :class:`ProcessTreeSampler` on ``os.getpid()``
    at ``sample_hz`` (>= 50, the fast rate; 0: no sampler). Exit stops it and reads the
    allocator peaks. :meth:`metrics` is valid after exit; see the module
    docstring for how each figure is obtained.
    """

    def __init__(self, sample_hz: float = 100.0) -> None:
        if not (sample_hz == 0 or sample_hz >= MIN_MONITOR_SAMPLE_HZ):
            raise ValueError(
                f"sample_hz must be >= {MIN_MONITOR_SAMPLE_HZ:g} to catch short peaks (or 0: no sampler), "
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
        self._cache_problem: str | None = None
        self._entered = False
        self._exited = False

    @property
    def nvml_devices(self) -> list[int]:
        """NVML indices on which NVML saw this process tree hold device memory during the window."""
        return self._sampler.nvml_devices if self._sampler is not None else []

    @property
    def rss_window_reset(self) -> bool:
        """True when the RSS high-water mark was reset on entry (peak is for the window)."""
        return self._rss_reset

    def __enter__(self) -> PeakMemoryMonitor:
        if self._entered:
            raise RuntimeError("PeakMemoryMonitor is single-use")
        self._entered = True
        cuda = active_cuda()
        if cuda is not None:
            self._cache_problem = release_cached_memory()
            try:
                for device in range(cuda.device_count()):
                    cuda.reset_peak_memory_stats(device)
            except Exception as error:  # peaks would include earlier work: do not report them
                self._torch_reset_failed = True
                self._torch_reason = f"could not reset torch CUDA peak stats: {error}"
        self._rss_reset = _reset_own_peak_rss()
        self._children_maxrss_at_entry = _ru_maxrss_bytes(resource.RUSAGE_CHILDREN)
        if self.sample_hz > 0:
            probe = getattr(cuda, "process_memory_bytes", None)  # a simulated device's stand-in for NVML
            self._sampler = ProcessTreeSampler(os.getpid(), self.sample_hz, gpu_probe=probe)
            self._sampler.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if not self._entered:
            raise RuntimeError("PeakMemoryMonitor.__exit__ without __enter__")
        if self._sampler is not None:
            self._sampler.stop()
        self._read_torch_peaks()
        self._peak_rss_bytes = self._combined_peak_rss(self._sampler)
        self._exited = True

    def _read_torch_peaks(self) -> None:
        cuda = active_cuda()
        if cuda is None or self._torch_reset_failed:
            return
        try:
            devices = range(cuda.device_count())
            self._torch_allocated_bytes = sum(int(cuda.max_memory_allocated(d)) for d in devices)
            self._torch_reserved_bytes = sum(int(cuda.max_memory_reserved(d)) for d in devices)
        except Exception as error:  # report, never guess
            self._torch_allocated_bytes = self._torch_reserved_bytes = None
            self._torch_reason = f"torch CUDA allocator stats failed: {error}"

    def _combined_peak_rss(self, sampler: ProcessTreeSampler | None) -> int:
        candidates = [_own_peak_rss_bytes()]
        children_maxrss = _ru_maxrss_bytes(resource.RUSAGE_CHILDREN)
        if children_maxrss > self._children_maxrss_at_entry:
            candidates.append(children_maxrss)
        if sampler is not None and sampler.peak_rss_bytes is not None:
            candidates.append(sampler.peak_rss_bytes)
        return max(candidates)

    def _activity_metrics(self) -> list[Metric]:
        """GPU utilization and power over the window (:mod:`tuner.evaluators.runtime.device_activity`)."""
        sampler = self._sampler
        if sampler is None:
            from tuner.evaluators.runtime.device_activity import DeviceActivity

            return DeviceActivity().metrics(SAMPLER_OFF)
        return sampler.activity.metrics(_unread_reason(sampler))

    def metrics(self) -> list[Metric]:
        """``peak_vram_gb``, ``peak_vram_reserved_gb``, ``peak_vram_nvml_gb``, ``peak_vram_device_gb``,
        ``peak_rss_gb`` (GB, minimize), the devices' ``gpu_util_mean_pct`` / ``gpu_util_peak_pct`` (%) and
        ``gpu_power_mean_w`` (W), ``memory_samples`` (count) and ``memory_sample_hz`` (Hz, the
        average achieved rate, fast and slow phases together).
        Raises RuntimeError before the block has exited."""
        if not self._exited:
            raise RuntimeError("PeakMemoryMonitor.metrics() is available after the with block")
        sampler = self._sampler
        reserved = self._torch_reserved_bytes
        if sampler is None:
            nvml, nvml_reason = None, SAMPLER_OFF
        else:
            nvml, nvml_reason = (
                sampler.peak_nvml_bytes,
                sampler.nvml_reason
                or (
                    "NVML reported no per-process memory for this process tree (no GPU work, "
                    "usedGpuMemory not available, or a container PID namespace hides host PIDs)"
                ),
            )
        pool_reason = self._torch_reason
        if self._cache_problem is not None:  # the peaks may hold an earlier trial's cache: not this trial's
            reserved = nvml = None
            nvml_reason = pool_reason = f"{self._cache_problem}; the peak would include earlier trials' cache"
        seen = [value for value in (nvml, reserved) if value is not None]
        device_reason = nvml_reason if pool_reason == _TORCH_UNAVAILABLE else f"{pool_reason}; NVML: {nvml_reason}"
        metrics = [
            _gb_metric("peak_vram_gb", self._torch_allocated_bytes, self._torch_reason),
            _gb_metric("peak_vram_reserved_gb", reserved, pool_reason),
            _gb_metric("peak_vram_nvml_gb", nvml, nvml_reason),
            _gb_metric("peak_vram_device_gb", max(seen) if seen else None, device_reason),
            _gb_metric("peak_rss_gb", self._peak_rss_bytes, "no RSS readable"),
            Metric("memory_samples", float(sampler.samples if sampler else 0), "count", "maximize"),
        ]
        metrics += self._activity_metrics()
        achieved_hz = sampler.achieved_hz if sampler is not None else None
        if achieved_hz is None:
            metrics.append(
                Metric.unavailable(
                    "memory_sample_hz", "Hz", "maximize", SAMPLER_OFF if sampler is None else "fewer than two samples"
                )
            )
        else:
            metrics.append(Metric("memory_sample_hz", achieved_hz, "Hz", "maximize"))
        return metrics


def _unread_reason(sampler: ProcessTreeSampler | None) -> str | None:
    """Why the sampler read no GPU utilization or power (None when it read NVML)."""
    if sampler is None:
        return SAMPLER_OFF
    if sampler.nvml_reason is not None:
        return sampler.nvml_reason
    if sampler.simulated:
        return "a simulated device: NVML reports no utilization or power for it"
    return None


def _gb_metric(name: str, value_bytes: int | None, reason: str) -> Metric:
    if value_bytes is None:
        return Metric.unavailable(name, "GB", "minimize", reason)
    return Metric(name, value_bytes / BYTES_PER_GB, "GB", "minimize")
