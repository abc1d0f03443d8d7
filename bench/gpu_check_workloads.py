"""Workloads of known cost for ``bench/gpu_check.py``: ground truths the tuner's measurements are held to.

Not models. Each one does a thing whose true duration or memory is known
independently of the tuner, so the tuner's report can be compared with it:

* :class:`CudaSleepWorkload` -- one ``torch.cuda._sleep`` kernel of ``kernel_ms``
  milliseconds (cycles calibrated in ``setup`` with CUDA events), launched
  asynchronously: ``run`` returns before the GPU is done, so a latency that
  forgets to synchronise reads microseconds. Each output carries, as counter
  ``kernel_ms_previous``, the CUDA-event duration of the *previous* run's kernel
  (complete by then), the truth the reported latency is compared with.
* :class:`HostSleepWorkload` -- the same contract on the CPU (``time.sleep``), so the
  check's plumbing runs without a GPU (``gpu_check.py --cpu-plumbing``, used by a test).
* :class:`VramSpikeWorkload` -- holds ``spike_gib`` GiB of device memory for
  ``spike_ms`` milliseconds, then frees it back to the driver (``empty_cache``):
  a short spike the allocator peak and the NVML process sampler must both catch.

Units: ms are milliseconds, GiB are 2**30 bytes.
"""

from __future__ import annotations

import math
import time
from typing import Any, Mapping

from tuner.workloads.base import InvalidSetting, RunContext, Workload, WorkloadOutput

CALIBRATION_CYCLES = 20_000_000
"""Cycles of the calibration kernel (about 10 ms on a 2 GHz SM clock)."""


class CudaSleepWorkload(Workload):
    """One calibrated ``torch.cuda._sleep`` kernel per run (see module docs). Param ``kernel_ms`` > 0."""

    def __init__(self) -> None:
        self.cycles = 0
        self.events: tuple[Any, Any] | None = None

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        import torch

        if not context.device.startswith("cuda") or not torch.cuda.is_available():
            raise InvalidSetting(f"CudaSleepWorkload needs a CUDA device, got {context.device!r}")
        kernel_ms = float(params["kernel_ms"])
        torch.cuda._sleep(CALIBRATION_CYCLES)  # warm the clocks and the launch path
        torch.cuda.synchronize()
        rates = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(CALIBRATION_CYCLES)
            end.record()
            end.synchronize()
            rates.append(CALIBRATION_CYCLES / start.elapsed_time(end))
        cycles_per_ms = sorted(rates)[len(rates) // 2]
        self.cycles = int(kernel_ms * cycles_per_ms)
        self.events = None

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        import torch

        counters: dict[str, float] = {}
        if self.events is not None:  # the previous kernel finished: the worker synchronised after it
            counters["kernel_ms_previous"] = float(self.events[0].elapsed_time(self.events[1]))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(self.cycles)
        end.record()
        self.events = (start, end)
        return WorkloadOutput(counters=counters)


class HostSleepWorkload(Workload):
    """``time.sleep(kernel_ms / 1000)`` per run; counter ``kernel_ms_previous`` is the previous run's
    sleep as ``time.perf_counter`` measured it (the CPU stand-in of :class:`CudaSleepWorkload`)."""

    def __init__(self) -> None:
        self.previous_ms = math.nan

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        counters = {} if math.isnan(self.previous_ms) else {"kernel_ms_previous": self.previous_ms}
        started = time.perf_counter()
        time.sleep(float(params["kernel_ms"]) / 1000.0)
        self.previous_ms = (time.perf_counter() - started) * 1000.0
        return WorkloadOutput(counters=counters)


class VramSpikeWorkload(Workload):
    """Hold ``spike_gib`` GiB on the device for ``spike_ms`` ms per run, then free it (see module docs).
    ``spike_gib: 0`` allocates nothing: the baseline of the process's own device memory."""

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        import torch

        if not context.device.startswith("cuda") or not torch.cuda.is_available():
            raise InvalidSetting(f"VramSpikeWorkload needs a CUDA device, got {context.device!r}")
        torch.zeros(1, device="cuda")  # the CUDA context exists before the measured window
        torch.cuda.synchronize()

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        import torch

        spike_bytes = int(float(params["spike_gib"]) * 2**30)
        held = torch.ones(spike_bytes // 4, dtype=torch.float32, device="cuda") if spike_bytes else None
        torch.cuda.synchronize()
        time.sleep(float(params["spike_ms"]) / 1000.0)
        del held
        torch.cuda.empty_cache()
        return WorkloadOutput(counters={"spike_bytes": float(spike_bytes)})
