"""GPU utilization, power and energy per output (issue 40, item 2): read through NVML on the devices a trial's
processes hold memory on; unavailable with the reason on a CPU. NVML is simulated at its boundary only (this
machine has no NVIDIA driver); the processes and the sampler are real."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import pytest

from tuner import gpu
from tuner.evaluators.memory import PeakMemoryMonitor
from tuner.evaluators.runtime.device_activity import DeviceActivity
from tuner.results import Metric
from tuner.runner.measure.trial import energy_per_output

GIB = 2**30


@dataclass
class SimulatedProcess:
    pid: int
    usedGpuMemory: int | None


@dataclass
class SimulatedUtilization:
    gpu: int
    memory: int = 0


class SimulatedNvmlError(Exception):
    pass


class SimulatedPynvml:
    """Stands in for ``pynvml``: two devices; this test's process holds 1 GiB on device 1 only, which runs at
    80 % and 250 W (device 0, another job's, at 5 % and 90 W, must not count)."""

    NVMLError = SimulatedNvmlError
    NVMLError_FunctionNotFound = SimulatedNvmlError

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: int) -> list[SimulatedProcess]:
        return [SimulatedProcess(os.getpid(), GIB)] if handle == 1 else []

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: int) -> list[SimulatedProcess]:
        return []

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: int) -> list[SimulatedProcess]:
        return []

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimulatedUtilization:
        return SimulatedUtilization(80 if handle == 1 else 5)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 250_000 if handle == 1 else 90_000  # mW

    NVML_CLOCK_SM = 1

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return 1755 if handle == 1 else 345  # MHz


def by_name(metrics: list[Metric]) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


def test_utilization_and_power_of_the_trials_own_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_import_pynvml", lambda: SimulatedPynvml())
    with PeakMemoryMonitor(sample_hz=50) as monitor:
        time.sleep(0.5)
    metrics = by_name(monitor.metrics())
    assert metrics["gpu_util_mean_pct"].value == pytest.approx(80.0)
    assert metrics["gpu_util_peak_pct"].value == pytest.approx(80.0)
    assert metrics["gpu_power_mean_w"].value == pytest.approx(250.0), "another job's device does not count"
    assert metrics["gpu_sm_clock_mean_mhz"].value == pytest.approx(1755.0)
    energy = energy_per_output(
        metrics["gpu_power_mean_w"], Metric("throughput_items_per_s", 0.5, "items/s", "maximize")
    )
    assert energy.value == pytest.approx(500.0)  # 250 W at 0.5 videos per second: 500 J per video


def test_on_a_cpu_the_figures_are_unavailable_with_the_reason() -> None:
    with PeakMemoryMonitor(sample_hz=50) as monitor:
        time.sleep(0.05)
    metrics = by_name(monitor.metrics())
    for name in ("gpu_util_mean_pct", "gpu_util_peak_pct", "gpu_power_mean_w", "gpu_sm_clock_mean_mhz"):
        assert metrics[name].value is None and "NVML" in str(metrics[name].reason), metrics[name]
    energy = energy_per_output(
        metrics["gpu_power_mean_w"], Metric("throughput_items_per_s", 2.0, "items/s", "maximize")
    )
    assert energy.value is None and energy.reason == metrics["gpu_power_mean_w"].reason


def test_a_device_that_cannot_report_power_is_named() -> None:
    class NoPower(SimulatedPynvml):
        def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
            raise SimulatedNvmlError("Not Supported")

    activity = DeviceActivity()
    pynvml: Any = NoPower()
    activity.sample(pynvml, [0, 1], [1], now=1.0)
    metrics = by_name(activity.metrics(None))
    assert metrics["gpu_util_mean_pct"].value == pytest.approx(80.0)
    assert metrics["gpu_power_mean_w"].value is None and "power: Not Supported" in str(
        metrics["gpu_power_mean_w"].reason
    )
