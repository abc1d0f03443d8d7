"""Peak memory: host RSS (own and children), sampling rate, honest GPU unavailability."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

from tuner import gpu
from tuner.evaluators.memory import PeakMemoryMonitor, ProcessTreeSampler
from tuner.results import Metric

GB = 1e9

# A child that allocates and touches ~200 MB, says so, then sleeps.
ALLOCATING_CHILD = textwrap.dedent(
    """
    import sys, time
    block = b"x" * 200_000_000
    print("allocated", flush=True)
    time.sleep(float(sys.argv[1]))
    """
)

# A command that starts ALLOCATING_CHILD as its own child and waits for it.
PARENT_COMMAND = textwrap.dedent(
    """
    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
    sys.exit(child.wait())
    """
)


def _metrics(monitor: PeakMemoryMonitor) -> dict[str, Metric]:
    return {m.name: m for m in monitor.metrics()}


def _torch_cuda_in_use() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())


def _sample_until(sampler: ProcessTreeSampler, threshold_bytes: float, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        peak = sampler.peak_rss_bytes
        if peak is not None and peak >= threshold_bytes:
            return
        time.sleep(0.02)


def test_peak_rss_rises_by_an_allocation_inside_the_window() -> None:
    with PeakMemoryMonitor() as monitor:
        rss_before = psutil.Process().memory_info().rss  # after the monitor trimmed the heap on entry
        block = np.ones(300_000_000 // 8)  # 300 MB, written (touched) by np.ones
        time.sleep(0.1)
        del block
    peak = _metrics(monitor)["peak_rss_gb"]
    assert peak.available and peak.unit == "GB" and peak.direction == "minimize"
    rise_gb = peak.value - rss_before / GB
    assert rise_gb >= 0.27
    if monitor.rss_window_reset:  # otherwise the lifetime high-water mark may be higher
        assert rise_gb <= 0.5


def test_sampler_on_this_process_sees_a_childs_memory() -> None:
    own_rss = psutil.Process().memory_info().rss
    with ProcessTreeSampler(os.getpid(), sample_hz=100) as sampler:
        child = subprocess.Popen([sys.executable, "-c", ALLOCATING_CHILD, "1.0"], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "allocated"
            _sample_until(sampler, own_rss + 0.18 * GB, timeout_s=0.8)
        finally:
            child.wait(timeout=30)
    assert sampler.peak_rss_bytes is not None
    assert sampler.peak_rss_bytes - own_rss >= 0.18 * GB


def test_sampler_on_a_command_counts_the_commands_children() -> None:
    command = subprocess.Popen(
        [sys.executable, "-c", PARENT_COMMAND, ALLOCATING_CHILD, "1.5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        with ProcessTreeSampler(command.pid, sample_hz=100, tree_refresh_s=0.05) as sampler:
            assert command.stdout is not None and command.stdout.readline().strip() == "allocated"
            _sample_until(sampler, 0.2 * GB, timeout_s=1.0)
    finally:
        command.wait(timeout=30)
    assert sampler.peak_rss_bytes is not None
    assert sampler.peak_rss_bytes >= 0.2 * GB  # the grandchild's 200 MB plus two interpreters


def test_monitor_samples_at_least_at_50_hz() -> None:
    with PeakMemoryMonitor(sample_hz=100) as monitor:
        time.sleep(0.5)
    metrics = _metrics(monitor)
    assert metrics["memory_samples"].value >= 15
    assert metrics["memory_samples"].unit == "count"
    rate = metrics["memory_sample_hz"]
    assert rate.available and rate.unit == "Hz" and rate.value >= 25


def test_gpu_metrics_are_unavailable_with_a_reason_without_cuda() -> None:
    with PeakMemoryMonitor() as monitor:
        pass
    metrics = _metrics(monitor)
    if not _torch_cuda_in_use():
        for name in ("peak_vram_gb", "peak_vram_reserved_gb"):
            assert metrics[name].value is None
            assert metrics[name].reason == "no CUDA device / torch CUDA not in use"
            assert metrics[name].unit == "GB"
    nvml_ok, nvml_reason = gpu.nvml_available()
    nvml_metric = metrics["peak_vram_nvml_gb"]
    if not nvml_ok:
        assert nvml_metric.value is None
        assert nvml_metric.reason == f"NVML unavailable: {nvml_reason}"
    elif nvml_metric.value is None:  # NVML works but this CPU-only process holds no GPU memory
        assert nvml_metric.reason and "no per-process memory" in nvml_metric.reason


def test_monitor_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from tuner.evaluators.memory import PeakMemoryMonitor\n"
        "with PeakMemoryMonitor() as m: pass\n"
        "m.metrics()\n"
        "print('torch' in sys.modules)\n"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert output.strip() == "False"


def test_monitor_rejects_slow_sampling_and_early_metrics() -> None:
    with pytest.raises(ValueError, match="sample_hz"):
        PeakMemoryMonitor(sample_hz=49)
    monitor = PeakMemoryMonitor()
    with pytest.raises(RuntimeError):
        monitor.metrics()


def test_sampler_lifecycle_and_nvml_opt_out() -> None:
    sampler = ProcessTreeSampler(os.getpid(), sample_hz=200, use_nvml=False)
    assert sampler.samples == 0 and sampler.achieved_hz is None
    sampler.start()
    with pytest.raises(RuntimeError):
        sampler.start()
    time.sleep(0.05)
    sampler.stop()
    sampler.stop()  # second stop is a no-op
    assert sampler.samples >= 2
    assert sampler.peak_rss_bytes is not None and sampler.peak_rss_bytes > 0
    assert sampler.peak_nvml_bytes is None
    assert sampler.nvml_reason == "NVML not sampled (use_nvml=False)"
    with pytest.raises(ValueError):
        ProcessTreeSampler(os.getpid(), sample_hz=0)


def test_sampler_on_a_finished_process_reports_nothing() -> None:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait(timeout=30)
    with ProcessTreeSampler(finished.pid, sample_hz=100) as sampler:
        time.sleep(0.05)
    assert sampler.peak_rss_bytes is None
    assert sampler.peak_nvml_bytes is None


@pytest.mark.gpu
def test_peak_vram_tracks_a_cuda_allocation() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch.cuda.init()
    with PeakMemoryMonitor() as monitor:
        block = torch.ones(256 * 1024 * 1024, dtype=torch.float32, device="cuda")  # 1.07 GB
        torch.cuda.synchronize()
        time.sleep(0.1)
        del block
    metrics = _metrics(monitor)
    assert metrics["peak_vram_gb"].value == pytest.approx(1.073741824, abs=0.05)
    assert metrics["peak_vram_reserved_gb"].value >= metrics["peak_vram_gb"].value
    nvml = metrics["peak_vram_nvml_gb"]
    if nvml.value is None:
        pytest.skip(f"NVML per-process memory not visible here: {nvml.reason}")
    assert nvml.value >= 1.0  # allocation plus the CUDA context
