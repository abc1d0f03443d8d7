"""The measurement's CUDA paths on the simulated asynchronous device (CPU; no GPU involved).

The device (``tuner.testing.simulated_cuda``) completes a kernel only once the host
waited for it, raises on an event read too early and keeps a caching allocator's
counters, so each test here fails on code that forgets a synchronise, a reset or a
cache release, exactly where a real GPU would make it fail.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tuner.evaluators import cuda_api
from tuner.evaluators.latency import LatencySettings, measure_latency
from tuner.evaluators.memory import PeakMemoryMonitor
from tuner.testing.simulated_cuda import OutOfMemoryError, SimulatedCudaDevice, SimulatedCudaError
from tuner.testing.simulated_workloads import SimulatedKernelWorkload
from tuner.workloads.base import RunContext

MIB = 2**20
GB = 1e9


@pytest.fixture()
def device() -> Iterator[SimulatedCudaDevice]:
    """A fresh simulated device installed as this process's CUDA for the test."""
    simulated = SimulatedCudaDevice(total_bytes=16 * 2**30)
    cuda_api.install_simulated(simulated)
    yield simulated
    cuda_api.uninstall_simulated()


def _context(tmp_path: Path) -> RunContext:
    return RunContext(device="cuda", seed=0, inputs={}, workdir=tmp_path)


def _workload(device: SimulatedCudaDevice) -> SimulatedKernelWorkload:
    workload = SimulatedKernelWorkload.__new__(SimulatedKernelWorkload)
    SimulatedKernelWorkload.__init__(workload)
    workload.device = device  # the fixture's device, not the process-wide one
    return workload


def test_kernels_are_asynchronous_and_events_raise_before_completion(device: SimulatedCudaDevice) -> None:
    start, end = device.event(), device.event()
    launched = time.monotonic()
    start.record()
    device.launch(0.05)
    end.record()
    assert not end.query(), "a launch returns before the kernel ends"
    with pytest.raises(SimulatedCudaError, match="not complete"):
        start.elapsed_time(end)
    end.synchronize()
    assert time.monotonic() - launched >= 0.05
    assert start.elapsed_time(end) == pytest.approx(50.0, abs=1.0)


def test_caching_allocator_keeps_freed_blocks_until_empty_cache(device: SimulatedCudaDevice) -> None:
    block = device.allocate(1000 * MIB)
    device.free(block)
    assert device.memory_allocated() == 0 and device.memory_reserved() >= 1000 * MIB
    device.reset_peak_memory_stats()
    assert device.max_memory_reserved() >= 1000 * MIB, "a reset peak starts at the current reserved pool"
    assert device.process_memory_bytes() == device.context_bytes + device.memory_reserved()
    device.empty_cache()
    assert device.memory_reserved() == 0
    with pytest.raises(OutOfMemoryError, match="out of memory"):
        device.allocate(17 * 2**30)


def test_warmup_is_synchronised_so_event_reads_of_the_previous_call_succeed(
    device: SimulatedCudaDevice, tmp_path: Path
) -> None:
    """The GPU check's kernel workload reads the previous call's events; unsynchronised warmup calls
    leave that kernel running, and the read raises (every latency_truth trial would CRASH)."""
    workload, context = _workload(device), _context(tmp_path)
    params = {"kernel_ms": 20}
    stats, output = measure_latency(
        lambda: workload.run(params, context),
        workload.synchronize,
        LatencySettings(warmup=3, min_repeats=3, max_repeats=3),
    )
    assert stats.warmup == 3 and len(stats.samples_s) == 3
    assert output.counters["kernel_ms_previous"] == pytest.approx(20.0, abs=1.0)
    assert min(stats.samples_s) >= 0.02, "a synchronised repeat is charged with its kernel"


def test_warmup_duration_under_a_deadline_is_the_devices_not_the_launchs(
    device: SimulatedCudaDevice, tmp_path: Path
) -> None:
    """A 0.3 s kernel under a 0.5 s deadline: after one warmup call the next would end past it.
    Timing the launch instead (no synchronise) reads ~0 s and queues every warmup."""
    workload, context = _workload(device), _context(tmp_path)
    params = {"kernel_ms": 300, "read_previous_events": False}
    stats, _ = measure_latency(
        lambda: workload.run(params, context),
        workload.synchronize,
        LatencySettings(warmup=5, min_repeats=1, max_repeats=1),
        deadline=time.perf_counter() + 0.5,
    )
    assert stats.warmup == 1 and stats.cut_short
    assert device.kernels_launched == 2, "one warmup call and the one timed repeat"


def test_an_unsynchronised_timer_reads_the_launch_not_the_kernel(device: SimulatedCudaDevice, tmp_path: Path) -> None:
    """The device is a faithful test double: without a synchronise the timer misses the kernel."""
    workload, context = _workload(device), _context(tmp_path)
    params = {"kernel_ms": 50, "read_previous_events": False}
    stats, _ = measure_latency(
        lambda: workload.run(params, context), lambda: None, LatencySettings(warmup=0, min_repeats=2, max_repeats=2)
    )
    assert max(stats.samples_s) < 0.05
    device.synchronize()


def test_monitor_reports_per_window_peaks_after_a_larger_window(device: SimulatedCudaDevice) -> None:
    """A warm worker's second, smaller trial: the cache of the first is returned on entry, so the
    reserved, NVML-like and device figures are the small trial's own."""
    weights = device.allocate(500 * MIB)
    with PeakMemoryMonitor() as large:
        device.free(device.allocate(4000 * MIB))
    with PeakMemoryMonitor() as small:
        device.free(device.allocate(1000 * MIB))
    big, little = ({m.name: m for m in monitor.metrics()} for monitor in (large, small))
    assert big["peak_vram_reserved_gb"].value == pytest.approx(4500 * MIB / GB, rel=0.01)
    assert little["peak_vram_reserved_gb"].value == pytest.approx(1500 * MIB / GB, rel=0.01)
    assert little["peak_vram_gb"].value == pytest.approx(1500 * MIB / GB, rel=0.01)
    context_gb = device.context_bytes / GB
    assert little["peak_vram_nvml_gb"].value == pytest.approx(1500 * MIB / GB + context_gb, rel=0.01)
    assert little["peak_vram_device_gb"].value == little["peak_vram_nvml_gb"].value, "the larger figure decides"
    assert device.empty_cache_calls == 2
    device.free(weights)


def test_a_failed_cache_release_makes_the_pool_figures_unavailable(
    device: SimulatedCudaDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("driver said no")

    monkeypatch.setattr(device, "empty_cache", broken)
    with PeakMemoryMonitor() as monitor:
        device.free(device.allocate(100 * MIB))
    metrics = {m.name: m for m in monitor.metrics()}
    for name in ("peak_vram_reserved_gb", "peak_vram_nvml_gb", "peak_vram_device_gb"):
        assert not metrics[name].available and "driver said no" in str(metrics[name].reason), name
    assert metrics["peak_vram_gb"].available, "live tensors' peak does not depend on the cache"


def test_device_figure_falls_back_to_the_pool_without_nvml(device: SimulatedCudaDevice) -> None:
    """Sampler off (or NVML blind): the device figure is the reserved peak, NVML's says why not."""
    with PeakMemoryMonitor(sample_hz=0) as monitor:
        device.free(device.allocate(300 * MIB))
    metrics = {m.name: m for m in monitor.metrics()}
    assert not metrics["peak_vram_nvml_gb"].available and "memory_sample_hz: 0" in str(
        metrics["peak_vram_nvml_gb"].reason
    )
    assert metrics["peak_vram_device_gb"].value == metrics["peak_vram_reserved_gb"].value
    assert metrics["memory_samples"].value == 0 and metrics["peak_rss_gb"].available
