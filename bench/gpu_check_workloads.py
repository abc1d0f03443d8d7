"""Workloads of known cost for ``bench/gpu_check.py``: ground truths the tuner's measurements are held to.

Not models. Each one does a thing whose true duration or memory is known
independently of the tuner, so the tuner's report can be compared with it:

* :class:`CudaSleepWorkload` -- ``torch.cuda._sleep`` kernels of ``kernel_ms``
  milliseconds in all (cycles calibrated in ``setup`` with CUDA events), split
  into ``launches`` kernels (default 1; many short ones make the run bound by
  the CPU's launch path, where a sampler thread in the same process costs
  time), launched asynchronously: ``run`` returns before the GPU is done, so a
  latency that forgets to synchronise reads microseconds. Each output carries,
  as counter ``kernel_ms_previous``, the CUDA-event duration of the *previous*
  run's kernels (``run`` waits on that run's end event first: warm-up runs
  are not synchronised by every caller), the truth the reported latency is
  compared with.
* :class:`HostSleepWorkload` -- the same contract on the CPU (``time.sleep``; with
  ``launches`` > 1 a busy Python loop, bound by the CPU and the GIL), so the
  check's plumbing runs without a GPU (``gpu_check.py --cpu-plumbing``, used by a test).
* :class:`VramSpikeWorkload` -- holds ``spike_gib`` GiB of device memory for
  ``spike_ms`` milliseconds, then frees it; with ``release`` (default true) back
  to the driver (``empty_cache``): a short spike the allocator peak and the NVML
  process sampler must both catch. ``release: false`` leaves the block in the
  caching allocator, as a model does: the warm-worker carry-over probe.
* :class:`HostMemorySpikeWorkload` -- the CPU stand-in of :class:`VramSpikeWorkload`
  (host memory, seen by the RSS peaks).

Units: ms are milliseconds, GiB are 2**30 bytes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from tuner.workloads.base import InvalidSetting, RunContext, Workload, WorkloadOutput

CALIBRATION_CYCLES = 20_000_000
"""Cycles of the calibration kernel (about 10 ms on a 2 GHz SM clock)."""


class CudaSleepWorkload(Workload):
    """Calibrated ``torch.cuda._sleep`` kernels per run (see module docs). Params ``kernel_ms`` > 0 (total),
    ``launches`` >= 1 (default 1)."""

    def __init__(self) -> None:
        self.cycles = 0
        self.launches = 1
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
        self.launches = max(1, int(params.get("launches", 1)))
        self.cycles = max(1, int(kernel_ms * cycles_per_ms) // self.launches)
        self.events = None

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        import torch

        counters: dict[str, float] = {}
        if self.events is not None:
            # elapsed_time raises until both events completed; a warm-up run is not synchronised by every caller
            self.events[1].synchronize()
            counters["kernel_ms_previous"] = float(self.events[0].elapsed_time(self.events[1]))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.launches):
            torch.cuda._sleep(self.cycles)
        end.record()
        self.events = (start, end)
        return WorkloadOutput(counters=counters)


class HostSleepWorkload(Workload):
    """``time.sleep(kernel_ms / 1000)`` per run; counter ``kernel_ms_previous`` is the previous run's
    duration as ``time.perf_counter`` measured it (the CPU stand-in of :class:`CudaSleepWorkload`).
    With ``launches`` > 1 a fixed amount of pure-Python work instead, calibrated in ``setup`` to take
    ``kernel_ms`` on an idle interpreter, in ``launches`` chunks: bound by the CPU and the GIL, so a
    sampler thread in the same process shows as a longer run (the launch-bound variant's stand-in)."""

    def __init__(self) -> None:
        self.previous_ms = math.nan
        self.chunk_loops = 0

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        launches = max(1, int(params.get("launches", 1)))
        if launches > 1:
            rates = []
            for _ in range(5):
                started = time.perf_counter()
                _spin(200_000)
                rates.append(200_000 / (time.perf_counter() - started))
            loops = sorted(rates)[len(rates) // 2] * float(params["kernel_ms"]) / 1000.0
            self.chunk_loops = max(1, int(loops) // launches)

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        counters = {} if math.isnan(self.previous_ms) else {"kernel_ms_previous": self.previous_ms}
        launches = max(1, int(params.get("launches", 1)))
        started = time.perf_counter()
        if launches == 1:
            time.sleep(float(params["kernel_ms"]) / 1000.0)
        else:
            for _ in range(launches):
                _spin(self.chunk_loops)
        self.previous_ms = (time.perf_counter() - started) * 1000.0
        return WorkloadOutput(counters=counters)


def _spin(loops: int) -> int:
    """``loops`` iterations of pure-Python work (holds the GIL)."""
    total = 0
    for index in range(loops):
        total += index
    return total


class VramSpikeWorkload(Workload):
    """Hold ``spike_gib`` GiB on the device for ``spike_ms`` ms per run, then free it (see module docs;
    ``release: false`` keeps the freed block cached). ``spike_gib: 0`` allocates nothing: the baseline of
    the process's own device memory."""

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
        if params.get("release", True):
            torch.cuda.empty_cache()
        return WorkloadOutput(counters={"spike_bytes": float(spike_bytes)})


class HostMemorySpikeWorkload(Workload):
    """Hold ``spike_gib`` GiB of host memory (written, so resident) for ``spike_ms`` ms per run, then free
    it: the CPU stand-in of :class:`VramSpikeWorkload` (``release`` is accepted and ignored; numpy returns
    a block this large to the system when freed)."""

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        import numpy as np

        spike_bytes = int(float(params["spike_gib"]) * 2**30)
        held = np.ones(spike_bytes, dtype=np.uint8) if spike_bytes else None
        time.sleep(float(params["spike_ms"]) / 1000.0)
        del held
        return WorkloadOutput(counters={"spike_bytes": float(spike_bytes)})
