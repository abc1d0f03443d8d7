"""Workloads on the simulated CUDA device (test support; no GPU is involved).

:class:`SimulatedKernelWorkload` runs the tuner's worker paths that only a GPU
exercises -- synchronised warm-up and timing, event reads, allocator and reserved
peaks, cached blocks carried between the trials of a warm worker, OOM -- against
:class:`tuner.testing.simulated_cuda.SimulatedCudaDevice` on the CPU. Its
``setup`` installs one device per process (:func:`process_device`), kept across the
trials of a warm worker the way a real process keeps its CUDA context and cache.

Parameters (all optional): ``kernel_ms`` (one kernel per run, default 20),
``activations_mb`` (allocated during a run and freed at its end, default 0: what a
forward pass holds), ``weights_mb`` (allocated in ``setup`` and kept until
``teardown``, default 0), ``read_previous_events`` (default True: each run reads
the CUDA-event duration of the previous run's kernel without waiting for it, as the
GPU check's kernel workload once did; this fails unless the worker synchronised after
that run, warm-up calls included). Counter ``kernel_ms_previous`` is that
duration. MB are 2**20 bytes here (allocator units), ms milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.evaluators import cuda_api
from tuner.testing.simulated_cuda import SimulatedCudaDevice, SimulatedEvent
from tuner.workloads.base import RunContext, Workload, WorkloadOutput

MIB = 2**20
_device: SimulatedCudaDevice | None = None


def process_device(total_bytes: int = 80 * 10**9) -> SimulatedCudaDevice:
    """This process's simulated device, created and installed on first use."""
    global _device
    if _device is None:
        _device = SimulatedCudaDevice(total_bytes=total_bytes)
        cuda_api.install_simulated(_device)
    return _device


class SimulatedKernelWorkload(Workload):
    """One simulated kernel per run, with optional weights and activations (see module docs)."""

    def __init__(self) -> None:
        self.device = process_device()
        self.events: tuple[SimulatedEvent, SimulatedEvent] | None = None
        self.weights: int | None = None

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        weights_mb = float(params.get("weights_mb", 0))
        if self.weights is None and weights_mb > 0:
            self.weights = self.device.allocate(int(weights_mb * MIB))

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        counters: dict[str, float] = {}
        if self.events is not None and params.get("read_previous_events", True):
            counters["kernel_ms_previous"] = self.events[0].elapsed_time(self.events[1])
        activations = int(float(params.get("activations_mb", 0)) * MIB)
        held = self.device.allocate(activations) if activations else None
        start, end = self.device.event(), self.device.event()
        start.record()
        self.device.launch(float(params.get("kernel_ms", 20)) / 1000.0)
        end.record()
        self.events = (start, end)
        if held is not None:
            self.device.free(held)  # freed at once, as torch frees when the tensor dies: the block stays cached
        return WorkloadOutput(counters=counters)

    def synchronize(self) -> None:
        self.device.synchronize()

    def teardown(self) -> None:
        if self.weights is not None:
            self.device.free(self.weights)
            self.weights = None


def initialise_in_this_process() -> None:
    """Use this process's simulated device once (a kernel of no time): what a module that touches
    CUDA at import or warm-up does. A fork server preloading this must refuse to fork trials."""
    process_device().launch(0.0)
