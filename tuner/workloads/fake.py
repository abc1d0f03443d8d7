"""Simulated workloads for tests and benchmarks — not models.

:class:`FakeWorkload` behaves like a model with a speed/quality knob and can
misbehave on request, so the runner's outcome handling is tested with real
failures: a real host out-of-memory (an allocation past an address-space
limit), a real segmentation fault, a real hang, a refused setting.
:class:`NoOpWorkload` does nothing, for measuring the tuner's own overhead.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import resource
import threading
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tuner.errors import WorkloadError
from tuner.evaluators.runtime.streaming import ChunkClock
from tuner.results import Metric
from tuner.workloads.base import InvalidSetting, RunContext, Workload, WorkloadOutput

EXTRA_SLEEP_ENV = "TUNER_FAKE_EXTRA_SLEEP_S"
LATENCY_CV_ENV = "TUNER_FAKE_LATENCY_CV"
NOISE_SEED_ENV = "TUNER_FAKE_NOISE_SEED"
GATE_DIR_ENV = "TUNER_FAKE_GATE_DIR"
GATE_POLL_S = 0.01
BEHAVIOURS = ("ok", "oom", "device_oom", "segfault", "hang", "invalid", "raise", "exit")


class SimulatedDeviceOutOfMemoryError(WorkloadError, RuntimeError):
    """Stands in for torch's CUDA OOM error (same message shape) where no GPU exists."""


class FakeWorkload(Workload):
    """A simulated model. Parameters (all optional):

    ``behaviour``: one of :data:`BEHAVIOURS` (default ``ok``); ``sleep_s``:
    seconds slept per run (default 0.001) — the "cost"; ``noise``: amplitude
    (0–255) of seeded noise added to the output video — the "quality loss";
    ``frames``, ``size``: output video shape (default 4 frames of 16×16);
    ``batch_size``: requests per run; ``jitter_cv``: coefficient of variation of
    the simulated latency (default 0) — a setting whose timing is noisy;
    ``gate``: true for a setting whose runs wait at the test's gate (below; default
    false, and without :data:`GATE_DIR_ENV` it does nothing); ``device_slots``: a SIMULATED device that
    serves that many overlapping calls at once (default 0: unbounded), so sustained load over more
    streams queues (:mod:`tuner.evaluators.runtime.sustained`: the knee).

    Inputs (optional; a spec's ``cases`` give each input its own): ``noise_gain`` multiplies ``noise``
    (default 1); ``cliff_low`` / ``cliff_high`` / ``cliff_noise``: a setting whose ``noise`` lies in
    ``[cliff_low, cliff_high]`` gets ``cliff_noise`` more on this input -- a SIMULATED quality cliff that one
    input shows and the others hide. ``chunks`` (default 0: none) splits the run's sleep into that many chunks
    of ``chunk_output_s`` seconds of output each (default 0.2), timed by a
    :class:`~tuner.evaluators.runtime.streaming.ChunkClock` (its figures are the trial's); ``late_chunk`` /
    ``late_by_s`` delay one chunk on purpose (a SIMULATED stall). The counter ``cost_ms`` is the nominal cost (``sleep_s`` plus the extra
    sleep, in ms, before any jitter): a deterministic stand-in for latency in tests of the front.

    Test hooks (environment variables, read on every run):

    * :data:`EXTRA_SLEEP_ENV` (seconds, default 0) adds a fixed cost to every run of
      every setting — a simulated regression of the build, used to test ``tuner check``;
    * :data:`LATENCY_CV_ENV` (a coefficient of variation, default 0) makes every
      run's latency noisy — a simulated noisy machine;
    * :data:`NOISE_SEED_ENV` (an integer, default unset) makes that noise repeatable:
      a test's outcome then does not depend on the draw (SIMULATED noise only);
    * :data:`GATE_DIR_ENV` (a directory, default unset): each run of a setting with a
      true ``gate`` first creates ``arrived.<pid>`` there (the test knows a trial is in
      flight, inside its workload), then waits until a file ``open`` exists there — a
      trial that waits on the test, not on the clock. The wait is part of the run (a
      warm-up run absorbs it where the spec has one).

    Noise: each run sleeps ``(sleep_s + extra) × J`` seconds, ``J`` lognormal with
    mean 1 and CV ``max(jitter_cv, $TUNER_FAKE_LATENCY_CV)`` (its median is
    ``1 / sqrt(1 + cv²)``, the same for every setting, so ratios of medians keep
    their nominal value), drawn from fresh OS entropy per run: never seeded, so
    forked workers never share a sequence. With ``$TUNER_FAKE_NOISE_SEED`` set, ``J`` is
    drawn from that seed, the trial directory's name (distinct per trial, per side and
    round of ``tuner check``) and the run's index in that directory within this process:
    the same sequence on every invocation, still distinct between trials.
    """

    _chunks: ChunkClock | None = None
    concurrent_calls = 64  # calls share no state but the chunk clock (``chunks``: one stream's figures)

    def _sleep(self, seconds: float, params: Mapping[str, Any]) -> None:
        """Sleep ``seconds`` in one piece, or in ``chunks`` timed pieces (see the class doc)."""
        chunks = int(params.get("chunks", 0))
        if chunks <= 0:
            time.sleep(seconds)
            return
        self._chunks = ChunkClock()
        self._chunks.begin()
        for index in range(chunks):
            time.sleep(
                seconds / chunks
                + (float(params.get("late_by_s", 0.0)) if index == int(params.get("late_chunk", -1)) else 0.0)
            )
            self._chunks.chunk(float(params.get("chunk_output_s", 0.2)))

    def measured_metrics(self) -> list[Metric]:
        return self._chunks.metrics() if self._chunks is not None else []

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        if params.get("behaviour", "ok") not in BEHAVIOURS:
            raise InvalidSetting(f"unknown behaviour {params.get('behaviour')!r}")

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        behaviour = params.get("behaviour", "ok")
        if behaviour == "invalid":
            raise InvalidSetting("this setting is refused by the simulated workload")
        if behaviour == "oom":
            _allocate_past_address_space_limit()
        if behaviour == "device_oom":
            raise SimulatedDeviceOutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        if behaviour == "segfault":
            ctypes.string_at(0)  # dereferences NULL: a real SIGSEGV
        if behaviour == "hang":
            time.sleep(10**6)
        if behaviour == "raise":
            raise RuntimeError("simulated workload failure")
        if behaviour == "exit":
            os._exit(3)
        gate = os.environ.get(GATE_DIR_ENV)
        if gate and params.get("gate"):
            _wait_at_gate(Path(gate))
        cost_s = float(params.get("sleep_s", 0.001)) + float(os.environ.get(EXTRA_SLEEP_ENV, "0") or 0)
        cv = max(float(params.get("jitter_cv", 0.0)), float(os.environ.get(LATENCY_CV_ENV, "0") or 0))
        with _device_slot(int(params.get("device_slots", 0) or 0)):
            self._sleep(cost_s * _jitter(cv, _seeded_rng(context)), params)
        frames, size = int(params.get("frames", 4)), int(params.get("size", 16))
        batch = int(params.get("batch_size", 1))
        base = np.linspace(0, 255, size * size * 3).reshape(1, 1, size, size, 3)
        video = np.broadcast_to(base, (batch, frames, size, size, 3)).copy()
        noise = _input_noise(float(params.get("noise", 0.0)), context.inputs)
        if noise:
            rng = np.random.default_rng(context.seed)
            video = video + rng.normal(0, noise, video.shape)
        return WorkloadOutput(
            video=np.clip(video, 0, 255).astype(np.uint8),
            items=batch,
            counters={"frames": frames * batch, "cost_ms": round(cost_s * 1000, 6)},
        )


_SLOTS: dict[int, threading.BoundedSemaphore] = {}
_SLOTS_LOCK = threading.Lock()


def _device_slot(slots: int) -> Any:
    """A SIMULATED device of ``slots`` execution slots (0: unbounded): at most that many calls of this process
    spend their cost at once; the others queue, as work queues on a saturated GPU."""
    if slots <= 0:
        return contextlib.nullcontext()
    with _SLOTS_LOCK:
        return _SLOTS.setdefault(slots, threading.BoundedSemaphore(slots))


def _input_noise(noise: float, inputs: Mapping[str, Any]) -> float:
    """The noise amplitude on this input: ``noise`` times ``noise_gain``, plus ``cliff_noise`` inside the cliff."""
    amplitude = noise * float(inputs.get("noise_gain", 1.0))
    low, high = inputs.get("cliff_low"), inputs.get("cliff_high")
    if low is not None and high is not None and float(low) <= noise <= float(high):
        amplitude += float(inputs.get("cliff_noise", 0.0))
    return amplitude


def _jitter(cv: float, rng: np.random.Generator | None = None) -> float:
    """A lognormal multiplier with mean 1 and coefficient of variation ``cv`` (1.0 when ``cv <= 0``);
    drawn from ``rng``, else from fresh OS entropy."""
    if cv <= 0:
        return 1.0
    sigma2 = math.log1p(cv * cv)
    return float((rng or np.random.default_rng()).lognormal(-sigma2 / 2, math.sqrt(sigma2)))


_RUNS_IN: dict[str, int] = {}  # runs so far per trial directory, in this process (the seeded noise's index)


def _seeded_rng(context: RunContext) -> np.random.Generator | None:
    """The generator of the seeded noise hook (:data:`NOISE_SEED_ENV`), ``None`` when it is unset."""
    seed = os.environ.get(NOISE_SEED_ENV, "").strip()
    if not seed:
        return None
    name = Path(context.workdir).name
    index = _RUNS_IN[name] = _RUNS_IN.get(name, -1) + 1
    return np.random.default_rng([int(seed), zlib.crc32(name.encode()), index])


def _wait_at_gate(folder: Path) -> None:
    """The gate hook (:data:`GATE_DIR_ENV`): say this run is in flight, then wait until the test opens the gate."""
    (folder / f"arrived.{os.getpid()}").touch()
    while not (folder / "open").exists():
        time.sleep(GATE_POLL_S)


def _allocate_past_address_space_limit() -> None:
    """Cap this process's address space just above its current size, then ask for 1 GB."""
    with open("/proc/self/statm") as statm:
        size_bytes = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = size_bytes + 256 * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    block = np.ones(2**30, dtype=np.uint8)  # raises MemoryError
    block[0] = 0


class NoOpWorkload(Workload):
    """Returns an empty output at once: the tuner's own per-trial overhead."""

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        return WorkloadOutput()


class SimulatedCompilingWorkload(Workload):
    """A SIMULATED compiled model (no compiler runs): its first ``needs`` calls (parameter, default 3) stand for
    torch.compile compiling and CUDA graphs recording, and it asks the worker for that many warm-up calls
    (:meth:`Workload.warmup_calls`). Counter ``calls``: the calls this instance served, this one included."""

    def __init__(self) -> None:
        self.calls = 0

    def warmup_calls(self, params: Mapping[str, Any]) -> int:
        return max(0, int(params.get("needs", 3)) - self.calls)

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        self.calls += 1
        return WorkloadOutput(counters={"calls": float(self.calls)})


class ShapeWarmingWorkload(Workload):
    """A known-answer workload for warm-up truth: every call sleeps ``call_ms`` (default 100) per step
    (``steps``, default 1), and the first call of a ``shape`` (any value, default ``a``) in this process sleeps
    ``first_call_ms`` more (default 300), as a new shape's first call does, whatever its steps. It knows its
    warm-up (:meth:`Workload.knows_warmup`): 1 for a shape new to the process, 0 for one already run -- unless
    ``honest`` is false (it then always claims 0). With ``light`` true it offers a one-step warm-up
    (:meth:`Workload.warmup_settings`), which warms the shape as a full call does. Counters ``calls`` and
    ``steps_served``: the calls and steps this process has served, this call included."""

    shapes_run: set[str] = set()
    calls = 0
    steps_served = 0

    def knows_warmup(self) -> bool:
        return True

    def warmup_calls(self, params: Mapping[str, Any]) -> int:
        new = str(params.get("shape", "a")) not in ShapeWarmingWorkload.shapes_run
        return int(new and bool(params.get("honest", True)))

    def warmup_settings(self, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return dict(params, steps=1) if params.get("light") and int(params.get("steps", 1)) > 1 else None

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        shape, steps = str(params.get("shape", "a")), int(params.get("steps", 1))
        extra = 0.0 if shape in ShapeWarmingWorkload.shapes_run else float(params.get("first_call_ms", 300))
        ShapeWarmingWorkload.shapes_run.add(shape)
        ShapeWarmingWorkload.calls += 1
        ShapeWarmingWorkload.steps_served += steps
        time.sleep((float(params.get("call_ms", 100)) * steps + extra) / 1000.0)
        counters = {
            "calls": float(ShapeWarmingWorkload.calls),
            "steps_served": float(ShapeWarmingWorkload.steps_served),
        }
        return WorkloadOutput(counters=counters)
