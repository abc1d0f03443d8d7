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
import math
import traceback
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from tuner.results import Metric, Outcome, TrialResult
from tuner.runner.base import TrialRequest
from tuner.runner.reaper import TAG_ENV, kill_tagged

if TYPE_CHECKING:
    from tuner.workloads.base import RunContext, Workload, WorkloadOutput

MEASUREMENT_SHARE_OF_TIMEOUT = 0.7
"""The share of a trial's ``timeout_s`` its latency measurement may use, counted from the worker's
start: no warmup call or further repeat starts that would end later (:func:`tuner.evaluators.latency.measure_latency`).
The rest is kept for evaluation and saving, so a setting slower than the timeout foresaw is recorded
with fewer repeats (``cut_short``) instead of being killed with nothing measured."""

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


def finite_metrics(metrics: Mapping[str, Metric]) -> dict[str, Metric]:
    """``metrics`` with every non-finite value made unavailable (reason ``non-finite value nan``)."""
    return {name: (m if m.value is None or math.isfinite(m.value)
                   else Metric.unavailable(m.name, m.unit, m.direction, f"non-finite value {m.value!r}"))
            for name, m in metrics.items()}


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


def execute(request: TrialRequest, keep: dict[str, Any] | None = None,
            processes: TrialProcesses | None = None) -> TrialResult:
    """Run and measure ``request`` in this process. Never raises for workload errors.

    ``keep`` (a warm worker's cache): workloads are taken from and left in it,
    keyed by class and options, and torn down only when a trial fails; without
    it every trial builds and tears down its own workload. ``processes`` (a warm
    worker's): tags what the trial starts after ``setup`` (see :class:`TrialProcesses`).
    """
    from tuner.evaluators.latency import LatencySettings, measure_latency
    from tuner.evaluators.memory import PeakMemoryMonitor
    from tuner.runner.device_used import device_used
    from tuner.workloads.base import WorkloadOutput

    from tuner.runner.phases import INFO_KEY, PhaseClock

    started = time.perf_counter()
    phases = PhaseClock()
    context = _run_context(request)
    measurement = dict(request.measurement)
    memory_sample_hz = float(measurement.pop("memory_sample_hz", 100.0))
    settings = LatencySettings(**measurement)
    stage = "import"
    workload: "Workload | None" = None
    try:
        key = f"{request.workload_class} {json.dumps(request.workload_options, sort_keys=True)}"
        kept = keep.pop(key, None) if keep is not None else None
        workload = running = kept if kept is not None else _new_workload(request)
        _apply_thread_limit()
        stage = "setup"
        running.setup(request.settings, context)
        if processes is not None:
            processes.begin()
        stage = "run"
        phases.mark("warmup")
        with PeakMemoryMonitor(memory_sample_hz) as monitor:
            stats, output = measure_latency(
                lambda: running.run(request.settings, context), running.synchronize, settings,
                deadline=started + MEASUREMENT_SHARE_OF_TIMEOUT * request.timeout_s, marks=phases.marks)
        if not isinstance(output, WorkloadOutput):
            raise TypeError(f"{request.workload_class}.run returned {type(output).__name__}, not WorkloadOutput")
        metrics = _run_metrics(stats.to_metrics(items=output.items), monitor.metrics(), output, running)
        stage = "evaluate"
        phases.mark("evaluation")
        eval_started = time.perf_counter()
        metrics.update({metric.name: metric for metric in _quality_metrics(request, output)})
        eval_time_s = time.perf_counter() - eval_started
        phases.mark("finish")
        from tuner.runner.samples import write_samples

        samples = write_samples(output, context.workdir)
        output_path = None
        if request.save_output:
            output.save(Path(request.save_output))
            output_path = request.save_output
        invocation = _invocation_of(running)
        provenance = trial_provenance(request, running, context)
        if keep is not None:
            keep[key], workload = running, None  # kept for the next trial: no teardown
        return TrialResult(
            outcome=Outcome.OK, metrics=finite_metrics(metrics), wall_time_s=time.perf_counter() - started,
            invocation=invocation,
            eval_time_s=eval_time_s, output_path=output_path, samples=samples.files,
            info={"repeats": len(stats.samples_s), "converged": stats.converged, "warmup": stats.warmup,
                  "device_used": device_used(monitor.nvml_devices),
                  **({"cut_short": _cut_short_note(stats, settings, request.timeout_s)} if stats.cut_short else {}),
                  **({"sample_problems": samples.problems} if samples.problems else {}), **provenance,
                  INFO_KEY: phases.seconds()})
    except BaseException as error:  # noqa: BLE001 - every failure becomes an outcome
        if isinstance(error, KeyboardInterrupt):
            raise
        outcome = classify_exception(error) if stage != "import" else Outcome.CRASH
        reason = f"{stage}: {type(error).__name__}: {error}"
        log_tail = traceback.format_exc()[-4000:]
        return TrialResult(outcome=outcome, reason=reason[:2000], log_tail=log_tail,
                           wall_time_s=time.perf_counter() - started, invocation=_invocation_of(workload),
                           info={"device_used": device_used([]), **trial_provenance(request, workload, context),
                                 INFO_KEY: phases.seconds()})
    finally:
        if processes is not None:
            processes.end()
        if workload is not None:
            try:
                workload.teardown()
            except Exception:  # noqa: BLE001 - teardown problems must not hide the result
                traceback.print_exc()


def _run_context(request: TrialRequest) -> "RunContext":
    """What the workload is told besides its parameters; the trial directory is made here."""
    from tuner.workloads.base import RunContext

    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    return RunContext(device=request.device, seed=request.seed, inputs=request.inputs, workdir=workdir,
                      gpu_slot=os.environ.get("CUDA_VISIBLE_DEVICES"))


def _new_workload(request: TrialRequest) -> "Workload":
    """The request's workload class, imported and built (with its options, when it has any)."""
    workload_class = load_workload_class(request.workload_class)
    workload: Workload = workload_class(request.workload_options) if request.workload_options else workload_class()
    return workload


def _run_metrics(latency: list[Metric], memory: list[Metric], output: "WorkloadOutput",
                 workload: "Workload") -> dict[str, Metric]:
    """The run's own metrics by name: latency, peak memory, the output's counters (``count_<name>``)
    and what the workload measured itself (:meth:`Workload.measured_metrics`), later ones winning."""
    metrics = {m.name: m for m in [*latency, *memory]}
    for name, value in output.counters.items():
        metrics[f"count_{name}"] = Metric(f"count_{name}", float(value), "1", "minimize")
    metrics.update({m.name: m for m in workload.measured_metrics()})
    return metrics


def _quality_metrics(request: TrialRequest, output: "WorkloadOutput") -> list[Metric]:
    """The quality metrics the request names, of ``output`` against the reference output (the
    reference trial against itself)."""
    from tuner.evaluators.base import EvalContext
    from tuner.evaluators.registry import evaluate_quality
    from tuner.workloads.base import WorkloadOutput

    reference = WorkloadOutput.load(Path(request.reference_output)) if request.reference_output else None
    if request.compare_with_self:
        reference = output
    context = EvalContext(request.inputs, request.settings, request.reference_settings, request.device,
                          request.reference_missing, request.resize_to_reference)
    return list(evaluate_quality(request.quality_metrics, output, reference, context))


def _cut_short_note(stats: Any, settings: Any, timeout_s: float) -> str:
    """One line saying how a deadline shortened the measurement (``stats``: a cut-short ``LatencyStats``)."""
    asked = (f"{settings.min_repeats}" if settings.min_repeats == settings.max_repeats
             else f"{settings.min_repeats}-{settings.max_repeats}")
    return (f"{len(stats.samples_s)} of {asked} repeats and {stats.warmup}/{settings.warmup} warmup fit in "
            f"{MEASUREMENT_SHARE_OF_TIMEOUT:.0%} of the {timeout_s:.0f} s limit")


WEIGHTS_HASH_CACHE = "weights_sha256.json"
"""The weights' sha256 cache, in the directory holding the trial directories (the study's)."""


def trial_provenance(request: TrialRequest, workload: "Workload | None", context: "RunContext") -> dict[str, Any]:
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


def _invocation_of(workload: "Workload | None") -> dict[str, Any] | None:
    """A copy of what the workload last executed (:attr:`Workload.invocation`), or None."""
    return dict(workload.invocation) if workload is not None and workload.invocation is not None else None


def _apply_thread_limit() -> None:
    """Give torch (if the workload imported it) the slot's thread count."""
    threads = os.environ.get("TUNER_TORCH_THREADS")
    torch = sys.modules.get("torch")
    if threads and torch is not None:
        torch.set_num_threads(int(threads))


def _die_with_parent() -> None:
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
    _die_with_parent()
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
            text = TrialResult(Outcome.CRASH, reason=f"the worker's result could not be written: {again}",
                               log_tail=result.log_tail, wall_time_s=result.wall_time_s).to_json()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
