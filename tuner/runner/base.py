"""The Runner interface: run one candidate in isolation and report a TrialResult.

Contract (checked by :mod:`tuner.testing.runner_conformance`):

* ``run(request, slot)`` blocks until the trial is over and returns a
  :class:`~tuner.results.TrialResult`. It never raises because of the workload:
  an out-of-memory error is ``OOM``, a refused setting ``INVALID``, a hang past
  ``request.timeout_s`` ``TIMEOUT``, a crash or an exception ``CRASH``, each
  with a reason and the tail of the log.
* ``run`` may be called from several threads at once, each with its own slot.
* The caller owns the Optuna storage; a runner never touches it.
* When ``run`` returns, no process the trial started is left (a fresh worker's
  whole tree, a warm worker's trial children: :mod:`tuner.runner.reaper`), and
  none outlives the coordinator. ``close()`` kills every process of the runner,
  in-flight trials included (they return ``CRASH``, "the runner was closed"),
  within a few seconds.
* Every result carries ``trial_disk_gb`` (GB = 1e9 bytes, minimize): the disk
  space the trial directory (``request.workdir``) takes once the trial is over
  (what the trial left, before any cleaning), counted like ``du`` (allocated
  blocks, each file once, symlinks not followed).
* Past the runner's :class:`ScratchPolicy` limit (the spec's
  ``workload.max_trial_dir_gb``; default :data:`LARGE_TRIAL_DIR_GB`, which the
  environment's :data:`LARGE_TRIAL_DIR_ENV` replaces) the files the tuner does
  not need are deleted, largest first, until the directory is within it -- or,
  with ``workload.trial_scratch: keep``, kept and named (:mod:`tuner.runner.scratch`).
  The result's ``reason`` gets a note naming the size, the directory and the
  files; ``info["trial_disk_note"]`` holds the same note, ``info["trial_scratch"]``
  the figures, and the note ends the trial's ``worker.log``.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tuner.results import Metric, TrialResult
from tuner.runner.scratch import BYTES_PER_GB, append_note, needed_paths, tidy

TRIAL_DISK_METRIC = "trial_disk_gb"
LARGE_TRIAL_DIR_GB = 1.0
"""The default limit (GB) of a trial directory after the trial (``workload.max_trial_dir_gb``)."""
LARGE_TRIAL_DIR_ENV = "TUNER_LARGE_TRIAL_DIR_GB"


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
    ``record_env``: the spec's ``record_env`` (names or globs), recorded in the trial's
    ``env`` beside the built-in allow-list (:mod:`tuner.runner.recorded_env`).
    ``input_sets``: several inputs (the spec's ``cases``), each ``{"name": ..., "inputs": {...}}``; every
    one is run and measured, and quality compared with the same input's reference
    (:mod:`tuner.runner.measure.inputs`); empty: the one ``inputs``. ``aggregates``: the ``<metric>:worst`` /
    ``<metric>:p<NN>`` figures to report; ``cliff_margins``: metric -> margin for the cliff flags.
    ``cost``: the spec's ``cost`` block (:mod:`tuner.spec.measure.price`): the price metrics from the throughput.
    ``latency_ceiling_s``: the latency of a front trial that beats this one wherever its latency lands above it
    (:func:`tuner.search.dominance.latency_ceiling`); timed calls all past it end the repeats early.
    ``latency_thresholds_s``: the front's latencies when the trial was placed (:func:`tuner.search.dominance.
    latency_thresholds`); timed calls clear of all of them end the repeats early (its place is settled).
    ``score_outputs``: the quality is scored off the device (``measurement.score_off_device``,
    :mod:`tuner.runner.scoring`): the worker computes none, saves the outputs there and names the file in the
    result's ``info``; None: the worker scores them itself.
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
    reference_missing: str | None = None  # why there is no reference output to compare with (the metrics' reason)
    resize_to_reference: bool = False  # frames of another size show the same scene: resized (same_content)
    workload_options: dict[str, Any] = field(default_factory=dict)
    record_env: list[str] = field(default_factory=list)
    input_sets: list[dict[str, Any]] = field(default_factory=list)
    aggregates: list[str] = field(default_factory=list)
    cliff_margins: dict[str, float] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)  # the spec's cost block: prices per device-hour
    latency_ceiling_s: float | None = None  # seconds (tuner.evaluators.latency.LatencySettings.ceiling_s)
    latency_thresholds_s: list[float] = field(default_factory=list)  # seconds (LatencySettings.thresholds_s)
    score_outputs: str | None = None  # quality scored off the device: the outputs' file for the scorer (.scoring)

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str)

    @staticmethod
    def from_json(text: str) -> TrialRequest:
        return TrialRequest(**json.loads(text))


@dataclass(frozen=True)
class ScratchPolicy:
    """What a runner does with a trial directory over ``limit_gb`` once the trial is over.

    ``clean`` (``workload.trial_scratch: clean``, the default): delete what the tuner does not
    need, largest first, until the directory is within the limit; else keep it and name the
    largest files. ``limit_gb`` None: :data:`LARGE_TRIAL_DIR_GB`, or :data:`LARGE_TRIAL_DIR_ENV`
    when set (the spec's ``workload.max_trial_dir_gb`` is always given by :func:`~tuner.runner.choice.make_runner`).
    """

    limit_gb: float | None = None
    clean: bool = True

    def resolved_limit_gb(self) -> float:
        if self.limit_gb is not None:
            return self.limit_gb
        try:
            return float(os.environ.get(LARGE_TRIAL_DIR_ENV, "") or LARGE_TRIAL_DIR_GB)
        except ValueError:
            return LARGE_TRIAL_DIR_GB


class Runner(ABC):
    """Runs trial requests; see the module docstring for the contract."""

    @abstractmethod
    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        """Run ``request`` on ``slot`` and return its result (never raises for the workload)."""

    def close(self) -> None:
        """Release any resources held across trials. Default: nothing."""


def disk_usage_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (like ``du``: blocks, hard links once, no symlink followed)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            blocks = getattr(info, "st_blocks", None)
            total += blocks * 512 if blocks is not None else info.st_size
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return total


def with_trial_disk_usage(result: TrialResult, workdir: Path, policy: ScratchPolicy | None = None) -> TrialResult:
    """``result`` with ``trial_disk_gb`` measured on ``workdir``; past ``policy``'s limit the directory
    is cleaned or its files named, and the result says so (see the module docstring). Call it once the
    trial is over: its result read, its processes dead."""
    policy = policy or ScratchPolicy()
    size_bytes = disk_usage_bytes(workdir)
    size_gb = size_bytes / BYTES_PER_GB
    metrics = {**result.metrics, TRIAL_DISK_METRIC: Metric(TRIAL_DISK_METRIC, size_gb, "GB", "minimize")}
    limit_gb = policy.resolved_limit_gb()
    if size_gb <= limit_gb:
        return replace(result, metrics=metrics)
    needed = needed_paths(workdir, [*result.samples.values(), result.output_path])
    report = tidy(workdir, size_bytes, limit_gb, policy.clean, needed)
    note = report.note()
    append_note(workdir / "worker.log", note)
    reason = f"{result.reason}\n{note}" if result.reason else note
    return replace(
        result,
        metrics=metrics,
        reason=reason,
        info={**result.info, "trial_disk_note": note, "trial_scratch": report.info()},
    )


def plan_slots(
    workers: int,
    device: str,
    gpu_indices: list[int],
    cores: int | None = None,
    threads: int | None = None,
    gpus_per_slot: int = 1,
) -> list[Slot]:
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
            sets = [
                gpu_indices[k : k + gpus_per_slot]
                for k in range(0, len(gpu_indices) - gpus_per_slot + 1, gpus_per_slot)
            ]
            return [Slot(i, ",".join(str(g) for g in sets[i % len(sets)]), per_slot) for i in range(workers)]
        return [Slot(i, str(gpu_indices[i % len(gpu_indices)]), per_slot) for i in range(workers)]
    return [Slot(i, None, per_slot) for i in range(workers)]
