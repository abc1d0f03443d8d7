"""The parts one run of a study is wired from: host facts, slots, the MLflow tracker, the reference store,
the memory model's prior. Each says what it found through the session's listener, never on a terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import psutil

from tuner.runner.base import Slot, plan_slots
from tuner.search.objectives import ConstraintPlan
from tuner.secrets import redact_url
from tuner.session.events import Notice, SessionListener

if TYPE_CHECKING:
    import urllib.request

    import optuna
    from optuna.trial import FrozenTrial

    from tuner.search.feasibility import Observation
    from tuner.spec.models import StudySpec
    from tuner.spec.workload import WorkloadSpec
    from tuner.study.reference import ReferenceStore
    from tuner.tracking.live import MlflowTracker


def host_facts(device: str) -> dict[str, float | None]:
    """Facts constraint bounds may use: ``gpu_memory_gb`` (None on CPU), ``host_memory_gb``."""
    from tuner.gpu import gpu_memory_gb

    return {
        "gpu_memory_gb": gpu_memory_gb() if device == "cuda" else None,
        "host_memory_gb": psutil.virtual_memory().total / 1e9,
    }


def say_disabled_constraints(plan: ConstraintPlan, listener: SessionListener) -> None:
    """One warning per constraint this host cannot hold (its bound names a fact it lacks)."""
    for metric, reason in plan.disabled.items():
        listener.on_notice(Notice("constraint_disabled", f"constraint on {metric} disabled: {reason}"))


def say_inputs(spec: StudySpec, listener: SessionListener) -> None:
    """For a spec with ``cases``: one line saying how many inputs each measured trial runs and what that
    multiplies (its measured time and device cost; each reference's too), and the worst-case figures asked."""
    from tuner.spec.metrics import split_aggregate
    from tuner.spec.quality.cases import input_sets

    if spec.cases is None:
        return
    sets = input_sets(spec)
    asked = sorted(name for name in spec.used_metrics if split_aggregate(name)[1] is not None)
    listener.on_notice(
        Notice(
            "inputs",
            (
                f"inputs: every measured trial runs {len(sets)} inputs ({', '.join(s.name for s in sets)}): its warm-up, "
                f"timed repeats and evaluation, and so its device time, are about {len(sets)}x one input's (each "
                f"reference's too); a metric's figure is the mean over them"
                + (f", {', '.join(asked)} asked" if asked else "")
            ),
        )
    )


def slots_for(
    workload: WorkloadSpec, device: str, workers: int, gpus: Sequence[int] | None, listener: SessionListener
) -> list[Slot]:
    """This run's slots for ``workload`` (the spec's workload block): ``workers`` over every visible GPU (or CPU shares), or one per GPU (per set of
    ``gpus_per_trial``) of ``gpus``. On a busy CPU host, the idle cores are shared out (one warning)."""
    from tuner.gpu import visible_gpu_indices
    from tuner.host import idle_cores

    cores = None
    if device == "cpu" and workload.torch_threads is None:
        idle, total = idle_cores()
        if idle < total:
            cores = idle
            listener.on_notice(
                Notice(
                    "host_busy",
                    f"host busy: {total - idle} of {total} cores in use by other "
                    f"processes; CPU slots get {max(1, idle // workers)} thread(s) each (pin "
                    f"with workload.torch_threads)",
                )
            )
    indices = list(gpus) if gpus is not None else visible_gpu_indices() if device == "cuda" else []
    if gpus is not None:
        workers = max(1, len(gpus) // workload.gpus_per_trial) if device == "cuda" else len(gpus)
    return plan_slots(
        workers, device, indices, cores=cores, threads=workload.torch_threads, gpus_per_slot=workload.gpus_per_trial
    )


def resources(device: str, gpus: Sequence[int] | None) -> list[str]:
    """The devices of this host a session locks: its GPUs, or the CPU."""
    from tuner.gpu import visible_gpu_indices

    if gpus is not None:
        return [f"gpu{i}" for i in gpus]
    if device == "cuda":
        return [f"gpu{i}" for i in visible_gpu_indices()] or ["cpu"]
    return ["cpu"]


def _health_request(uri: str) -> urllib.request.Request:
    """The ``/health`` request of a tracking server; credentials in the URI become a basic-auth header
    (urllib does not take them from the URL)."""
    import base64
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(uri)
    bare = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    request = urllib.request.Request(bare.rstrip("/") + "/health")
    if parts.username is not None:
        pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        request.add_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    return request


def mlflow_reachable(uri: str, timeout_s: float = 5.0) -> str | None:
    """None when an HTTP tracking server answers its health check; else why not.

    Local stores (sqlite, file) are always reachable. Without this probe, MLflow's
    HTTP client retries with back-off for minutes before giving up.
    """
    if not uri.startswith(("http://", "https://")):
        return None
    import urllib.error
    import urllib.request

    request = _health_request(uri)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return None if response.status < 500 else f"health check answered {response.status}"
    except (urllib.error.URLError, OSError) as error:
        return f"{type(error).__name__}: {getattr(error, 'reason', error)}"


def connect_tracker(
    study: optuna.Study, spec: StudySpec, storage_url: str, uri: str, listener: SessionListener
) -> MlflowTracker | None:
    """A live MLflow tracker at ``uri`` of the parent run of ``study`` (of ``spec``, stored at ``storage_url``) (the run id recorded on the study), or None (one
    warning) when MLflow is not installed, the server is unreachable or the run cannot start: the study
    runs without it."""
    from tuner.storage.records import StudyRecord, TrialRecord
    from tuner.storage.store import record_mlflow_run
    from tuner.tracking.live import MlflowTracker, mlflow_missing
    from tuner.tracking.run_info import study_run_info

    missing = mlflow_missing("MLflow logging")
    if missing is not None:
        listener.on_notice(
            Notice(
                "mlflow_missing",
                f"{missing}; the study runs without it (rebuild its views "
                f"later with 'tuner sync-mlflow {study.study_name}')",
            )
        )
        return None
    problem = mlflow_reachable(uri)
    if problem is not None:
        listener.on_notice(
            Notice(
                "mlflow_unreachable",
                f"MLflow at {redact_url(uri)} is not reachable ({problem}): "
                f"the study runs without it; everything is in the storage: rebuild the MLflow "
                f"views later with 'tuner sync-mlflow {study.study_name}'",
            )
        )
        return None
    stored = StudyRecord.of(study)
    known = stored.mlflow_run_id if stored.mlflow_uri == redact_url(uri) else None
    tracker = MlflowTracker(
        uri,
        study_run_info(study, spec, storage_url),
        [TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)],
        known,
    )
    run_id = tracker.wait_started()
    if run_id is not None and stored.mlflow_run_id != run_id:
        record_mlflow_run(study, run_id, redact_url(uri))
    if run_id is None:
        listener.on_notice(
            Notice(
                "mlflow_failed",
                f"MLflow at {redact_url(uri)} failed: the study runs without it ({'; '.join(tracker.failures)[:200]})",
            )
        )
        tracker.close(timeout_s=1)
        return None
    return tracker


def reference_store(spec_name: str, gpu_type: str | None, uri: str | None) -> ReferenceStore:
    """Where the reference output is shared between hosts: the study's MLflow experiment (``<spec_name> @
    <gpu_type>``) when the study is tracked at ``uri`` (artifacts through the tracking server), else this
    host's disk."""
    from tuner.study.reference import LocalReferenceStore

    if uri is None:
        return LocalReferenceStore()
    from tuner.tracking.reference_artifact import MlflowReferenceStore

    return MlflowReferenceStore.for_study(uri, spec_name, gpu_type)


def warm_start_evidence(
    study: optuna.Study,
    spec: StudySpec,
    storage_url: str,
    plan: ConstraintPlan,
    gpu_memory_gb: float | None,
    warm_start_storage: str | None,
    listener: SessionListener,
    memory_model: bool = True,
) -> tuple[list[Observation], list[FrozenTrial]]:
    """What a warm start's source (of ``study``, ``spec``, stored at ``storage_url``) tells this run: the memory
    model's prior (none with ``memory_model`` off) and the source's trials, evidence for the predictions; one
    line on what the memory model knows, one on the predictions' evidence."""
    from tuner.search.feasibility import memory_limits
    from tuner.search.warm_start import load_source, memory_evidence
    from tuner.storage.attributes import is_measured

    source, notes = load_source(study, spec, storage_url, warm_start_storage)
    prior: list[Observation] = []
    if source is not None and memory_model:
        prior, more = memory_evidence(source, gpu_memory_gb)
        notes += more
    for note in notes:
        listener.on_notice(Notice("warm_start", note))
    if memory_model:
        limits = ", ".join(f"{metric} <= {limit:.4g} GB" for metric, limit in memory_limits(plan).items())
        known = limits or "no memory limit on this host (OOM outcomes only)"
        evidence = f"; {len(prior)} observations from its warm start" if prior else ""
        listener.on_notice(Notice("memory_model", f"memory model: {known}{evidence} (--no-memory-model: off)"))
    trials = list(source.trials) if source is not None else []
    if source is not None and trials:
        measured = sum(1 for t in trials if is_measured(t))
        listener.on_notice(
            Notice(
                "warm_start",
                f"predictions: {measured} measured trials of '{source.study_name}' (another GPU type) are evidence, "
                "their scale fitted once this study has measured three runs",
            )
        )
    return prior, trials
