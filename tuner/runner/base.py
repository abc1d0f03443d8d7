"""The Runner interface: run one candidate in isolation and report a TrialResult.

Contract (checked by :mod:`tuner.testing.runner_conformance`):

* ``run(request, slot)`` blocks until the trial is over and returns a
  :class:`~tuner.results.TrialResult`. It never raises because of the workload:
  an out-of-memory error is ``OOM``, a refused setting ``INVALID``, a hang past
  ``request.timeout_s`` ``TIMEOUT``, a crash or an exception ``CRASH``, each
  with a reason and the tail of the log.
* ``run`` may be called from several threads at once, each with its own slot.
* The caller owns the Optuna storage; a runner never touches it.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

from tuner.results import TrialResult


@dataclass(frozen=True)
class Slot:
    """Where a trial runs: a GPU set (``CUDA_VISIBLE_DEVICES`` value) or a CPU share.

    ``cuda_visible_devices`` is ``None`` on a CPU slot. ``threads`` is the number
    of intra-op threads the workload should use.
    """

    index: int
    cuda_visible_devices: str | None
    threads: int

    @property
    def label(self) -> str:
        return f"gpu:{self.cuda_visible_devices}" if self.cuda_visible_devices is not None else f"cpu:{self.index}"


@dataclass(frozen=True)
class TrialRequest:
    """Everything a worker needs to run and measure one candidate.

    ``settings``: parameters plus derived values. ``measurement``: the spec's
    measurement block as a dict. ``quality_metrics``: names of quality metrics to
    compute against ``reference_output`` (an ``.npz`` path). ``save_output``:
    where to write this trial's output (``None``: not kept). ``compare_with_self``:
    the trial *is* the reference, so its quality is measured against its own
    output by the same evaluators. ``workdir``: a
    private directory for logs and files; ``timeout_s``: wall-clock limit.
    ``workload_options``: an adapter block (``StudySpec.workload.options``); when
    non-empty the workload class is constructed with it as its one argument.
    """

    study_name: str
    trial_number: int
    workload_class: str
    settings: dict[str, Any]
    inputs: dict[str, Any]
    seed: int
    device: str
    measurement: dict[str, Any]
    timeout_s: float
    workdir: str
    quality_metrics: list[str] = field(default_factory=list)
    reference_output: str | None = None
    save_output: str | None = None
    compare_with_self: bool = False
    reference_settings: dict[str, Any] | None = None
    workload_options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str)

    @staticmethod
    def from_json(text: str) -> "TrialRequest":
        return TrialRequest(**json.loads(text))


class Runner(ABC):
    """Runs trial requests; see the module docstring for the contract."""

    @abstractmethod
    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        """Run ``request`` on ``slot`` and return its result (never raises for the workload)."""

    def close(self) -> None:
        """Release any resources held across trials. Default: nothing."""


def plan_slots(workers: int, device: str, gpu_indices: list[int], cores: int | None = None,
               threads: int | None = None, gpus_per_slot: int = 1) -> list[Slot]:
    """Slots for ``workers`` parallel trials.

    On ``cuda``: one slot per worker, GPUs dealt round-robin from ``gpu_indices``
    (more workers than GPUs share GPUs). On ``cpu``: the cores split evenly,
    at least one thread per slot. ``threads`` (the spec's
    ``workload.torch_threads``), when given, replaces the even split.
    ``gpus_per_slot`` (a multi-GPU command's ``gpus``): each slot gets that many
    GPUs, consecutive in ``gpu_indices``, dealt round-robin as sets
    (``CUDA_VISIBLE_DEVICES="0,1,2,3"``); more GPUs than visible is an error.
    """
    if workers < 1:
        raise ValueError("workers must be >= 1")
    if threads is not None and threads < 1:
        raise ValueError("threads must be >= 1")
    cores = cores or os.cpu_count() or 1
    per_slot = threads if threads is not None else max(1, cores // workers)
    if device == "cuda":
        if not gpu_indices:
            raise ValueError("device is cuda but no GPU is visible")
        if gpus_per_slot > 1:
            if gpus_per_slot > len(gpu_indices):
                raise ValueError(f"a trial needs {gpus_per_slot} GPUs but {len(gpu_indices)} are visible")
            sets = [gpu_indices[k:k + gpus_per_slot]
                    for k in range(0, len(gpu_indices) - gpus_per_slot + 1, gpus_per_slot)]
            return [Slot(i, ",".join(str(g) for g in sets[i % len(sets)]), per_slot) for i in range(workers)]
        return [Slot(i, str(gpu_indices[i % len(gpu_indices)]), per_slot) for i in range(workers)]
    return [Slot(i, None, per_slot) for i in range(workers)]
