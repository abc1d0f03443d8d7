"""The Workload interface: what the worker process runs and measures.

A workload is found by import path (``module:Class``) in the spec and is
constructed with no arguments inside the worker process, never in the
coordinator. The worker drives it like this::

    workload = WorkloadClass()
    workload.setup(params, context)          # load / build; not timed
    for _ in range(warmup): workload.run(params, context)
    for each repeat:                         # timed, device synchronised
        workload.synchronize(); t0 = clock()
        output = workload.run(params, context)
        workload.synchronize(); t1 = clock()
    workload.teardown()

Contract
--------
* ``run`` must be deterministic for a fixed ``context.seed`` and ``params``
  (same output every call) so that quality can be compared with the reference.
* ``run`` returns a :class:`WorkloadOutput`; ``items`` counts independent
  requests served by one call (``batch_size``) for throughput.
* A setting the workload cannot accept raises :class:`InvalidSetting` (outcome
  INVALID). Running out of memory raises ``MemoryError`` or torch's
  ``OutOfMemoryError`` (outcome OOM). Anything else is a CRASH.
* ``synchronize`` waits for queued device work (CUDA); the default does this
  for torch when CUDA is initialised, and nothing otherwise.
* ``declared_weights`` (optional) names the files whose bytes decide the output
  (checkpoints); the worker records their sha256 with the trial (provenance of
  an export). The default declares none. ``weights_identity`` (optional) names
  weights that are no file (``random:<preset>:<seed>``); default None.
* ``measured_metrics`` (optional) returns the metrics the workload measured
  itself during the last ``run`` (a program's printed figures, a service's
  per-request latencies); the worker adds them to the trial's. Default: none.
* ``warmup_calls`` (optional) raises the warm-up calls a setting gets (compiling,
  CUDA graph capture). Default: 0. ``knows_warmup`` (optional, default False) says that
  count is exact: under ``measurement.warmup: auto`` the worker then makes just those
  (:mod:`tuner.runner.measure.warmup`), none for a setting already warm in the process.
  ``warmup_settings`` (optional) gives a cheaper call that warms the same things (one
  denoising step instead of fifty); the warm-up calls are made with it. Default: None.
* ``call_spans`` (optional) splits the last ``run``'s seconds into the model's
  work and what surrounds it (``model_s``, ``postprocess_s`` ...). Default: None.
* ``call_structure`` (optional) reports the last ``run``'s cost structure: its
  phases and per-step seconds (denoising steps, new tokens). Default: None.
* ``concurrent_calls`` (optional, default 1) bounds how many ``run`` calls may
  overlap in one process (the streams of ``measurement.sustained``).
* ``invocation`` (optional) is what the workload last executed natively (argv,
  a python target and its arguments, a URL), set by ``setup`` / ``run``; the
  worker stores it as the trial's ``invocation``. Default: None.

Every hook the worker calls is declared on :class:`Workload` with its default, so
a workload overrides only what it has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuner.errors import WorkloadError
from tuner.evaluators.cuda_api import active_cuda
from tuner.results import Metric


class InvalidSetting(WorkloadError, ValueError):
    """Raised by a workload for a parameter combination it cannot run."""


@dataclass(frozen=True)
class RunContext:
    """What the worker tells a workload besides its parameters.

    ``device`` is ``"cuda"`` or ``"cpu"``; ``seed`` the study's seed;
    ``inputs`` the spec's ``inputs`` mapping as written; ``workdir`` a private
    directory for this trial; ``gpu_slot`` the ``CUDA_VISIBLE_DEVICES`` value the
    worker was pinned to (``None`` on CPU).
    """

    device: str
    seed: int
    inputs: Mapping[str, Any]
    workdir: Path
    gpu_slot: str | None = None


@dataclass
class WorkloadOutput:
    """The product of one ``run`` call.

    ``video``: uint8 array (batch, frames, height, width, 3) or (frames, H, W, 3).
    ``audio``: float32 mono samples in [-1, 1] with ``audio_rate`` in Hz.
    ``text``: generated answer(s). ``items``: requests served by the call.
    ``counters``: extra counts worth logging next to times (tokens, frames...).
    """

    video: np.ndarray | None = None
    audio: np.ndarray | None = None
    audio_rate: int | None = None
    text: list[str] | None = None
    items: int = 1
    counters: dict[str, float] = field(default_factory=dict)

    def arrays(self) -> dict[str, Any]:
        """The arrays :meth:`save` writes (``items``, and ``video`` / ``audio`` + ``audio_rate`` / ``text`` when set)."""
        arrays: dict[str, Any] = {"items": np.array(self.items)}
        if self.video is not None:
            arrays["video"] = self.video
        if self.audio is not None:
            arrays["audio"] = self.audio
            arrays["audio_rate"] = np.array(self.audio_rate or 0)
        if self.text is not None:
            arrays["text"] = np.array(self.text, dtype=object)
        return arrays

    def save(self, path: Path) -> None:
        """Write the output as an ``.npz`` file (the reference cache format)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            np.savez_compressed(handle, **self.arrays())

    @staticmethod
    def from_arrays(data: Mapping[str, Any]) -> WorkloadOutput:
        """The output whose :meth:`arrays` are ``data`` (an opened ``.npz`` or a dict)."""
        return WorkloadOutput(
            video=data.get("video"),
            audio=data.get("audio"),
            audio_rate=int(data["audio_rate"]) if "audio_rate" in data else None,
            text=[str(t) for t in data["text"]] if "text" in data else None,
            items=int(data["items"]),
        )

    @staticmethod
    def load(path: Path) -> WorkloadOutput:
        with np.load(path, allow_pickle=True) as data:
            return WorkloadOutput.from_arrays(data)


class Workload(ABC):
    """A model (or program) whose inference settings are tuned. See module docs."""

    invocation: dict[str, Any] | None = None
    """What the workload last executed natively (``{"kind": "command", "argv": ..., "env": ...}``, a python
    target and its arguments, a URL), set by ``setup`` / ``run``; stored as the trial's ``invocation``
    (:mod:`tuner.ship.invocation`). None: nothing to record."""

    concurrent_calls: int = 1
    """How many ``run`` calls of one loaded workload may overlap in one process (threads): the bound of
    ``measurement.sustained``'s streams (:mod:`tuner.evaluators.runtime.sustained`). Default 1: calls that share
    state (a scheduler, a clock of chunks) must not overlap; a workload whose calls are independent raises it."""

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        """Load weights / build the model for ``params``. Not timed. Default: nothing."""

    @abstractmethod
    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        """Serve one request (or one batch) with ``params``. Timed."""

    def synchronize(self) -> None:
        """Wait for queued device work. Default: the CUDA in use in this process synchronised
        (:func:`tuner.evaluators.cuda_api.active_cuda`: torch's once initialised, or a simulated device in tests)."""
        cuda = active_cuda()
        if cuda is not None:
            cuda.synchronize()

    def teardown(self) -> None:
        """Release resources. Default: nothing."""

    def declared_weights(self, context: RunContext) -> Mapping[str, Path]:
        """``{name: path}`` of the weight files ``run`` reads for ``context`` (called after ``setup``,
        not timed; the worker hashes them with sha256). Default: none declared."""
        return {}

    def weights_identity(self, context: RunContext) -> str | None:
        """What identifies weights that are no file (``random:<preset>:<seed>``, ``path:<dir>``), recorded as
        the trial's ``runtime.weights_identity`` (called after ``setup``, not timed). Default: None."""
        return None

    def warmup_calls(self, params: Mapping[str, Any]) -> int:
        """Untimed calls the setting ``params`` needs first (called after ``setup``): torch.compile's first call of
        a shape, CUDA graphs' recording. The worker runs ``max(measurement.warmup, this)`` warm-up calls, so that
        work is start-up, never latency. Default: 0."""
        return 0

    def knows_warmup(self) -> bool:
        """True when :meth:`warmup_calls` is exact (called after ``setup``): every call it asks none for -- a
        setting whose shape, backend, graph and calibration this process has run -- is as fast as one after a
        warm-up. Then ``measurement.warmup: auto`` makes just those calls (:mod:`tuner.runner.measure.warmup`);
        else ``auto`` makes at least one. Default: False."""
        return False

    def warmup_settings(self, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The settings of a cheaper call that warms everything a first call of ``params`` would (its shapes,
        kernels, attention backend, allocator pool; called after ``setup``): fewer denoising steps, fewer new
        tokens. The worker makes this trial's warm-up calls with them and never counts one as a repeat, so a
        workload returning settings promises that a call after such a warm-up is as fast as one after a full
        warm-up (latency truth: ``tests/runner/test_warmup_light.py``). None (the default): the warm-up is the
        call itself."""
        return None

    def call_spans(self) -> Mapping[str, float] | None:
        """Seconds of the last ``run`` by span (``prepare`` / ``model`` / ``postprocess``:
        :mod:`tuner.evaluators.runtime.spans`), read by the worker after each timed repeat; None: the
        workload splits nothing (the default)."""
        return None

    def call_structure(self) -> Mapping[str, Any] | None:
        """The last ``run``'s cost structure -- ``{"phases": {name: s}, "series": {name: [s, ...]}, "counts":
        {...}}``, :mod:`tuner.evaluators.runtime.structure` (text encoding, each denoising step, the decode;
        prefill, each new token) -- read by the worker after each timed repeat; None: the workload knows no
        structure (the default: a command, an HTTP service), its cost stays a black box."""
        return None

    def measured_metrics(self) -> list[Metric]:
        """Metrics the workload measured itself during the last ``run`` call (called after the timed
        repeats); the worker adds them to the trial's, replacing any of the same name. Default: none."""
        return []
