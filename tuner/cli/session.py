"""One invocation of ``tuner run`` / ``tuner resume``: wire the parts and run the loop.

Builds the host facts and constraint plan, the slots and the runner, the live
display and the MLflow tracker, runs the :class:`~tuner.study.coordinator.Coordinator`,
then exports the best trial of the first objective to ``<home>/<study>/best.yaml``
and prints a summary. Returns the coordinator's :class:`~tuner.study.listeners.Summary`
(the CLI exits 0 when the study ran, whatever its trials' outcomes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import psutil
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.cli.progress import ProgressDisplay
from tuner.runner.base import plan_slots
from tuner.runner.choice import make_runner
from tuner.secrets import redact_text
from tuner.study.coordinator import Coordinator
from tuner.study.listeners import Listener, Summary
from tuner.study.lock import lock_for
from tuner.study.objectives import ensure_metric_names, plan_constraints
from tuner.study.records import TrialRecord
from tuner.study.storage import StudyError, redact_url
from tuner.study.studies import OpenStudy, study_directory
from tuner.tracking.live import MlflowTracker, tracking_uri

MLFLOW_CLOSE_TIMEOUT_S = 20.0  # at exit, wait at most this long for MLflow; the views can be rebuilt


def host_facts(device: str) -> dict[str, float | None]:
    """Facts constraint bounds may use: ``gpu_memory_gb`` (None on CPU), ``host_memory_gb``."""
    from tuner.gpu import gpu_memory_gb

    return {"gpu_memory_gb": gpu_memory_gb() if device == "cuda" else None,
            "host_memory_gb": psutil.virtual_memory().total / 1e9}


def _health_request(uri: str) -> Any:
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


def _tracker(opened: OpenStudy, uri: str, out: Console) -> MlflowTracker | None:
    study, spec = opened.study, opened.spec
    problem = mlflow_reachable(uri)
    if problem is not None:
        out.print(f"[yellow]MLflow at {redact_url(uri)} is not reachable ({problem}): the study runs "
                  f"without it; everything is in the storage: rebuild the MLflow views later with "
                  f"'tuner sync-mlflow {study.study_name}'[/]")
        return None
    attrs = study.user_attrs
    from tuner.study.records import TrialRecord
    from tuner.tracking.views import study_run_info

    known = attrs.get("mlflow_run_id") if attrs.get("mlflow_uri") == redact_url(uri) else None
    tracker = MlflowTracker(uri, study_run_info(opened),
                            [TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)], known)
    run_id = tracker.wait_started()
    if run_id is not None and attrs.get("mlflow_run_id") != run_id:
        study.set_user_attr("mlflow_run_id", run_id)
        study.set_user_attr("mlflow_uri", redact_url(uri))
    if run_id is None:
        out.print(f"[yellow]MLflow at {redact_url(uri)} failed: the study runs without it "
                  f"({'; '.join(tracker.failures)[:200]})[/]")
        tracker.close(timeout_s=1)
        return None
    return tracker


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Signals that stop a session like Ctrl-C (a terminal's SIGINT; SIGTERM from ``kill``, a scheduler, systemd)."""


@contextlib.contextmanager
def _ctrl_c_stops(coordinator: Coordinator, err: Console) -> Iterator[None]:
    """First Ctrl-C or SIGTERM: the coordinator stops (trials in flight end within seconds, recorded
    INTERRUPTED and queued again; the caller then names ``tuner resume``); second: exit at once (130).

    Both signals say the same words. The runner's processes are outside the coordinator's process
    group, so a signal to the whole group reaches only the coordinator, which decides.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses: list[float] = []

    def on_interrupt(signum: int, frame: object) -> None:
        presses.append(time.monotonic())
        if len(presses) == 1:
            coordinator.interrupt()
            err.print("stopping: no new trials; trials in flight end within seconds (Ctrl-C again: exit now)")
            return
        err.print("exiting now: 'tuner resume' re-runs the trials that were in flight")
        os._exit(130)

    previous = {signum: signal.signal(signum, on_interrupt) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_session(opened: OpenStudy, home: Path, device: str, workers: int, mlflow_uri: str | None,
                use_mlflow: bool, out: Console, err: Console, overrides: dict[str, Any] | None = None,
                gpus: list[int] | None = None, memory_model: bool = True,
                warm_start_storage: str | None = None) -> Summary:
    """Run ``opened`` to its budget, print what happened, export the best setting to
    ``home/<study>/best.yaml``; returns the coordinator's summary.

    ``overrides`` (study attribute -> value, e.g. a new budget or timeout from
    ``tuner resume``) are applied once the lock is held and recorded as a study
    event. ``gpus`` (``tuner worker --gpus``): the GPUs this invocation may use, one slot per
    GPU (per set of ``gpus_per_trial``), instead of ``workers`` slots over every visible GPU; on
    a CPU study they only name its shares (one slot each). Holds the locks of its devices on this
    host throughout (:mod:`tuner.study.lock`). Raises ``StudyError`` (one line) when a device is
    locked or the storage fails. ``memory_model``: skip settings predicted to run out of memory
    (:mod:`tuner.study.feasibility`), with a warm-started study's source evidence as its prior, read from
    ``warm_start_storage`` when given (else the source's recorded storage).
    """

    study, spec = opened.study, opened.spec
    lock = lock_for(study, _resources(device, gpus))
    lock.acquire()  # StudyLocked (a StudyError) when another live coordinator runs this study
    try:
        _record_event(study, "resume" if not opened.created else "run", overrides or {})
        return _locked_session(opened, home, device, workers, mlflow_uri, use_mlflow, out, err, gpus,
                               memory_model, warm_start_storage)
    except Exception as error:
        cause = _storage_cause(error)
        if cause is not None:
            raise StudyError(f"storage error, the study stopped: {cause} (storage {redact_url(opened.storage_url)}; "
                             f"the trial in flight is re-run by 'tuner resume {study.study_name}'; "
                             f"nothing stored is lost)") from None
        raise
    finally:
        lock.release()


def _record_event(study: Any, kind: str, overrides: dict[str, Any]) -> None:
    """Apply ``overrides`` to the study and append ``{at, event, overrides}`` to its ``events``."""
    import datetime

    for key, value in overrides.items():
        study.set_user_attr(key, value)
    events = list(study.user_attrs.get("events", []))
    events.append({"at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "event": kind, "overrides": overrides})
    study.set_user_attr("events", events)


def _storage_cause(error: BaseException) -> str | None:
    """The database's own words when ``error`` is a storage failure (locked past the busy timeout,
    disk full, connection lost; unreachable past the outage bound: how long it was waited for), else
    None. Optuna wraps them in a ``StorageInternalError`` whose text blames "invalid data"; the
    driver's message is further down the exception chain."""
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import DBAPIError

    from tuner.study.outage import StorageUnavailable

    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for item in chain:
        if isinstance(item, StorageUnavailable):
            return str(item)  # how long it waited, and the driver's words
    for item in chain:
        if isinstance(item, DBAPIError):
            return f"{type(item.orig).__name__}: {str(item.orig).splitlines()[0][:300]}"
    if isinstance(error, StorageInternalError):
        return f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
    return None


def _reference_store(opened: OpenStudy, uri: str | None) -> Any:
    """Where the reference output is shared between hosts: the study's MLflow experiment when the
    study is tracked (artifacts through the tracking server), else this host's disk."""
    from tuner.study.reference import LocalReferenceStore

    if uri is None:
        return LocalReferenceStore()
    from tuner.tracking.reference_artifact import MlflowReferenceStore

    return MlflowReferenceStore.for_study(uri, opened)


def _resources(device: str, gpus: list[int] | None) -> list[str]:
    """The devices of this host a session locks: its GPUs, or the CPU."""
    from tuner.gpu import visible_gpu_indices

    if gpus is not None:
        return [f"gpu{i}" for i in gpus]
    if device == "cuda":
        return [f"gpu{i}" for i in visible_gpu_indices()] or ["cpu"]
    return ["cpu"]


def _memory_prior(opened: OpenStudy, plan: Any, gpu_memory_gb: float | None, warm_start_storage: str | None,
                  out: Console) -> list[Any]:
    """The memory model's prior (a warm start's source evidence), and one line on what the model knows."""
    from tuner.study.feasibility import memory_limits
    from tuner.study.warm_start import load_prior

    prior, notes = load_prior(opened, gpu_memory_gb, warm_start_storage)
    for note in notes:
        out.print(f"[yellow]{escape(note)}[/]", soft_wrap=True)
    limits = ", ".join(f"{metric} <= {limit:.4g} GB" for metric, limit in memory_limits(plan).items())
    out.print(f"memory model: {limits or 'no memory limit on this host (OOM outcomes only)'}"
              f"{f'; {len(prior)} observations from its warm start' if prior else ''} (--no-memory-model: off)")
    return prior


def _locked_session(opened: OpenStudy, home: Path, device: str, workers: int, mlflow_uri: str | None,
                    use_mlflow: bool, out: Console, err: Console, gpus: list[int] | None = None,
                    memory_model: bool = True, warm_start_storage: str | None = None) -> Summary:
    from tuner.gpu import visible_gpu_indices
    from tuner.host import idle_cores
    from tuner.ship.export import ExportError, build_config, choose, write_config

    study, spec = opened.study, opened.spec
    facts = host_facts(device)
    plan = plan_constraints(spec, facts)
    for metric, reason in plan.disabled.items():
        out.print(f"[yellow]constraint on {metric} disabled: {reason}[/]")
    study.set_user_attr("disabled_constraints", dict(plan.disabled))
    ensure_metric_names(study, spec)  # a study made before metric names were stored gets them (dashboards)
    cores = None
    if device == "cpu" and spec.workload.torch_threads is None:
        idle, total = idle_cores()
        if idle < total:
            cores = idle
            out.print(f"[yellow]host busy: {total - idle} of {total} cores in use by other processes; CPU slots "
                      f"get {max(1, idle // workers)} thread(s) each (pin with workload.torch_threads)[/]")
    indices = gpus if gpus is not None else visible_gpu_indices() if device == "cuda" else []
    if gpus is not None:
        workers = max(1, len(gpus) // spec.workload.gpus_per_trial) if device == "cuda" else len(gpus)
    slots = plan_slots(workers, device, indices, cores=cores, threads=spec.workload.torch_threads,
                       gpus_per_slot=spec.workload.gpus_per_trial)
    listeners: list[Listener] = [ProgressDisplay(err)]
    tracker = None
    if use_mlflow:
        uri = tracking_uri(mlflow_uri)
        tracker = _tracker(opened, uri, out)
        if tracker is not None:
            listeners.append(tracker)
    from tuner.evaluators.registry import warm_ups

    prior = _memory_prior(opened, plan, facts["gpu_memory_gb"], warm_start_storage, out) if memory_model else []
    runner = make_runner(spec, warm_ups(spec.used_metrics))
    coordinator = Coordinator(
        opened=opened, runner=runner, slots=slots, home=home, device=device, plan=plan,
        budget_trials=study.user_attrs.get("budget_trials"),
        wall_time_s=study.user_attrs.get("budget_wall_time_s"), listeners=listeners,
        reference_store=_reference_store(opened, tracking_uri(mlflow_uri) if tracker is not None else None),
        memory_model=memory_model, memory_prior=prior)
    try:
        with _ctrl_c_stops(coordinator, err):
            summary = coordinator.run()
    finally:
        runner.close()
    if tracker is not None:
        tracker.close(timeout_s=MLFLOW_CLOSE_TIMEOUT_S)
        for failure in tracker.failures:
            err.print(f"[yellow]{failure}[/]")
        if tracker.failures:
            out.print(f"[yellow]MLflow views may be incomplete: rebuild them from the storage with "
                      f"'tuner sync-mlflow {study.study_name}'[/]")
    if summary.failure is not None:
        err.print(f"[bold red]study stopped:[/] {escape(summary.failure)}", highlight=False, soft_wrap=True)
    if summary.interrupted:
        err.print(f"interrupted: trials in flight that had not finished were recorded INTERRUPTED and queued again; "
                  f"continue with "
                  f"'tuner resume {study.study_name}'", highlight=False, soft_wrap=True)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items()))
    out.print(f"study [bold]{summary.study_name}[/]: {summary.measured} measured ({summary.ran} this run), "
              f"{summary.recorded} trials recorded ({outcomes}); stopped: {summary.stopped_because}")
    _print_front(opened, summary.front, out)
    try:
        chosen = choose(study)
        document = build_config(study, chosen.record, opened.storage_url, chosen.policy, chosen.profile,
                                replaced_noisy=chosen.replaced.number if chosen.replaced else None)
        path = write_config(document, study_directory(home, study.study_name) / "best.yaml")
        replaced = (f" (stable, in place of noisy trial {chosen.replaced.number})" if chosen.replaced else "")
        out.print(f"best on {spec.objective_names[0]}: trial {chosen.record.number}{replaced} -> exported to {path}")
        for warning in document.get("warnings") or []:
            out.print(f"[yellow]warning: {escape(str(warning))}[/]", soft_wrap=True)
    except ExportError as error:
        out.print(f"[yellow]nothing exported: {error}[/]")
    _refresh_dashboard_view(opened, home, out)
    if tracker is not None and tracker.run_id is not None:
        out.print(f"MLflow: {redact_url(tracker.uri)} — experiment '{tracker.info.experiment_name}', "
                  f"run {tracker.run_id} (browse with: tuner ui {study.study_name})")
    out.print(f"storage: {redact_url(opened.storage_url)} — inspect with 'tuner status {summary.study_name}'")
    return summary


def _refresh_dashboard_view(opened: OpenStudy, home: Path, out: Console) -> None:
    """Bring the study's optuna-dashboard view (:mod:`tuner.tracking.dashboard`, ``<home>/dashboard.db``)
    up to date; a failure is one warning line, never the study's (the view is rebuilt by ``tuner dashboard``)."""
    from tuner.tracking.dashboard import default_view_url, refresh_view

    try:
        refresh_view(opened.storage_url, opened.study.study_name, default_view_url(home))
    except Exception as error:  # noqa: BLE001 - a view never fails the study
        out.print(f"[yellow]dashboard view not refreshed ({escape(type(error).__name__)}: "
                  f"{escape(redact_text(str(error))[:200])}): rebuild it with 'tuner dashboard "
                  f"{opened.study.study_name} --refresh-only'[/]", soft_wrap=True)


def _print_front(opened: OpenStudy, front: list[int], out: Console) -> None:
    trials = {t.number: t for t in opened.study.get_trials(deepcopy=False)}
    names = opened.spec.objective_names
    table = Table("trial", "role", *names, "noisy", "params", title="Pareto front")
    for number in front:
        trial = trials[number]
        record = TrialRecord.from_trial(trial)
        table.add_row(str(number), record.role_shown,
                      *(f"{v:.4g}" for v in trial.values or ()),
                      f"NOISY (cv {record.latency_cv:.2f})" if record.noisy and record.latency_cv is not None
                      else "NOISY" if record.noisy else "-",
                      ", ".join(f"{k}={v}" for k, v in trial.params.items()))
    out.print(table)
