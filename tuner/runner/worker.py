"""The worker: runs one trial request inside its own process and writes a result.

Entry point (used by :class:`~tuner.runner.subprocess.SubprocessRunner`)::

    python -m tuner.runner.worker REQUEST.json RESULT.json

The worker imports the workload (and so torch) — the coordinator never does.
It sets up the workload, measures latency (warmup, synchronised repeats,
adaptive) under a peak-memory monitor, then runs the quality evaluators on the
last output against the reference output, timing them apart. Exceptions are
classified into outcomes here; deaths the worker cannot report (signals,
hangs) are classified by the parent.
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
from pathlib import Path
from typing import Any

from tuner.results import Metric, Outcome, TrialResult
from tuner.runner.base import TrialRequest

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


def execute(request: TrialRequest, keep: dict[str, Any] | None = None) -> TrialResult:
    """Run and measure ``request`` in this process. Never raises for workload errors.

    ``keep`` (a warm worker's cache): workloads are taken from and left in it,
    keyed by class and options, and torn down only when a trial fails; without
    it every trial builds and tears down its own workload.
    """
    from evaluators.base import EvalContext
    from evaluators.latency import LatencySettings, measure_latency
    from evaluators.memory import PeakMemoryMonitor
    from evaluators.registry import evaluate_quality
    from tuner.workloads.base import RunContext, WorkloadOutput

    started = time.perf_counter()
    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    context = RunContext(
        device=request.device,
        seed=request.seed,
        inputs=request.inputs,
        workdir=workdir,
        gpu_slot=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    settings = LatencySettings(**request.measurement)
    stage = "import"
    workload: Any = None
    try:
        key = f"{request.workload_class} {json.dumps(request.workload_options, sort_keys=True)}"
        workload = keep.pop(key, None) if keep is not None else None
        if workload is None:
            workload_class = load_workload_class(request.workload_class)
            workload = workload_class(request.workload_options) if request.workload_options else workload_class()
        _apply_thread_limit()
        stage = "setup"
        workload.setup(request.settings, context)
        stage = "run"
        with PeakMemoryMonitor() as monitor:
            stats, output = measure_latency(
                lambda: workload.run(request.settings, context), workload.synchronize, settings)
        if not isinstance(output, WorkloadOutput):
            raise TypeError(f"{request.workload_class}.run returned {type(output).__name__}, not WorkloadOutput")
        metrics: dict[str, Metric] = {m.name: m for m in stats.to_metrics(items=output.items)}
        metrics.update({m.name: m for m in monitor.metrics()})
        for name, value in output.counters.items():
            metrics[f"count_{name}"] = Metric(f"count_{name}", float(value), "1", "minimize")
        metrics.update({m.name: m for m in getattr(workload, "measured_metrics", lambda: [])()})
        stage = "evaluate"
        eval_started = time.perf_counter()
        reference = WorkloadOutput.load(Path(request.reference_output)) if request.reference_output else None
        if request.compare_with_self:
            reference = output
        eval_context = EvalContext(request.inputs, request.settings, request.reference_settings, request.device)
        for metric in evaluate_quality(request.quality_metrics, output, reference, eval_context):
            metrics[metric.name] = metric
        eval_time_s = time.perf_counter() - eval_started
        from tuner.runner.samples import write_samples

        samples = write_samples(output, workdir)
        output_path = None
        if request.save_output:
            output.save(Path(request.save_output))
            output_path = request.save_output
        invocation = _invocation_of(workload)
        if keep is not None:
            keep[key], workload = workload, None  # kept for the next trial: no teardown
        return TrialResult(
            outcome=Outcome.OK, metrics=metrics, wall_time_s=time.perf_counter() - started,
            invocation=invocation,
            eval_time_s=eval_time_s, output_path=output_path, samples=samples.files,
            info={"repeats": len(stats.samples_s), "converged": stats.converged,
                  **({"sample_problems": samples.problems} if samples.problems else {})})
    except BaseException as error:  # noqa: BLE001 - every failure becomes an outcome
        if isinstance(error, KeyboardInterrupt):
            raise
        outcome = classify_exception(error) if stage != "import" else Outcome.CRASH
        reason = f"{stage}: {type(error).__name__}: {error}"
        return TrialResult(outcome=outcome, reason=reason[:2000], log_tail=traceback.format_exc()[-4000:],
                           wall_time_s=time.perf_counter() - started, invocation=_invocation_of(workload))
    finally:
        if workload is not None:
            try:
                workload.teardown()
            except Exception:  # noqa: BLE001 - teardown problems must not hide the result
                traceback.print_exc()


def _invocation_of(workload: Any) -> dict[str, Any] | None:
    """What an adapter last executed (its ``invocation`` attribute), or None."""
    invocation = getattr(workload, "invocation", None)
    return dict(invocation) if isinstance(invocation, dict) else None


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
    result = execute(request)
    tmp = Path(args[1] + ".tmp")
    tmp.write_text(result.to_json())
    tmp.replace(args[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
