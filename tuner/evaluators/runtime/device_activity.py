"""GPU utilization and power of the devices a trial's process tree runs on, read through NVML.

The memory sampler (:class:`~tuner.evaluators.process_tree.ProcessTreeSampler`) calls :meth:`DeviceActivity.sample`
with each of its samples, at most every :data:`ACTIVITY_EVERY_S`: NVML's utilization is itself an average over
its last sample period (1/6 s to 1 s by device), so faster reads add cost and no information. Only the devices
NVML saw the tree hold memory on count (the trial's own; another job's GPU is not this trial's activity).

Figures (:meth:`DeviceActivity.metrics`), over the monitored window (the measurement: warm-up and timed repeats):
``gpu_util_mean_pct`` / ``gpu_util_peak_pct`` (the devices' mean of NVML's ``gpu`` utilization, %), and
``gpu_power_mean_w`` (their summed board power, W), ``gpu_sm_clock_mean_mhz`` (their mean SM clock, MHz: a
clock below the board's boost under load is throttling, power or heat). Each is unavailable with the reason where NVML is not
read (a CPU trial, no driver) or read nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from tuner.results import Metric

ACTIVITY_EVERY_S = 0.1
"""Fewest seconds between two utilization / power reads."""


class DeviceActivity:
    """Running means and the peak of utilization, power and the SM clock (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._util_sum = 0.0
        self._util_reads = 0
        self._util_peak: float | None = None
        self._power_sum_w = 0.0
        self._power_reads = 0
        self._problem: str | None = None
        self._clock_sum_mhz = 0.0
        self._clock_reads = 0
        self._clock_problem: str | None = None

    def sample(self, pynvml: Any, handles: Sequence[Any], devices: Sequence[int], now: float) -> None:
        """Read utilization and power of ``devices`` (NVML indices into ``handles``) unless read in the last
        :data:`ACTIVITY_EVERY_S`; a device NVML cannot answer for is left out of that read."""
        if not devices or now - self._read_at < ACTIVITY_EVERY_S:
            return
        self._read_at = now
        utilizations, watts, clocks = [], 0.0, []
        powered = 0
        for index in devices:
            try:
                clocks.append(float(pynvml.nvmlDeviceGetClockInfo(handles[index], getattr(pynvml, "NVML_CLOCK_SM", 1))))
            except Exception as error:  # noqa: BLE001 - pynvml.NVMLError (not supported on this device)
                self._clock_problem = f"SM clock: {error}"
            try:
                utilizations.append(float(pynvml.nvmlDeviceGetUtilizationRates(handles[index]).gpu))
            except Exception as error:  # noqa: BLE001 - pynvml.NVMLError (not supported on this device)
                self._problem = f"utilization: {error}"
            try:
                watts += pynvml.nvmlDeviceGetPowerUsage(handles[index]) / 1000.0  # mW
                powered += 1
            except Exception as error:  # noqa: BLE001
                self._problem = f"power: {error}"
        with self._lock:
            if utilizations:
                mean = sum(utilizations) / len(utilizations)
                self._util_sum += mean
                self._util_reads += 1
                self._util_peak = mean if self._util_peak is None else max(self._util_peak, mean)
            if powered:
                self._power_sum_w += watts
                self._power_reads += 1
            if clocks:
                self._clock_sum_mhz += sum(clocks) / len(clocks)
                self._clock_reads += 1

    @property
    def power_mean_w(self) -> float | None:
        """Mean summed board power over the reads (W); None when none was read."""
        with self._lock:
            return self._power_sum_w / self._power_reads if self._power_reads else None

    def metrics(self, unread: str | None) -> list[Metric]:
        """``gpu_util_mean_pct``, ``gpu_util_peak_pct``, ``gpu_power_mean_w``; ``unread``: why NVML was not read
        (None when it was)."""
        with self._lock:
            util_mean = self._util_sum / self._util_reads if self._util_reads else None
            util_peak = self._util_peak
            clock_mean = self._clock_sum_mhz / self._clock_reads if self._clock_reads else None
        why = unread or self._problem or "NVML saw no GPU memory of this trial's processes: no device to read"
        return [
            _metric("gpu_util_mean_pct", util_mean, "%", "maximize", why),
            _metric("gpu_util_peak_pct", util_peak, "%", "maximize", why),
            _metric("gpu_power_mean_w", self.power_mean_w, "W", "minimize", why),
            _metric("gpu_sm_clock_mean_mhz", clock_mean, "MHz", "maximize", unread or self._clock_problem or why),
        ]


def _metric(name: str, value: float | None, unit: str, direction: str, why: str) -> Metric:
    if value is None:
        return Metric.unavailable(name, unit, direction, why)  # type: ignore[arg-type]
    return Metric(name, value, unit, direction)  # type: ignore[arg-type]
