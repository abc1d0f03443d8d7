"""The worker: runs one trial request inside its own process and writes a result.

Entry point (used by :class:`~tuner.runner.subprocess.SubprocessRunner`)::

    python -m tuner.runner.worker REQUEST.json RESULT.json

The worker imports the workload (and so torch) — the coordinator never does.
It sets up the workload, measures latency (warmup, synchronised repeats,
adaptive, within :data:`MEASUREMENT_SHARE_OF_TIMEOUT` of the trial's time limit)
under a peak-memory monitor, then runs the quality evaluators on the
last output against the reference output, timing them apart. Exceptions are
classified into outcomes here; deaths the worker cannot report (signals,
hangs) are classified by the parent. Every result it writes carries, in
``info``, the trial's ``env`` (less secrets) and ``runtime`` (packages, torch /
CUDA / cuDNN, driver, git commit, weights' sha256): :func:`trial_provenance`.

A metric whose value is not finite (NaN, ±inf: a counter, a regex metric, an
evaluator's figure) is reported unavailable, with the reason
``non-finite value nan`` (or ``inf``, ``-inf``); the rest of the trial stands.
:func:`write_result` never leaves a trial without a result file: a result that
cannot be serialised becomes a CRASH that says so.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome, TrialResult
from tuner.runner.base import TrialRequest
from tuner.runner.device_used import device_used
from tuner.runner.measure.trial import MEASUREMENT_SHARE_OF_TIMEOUT, finite_metrics
from tuner.runner.reaper import TAG_ENV, kill_tagged

if TYPE_CHECKING:
    from tuner.workloads.base import RunContext, Workload

_OOM_MARKERS = ("out of memory", "outofmemoryerror", "cuda error: out of memory", "cublas_status_alloc_failed")


def classify_exception(error: BaseException) -> Outcome:
    """OOM for memory errors (host or device), INVALID for refused settings, else CRASH."""
    from tuner.workloads.base import InvalidSetting

    if isinstance(error, InvalidSetting):
        return Outcome.INVALID
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return Outcome.OOM
    text = f"{type(error).__name__}: {error}".lower()
    if any(marker in text for marker in _OOM_MARKERS):
        return Outcome.OOM
    return Outcome.CRASH


def load_workload_class(path: str) -> type:
    """Import ``module:Class``; raises ImportError / AttributeError with the path named."""
    module_name, _, class_name = path.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, class_name)  # type: ignore[no-any-return]
    except AttributeError:
        raise AttributeError(f"module '{module_name}' has no attribute '{class_name}'") from None


class TrialProcesses:
    """The processes a warm worker's trial starts once its workload is set up.

    :func:`execute` calls :meth:`begin` after the workload's ``setup``: from then
    on every program started carries ``tag`` (``TUNER_PROCESS_TAG``, see
    :mod:`tuner.runner.reaper`), and this process's descendants are noted;
    :meth:`end` restores the worker's own tag. :meth:`kill_leftovers` SIGKILLs
    what is still alive of them: tagged processes wherever they are, and
    descendants that did not exist at :meth:`begin`. What a workload starts in
    ``setup`` (a loaded model's helpers) belongs to the kept workload instead and
    dies with the worker.
    """

    def __init__(self, tag: str | None) -> None:
        self.tag = tag
        self._before: set[int] | None = None
        self._saved: str | None = None
        self._begun = False

    def begin(self) -> None:
        self._before = _descendants()
        self._saved = os.environ.get(TAG_ENV)
        if self.tag is not None:
            os.environ[TAG_ENV] = self.tag
        self._begun = True

    def end(self) -> None:
        if not self._begun:
            return
        self._begun = False
        if self._saved is None:
            os.environ.pop(TAG_ENV, None)
        else:
            os.environ[TAG_ENV] = self._saved

    def kill_leftovers(self) -> int:
        """SIGKILL the trial's processes still alive; returns how many were signalled."""
        count = kill_tagged(self.tag) if self.tag is not None else 0
        if self._before is not None:
            for pid in _descendants() - self._before:
                try:
                    os.kill(pid, signal.SIGKILL)
                    count += 1
                except (ProcessLookupError, PermissionError):
                    pass
        return count


def _descendants() -> set[int]:
    """Pids of this process's living descendants."""
    import psutil

    try:
        return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}
    except psutil.Error:
        return set()


def execute(
    request: TrialRequest, keep: dict[str, Any] | None = None, processes: TrialProcesses | None = None
) -> TrialResult:
    """Run and measure ``request`` in this process. Never raises for workload errors.

    ``keep`` (a warm worker's cache): workloads are taken from and left in it,
    keyed by class and options, and torn down only when a trial fails; without
    it every trial builds and tears down its own workload. ``processes`` (a warm
    worker's): tags what the trial starts after ``setup`` (see :class:`TrialProcesses`).
    A request of several inputs (``input_sets``) sets up, measures and evaluates each in turn, each within
    its share of the measurement's time (:mod:`tuner.runner.measure.inputs` combines their figures).
    """
    from tuner.runner.measure.inputs import input_sets_of
    from tuner.runner.measure.phases import INFO_KEY, PhaseClock
    from tuner.runner.measure.trial import InputRun, References, measure_input, result_of

    started = time.perf_counter()
    phases = PhaseClock()
    context = _run_context(request)
    stage = ["import"]
    workload: Workload | None = None
    try:
        key = f"{request.workload_class} {json.dumps(request.workload_options, sort_keys=True)}"
        kept = keep.pop(key, None) if keep is not None else None
        workload = running = kept if kept is not None else _new_workload(request)
        _apply_thread_limit()
        sets = input_sets_of(request)
        references = References(request)
        runs: list[InputRun] = []
        eval_time_s = 0.0
        for index, (name, inputs) in enumerate(sets):
            deadline = started + MEASUREMENT_SHARE_OF_TIMEOUT * request.timeout_s * (index + 1) / len(sets)
            begin = processes.begin if processes is not None and index == 0 else None
            run, seconds = measure_input(
                request, running, replace(context, inputs=inputs), name, deadline, phases, stage, references, begin
            )
            runs.append(run)
            eval_time_s += seconds
        phases.mark("finish")
        result = result_of(request, runs, context, eval_time_s, trial_provenance(request, running, context))
        if keep is not None:
            keep[key], workload = running, None  # kept for the next trial: no teardown
        return replace(
            result, wall_time_s=time.perf_counter() - started, info={**result.info, INFO_KEY: phases.seconds()}
        )
    except BaseException as error:  # noqa: BLE001 - every failure becomes an outcome
        if isinstance(error, KeyboardInterrupt):
            raise
        outcome = classify_exception(error) if stage[0] != "import" else Outcome.CRASH
        reason = f"{stage[0]}: {type(error).__name__}: {error}"
        log_tail = traceback.format_exc()[-4000:]
        return TrialResult(
            outcome=outcome,
            reason=reason[:2000],
            log_tail=log_tail,
            wall_time_s=time.perf_counter() - started,
            invocation=_invocation_of(workload),
            info={
                "device_used": device_used([]),
                **trial_provenance(request, workload, context),
                INFO_KEY: phases.seconds(),
            },
        )
    finally:
        if processes is not None:
            processes.end()
        if workload is not None:
            try:
                workload.teardown()
            except Exception:  # noqa: BLE001 - teardown problems must not hide the result
                traceback.print_exc()


def _run_context(request: TrialRequest) -> RunContext:
    """What the workload is told besides its parameters; the trial directory is made here."""
    from tuner.workloads.base import RunContext

    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    return RunContext(
        device=request.device,
        seed=request.seed,
        inputs=request.inputs,
        workdir=workdir,
        gpu_slot=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


def _new_workload(request: TrialRequest) -> Workload:
    """The request's workload class, imported and built (with its options, when it has any)."""
    workload_class = load_workload_class(request.workload_class)
    workload: Workload = workload_class(request.workload_options) if request.workload_options else workload_class()
    return workload


WEIGHTS_HASH_CACHE = "weights_sha256.json"
"""The weights' sha256 cache, in the directory holding the trial directories (the study's)."""


def trial_provenance(request: TrialRequest, workload: Workload | None, context: RunContext) -> dict[str, Any]:
    """``{"env": ..., "runtime": ...}``: what this trial ran with (the allow-listed environment,
    :mod:`tuner.runner.recorded_env`; the runtime, :mod:`tuner.runner.provenance`),
    taken after the measurement (``workload`` None: it was never built). Never raises: what cannot
    be found is marked unavailable."""
    from tuner.runner.provenance import trial_runtime, workload_module
    from tuner.runner.recorded_env import recorded_environment

    options = request.workload_options
    module = workload_module(request.workload_class, str(options.get("factory", "")) or None)
    modules = (module,) if module else ()
    declared: dict[str, Any] = {}
    problem: str | None = None
    try:
        declared = dict(workload.declared_weights(context)) if workload is not None else {}
    except Exception as error:  # noqa: BLE001 - a weights path that cannot be read is a fact, not a crash
        problem = f"declared_weights: {type(error).__name__}: {error}"
    identity: str | None = None
    try:
        identity = workload.weights_identity(context) if workload is not None else None
    except Exception as error:  # noqa: BLE001 - a fact we could not read
        problem = f"{problem + '; ' if problem else ''}weights_identity: {type(error).__name__}: {error}"
    try:
        runtime = trial_runtime(modules, declared, Path(request.workdir).parent / WEIGHTS_HASH_CACHE)
    except Exception as error:  # noqa: BLE001
        runtime = {"unavailable": {"runtime": f"{type(error).__name__}: {error}"}}
    if identity is not None:
        runtime["weights_identity"] = identity
    if problem is not None:
        runtime.setdefault("unavailable", {})["weights"] = problem
    return {"env": recorded_environment(extra=request.record_env), "runtime": runtime}


def _invocation_of(workload: Workload | None) -> dict[str, Any] | None:
    """A copy of what the workload last executed (:attr:`Workload.invocation`), or None."""
    return dict(workload.invocation) if workload is not None and workload.invocation is not None else None


def _apply_thread_limit() -> None:
    """Give torch (if the workload imported it) the slot's thread count."""
    threads = os.environ.get("TUNER_TORCH_THREADS")
    torch = sys.modules.get("torch")
    if threads and torch is not None:
        torch.set_num_threads(int(threads))


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when the coordinator dies (no orphans)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m tuner.runner.worker REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    die_with_parent()
    request = TrialRequest.from_json(Path(args[0]).read_text())
    try:
        write_result(execute(request), Path(args[1]))
    except KeyboardInterrupt:  # SIGINT sent to this worker: one line in its log, never a traceback
        print("worker: interrupted (SIGINT) before a result was written", file=sys.stderr)
        return 130
    return 0


def write_result(result: TrialResult, path: Path) -> None:
    """Write ``result`` as JSON to ``path`` atomically; never leaves the trial without a result.

    Non-finite metrics become unavailable (:func:`finite_metrics`); if the result
    still cannot be serialised (say, a NaN in ``info``), ``info`` is replaced by
    the error, and failing that the result becomes a CRASH naming the error.
    """
    result = replace(result, metrics=finite_metrics(result.metrics))
    try:
        text = result.to_json()
    except (TypeError, ValueError) as error:
        try:
            text = replace(result, info={"unserialisable_info": f"{type(error).__name__}: {error}"}).to_json()
        except (TypeError, ValueError) as again:
            text = TrialResult(
                Outcome.CRASH,
                reason=f"the worker's result could not be written: {again}",
                log_tail=result.log_tail,
                wall_time_s=result.wall_time_s,
            ).to_json()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
