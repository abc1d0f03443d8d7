"""One run of a study on this host (``tuner run`` / ``resume`` / ``worker``, ``tuner.run_study``): open, run, finish.

:func:`run_session` holds the study's lock on this host's devices throughout
(:mod:`tuner.storage.coordination.lock`), records the run (or resume, with its overrides) as a study
event, wires the parts (:mod:`.wiring`), runs the
:class:`~tuner.study.coordinator.Coordinator` (Ctrl-C / SIGTERM stop it: :mod:`.signals`)
and finishes (:mod:`.finish`). A storage failure anywhere becomes one
:class:`~tuner.errors.StudyError` line naming the resume command (a refusal — login, database,
permission — its :class:`~tuner.storage.outage.StorageMisconfigured`, at once).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import StudyError
from tuner.secrets import redact_url
from tuner.session.events import Quiet, SessionListener
from tuner.session.finish import (
    choose_export,
    close_tracker,
    export_best,
    finish_reserve_s,
    refresh_dashboard_view,
    say_summary,
    say_where,
)
from tuner.session.signals import stop_on_signals
from tuner.session.wiring import (
    connect_tracker,
    host_facts,
    reference_store,
    resources,
    say_disabled_constraints,
    say_inputs,
    slots_for,
    warm_start_evidence,
)
from tuner.storage import attributes as names
from tuner.storage import store
from tuner.storage.coordination.lock import lock_for
from tuner.storage.outage import StorageMisconfigured, misconfiguration
from tuner.storage.records import StudyRecord
from tuner.study.listeners import Listener, Summary
from tuner.study.studies import OpenStudy

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from tuner.runner.base import Slot
    from tuner.runner.choice import KeptRunner
    from tuner.search.feasibility import Observation
    from tuner.search.objectives import ConstraintPlan
    from tuner.tracking.live import MlflowTracker


@dataclass(frozen=True)
class RunOptions:
    """How to run a study here. ``overrides`` (study attribute -> value, e.g. a new budget or timeout from
    ``tuner resume``) are applied once the lock is held and recorded as a study event. ``gpus`` (``tuner
    worker --gpus``): the GPUs this run may use, one slot per GPU (per set of ``gpus_per_trial``), instead
    of ``workers`` slots over every visible GPU; on a CPU study they only name its shares (one slot each).
    ``memory_model``: skip settings predicted to run out of memory (:mod:`tuner.search.feasibility`), a
    warm-started study's source evidence as its prior, read from ``warm_start_storage`` when given (else
    the source's recorded storage). ``mlflow_uri`` None: ``$MLFLOW_TRACKING_URI`` or the local store.
    ``dashboard_view``: bring ``<home>/dashboard.db`` (the optuna-dashboard view) up to date at the end; a
    fleet worker does not (it reads and copies the whole study, on every host, each time a study is spent:
    ``tuner dashboard`` builds the view where someone browses it). ``started``: the ``time.monotonic()`` at which
    the invocation began (the command's start): the study's wall-time budget counts from it, so that the
    whole command keeps it (None: from when :func:`run_session` is called). ``runners``: where a ``tuner worker``
    keeps its runner between studies (:class:`tuner.runner.choice.KeptRunner`: the next study of the same workload
    finds its warm workers, model loaded); None: the session makes its own and closes it at its end."""

    home: Path
    device: str
    workers: int = 1
    mlflow_uri: str | None = None
    use_mlflow: bool = True
    overrides: Mapping[str, Any] = field(default_factory=dict)
    gpus: Sequence[int] | None = None
    memory_model: bool = True
    warm_start_storage: str | None = None
    dashboard_view: bool = True
    started: float | None = None
    runners: KeptRunner | None = None  # a fleet worker's runner, kept from study to study (None: one per session)


def run_session(opened: OpenStudy, options: RunOptions, listener: SessionListener | None = None) -> Summary:
    """Run ``opened`` to its budget, say what happened to ``listener``, export the setting its rule chooses to
    ``<home>/<study>/best.yaml``; the coordinator's summary (a run that stopped early has
    :attr:`Summary.failure`, an interrupted one :attr:`Summary.interrupted`).

    Raises ``StudyError`` (one line) when a device is locked by another live run of the study, or the
    storage fails (then the trial in flight is re-run by ``tuner resume``; nothing stored is lost);
    ``StorageMisconfigured``, naming the storage, when it refused a login, a database or a permission.
    """
    said = listener if listener is not None else Quiet()
    if options.started is None:
        options = replace(options, started=time.monotonic())
    study = opened.study
    lock = lock_for(study, resources(options.device, options.gpus))
    lock.acquire()  # StudyLocked (a StudyError) when another live coordinator runs this study
    try:
        store.record_event(study, "resume" if not opened.created else "run", dict(options.overrides))
        return _locked_run(opened, options, said)
    except Exception as error:
        problem = misconfiguration(error)
        if problem is not None:  # a refusal, never waited out: the storage named, the problem in its words
            raise StorageMisconfigured.of(
                problem,
                opened.storage_url,
                f"; not an outage, so the study stopped at "
                f"once (once it is put right, 'tuner resume {study.study_name}' re-runs "
                f"the trial in flight; nothing stored is lost)",
            ) from None
        cause = storage_cause(error)
        if cause is not None:
            raise StudyError(
                f"storage error, the study stopped: {cause} (storage {redact_url(opened.storage_url)}; "
                f"the trial in flight is re-run by 'tuner resume {study.study_name}'; "
                f"nothing stored is lost)"
            ) from None
        raise
    finally:
        lock.release()


def _locked_run(opened: OpenStudy, options: RunOptions, listener: SessionListener) -> Summary:
    """Wire, run and finish, the lock held."""
    from tuner.search.objectives import ensure_metric_names, plan_constraints
    from tuner.tracking.live import tracking_uri

    study = opened.study
    facts = host_facts(options.device)
    plan = plan_constraints(opened.spec, facts)
    say_disabled_constraints(plan, listener)
    say_inputs(opened.spec, listener)
    store.set_study_attribute(study, names.DISABLED_CONSTRAINTS, dict(plan.disabled))
    ensure_metric_names(study, opened.spec)  # a study made before metric names were stored gets them (dashboards)
    slots = slots_for(opened.spec.workload, options.device, options.workers, options.gpus, listener)
    tracker = (
        connect_tracker(study, opened.spec, opened.storage_url, tracking_uri(options.mlflow_uri), listener)
        if options.use_mlflow
        else None
    )
    prior, source_trials = warm_start_evidence(
        study,
        opened.spec,
        opened.storage_url,
        plan,
        facts["gpu_memory_gb"],
        options.warm_start_storage,
        listener,
        options.memory_model,
    )
    summary = _run_coordinator(opened, options, plan, slots, tracker, (prior, source_trials), listener)
    if tracker is not None:
        close_tracker(tracker, study.study_name, listener)
    chosen = choose_export(study)  # once: the front's mark and best.yaml are the same trial
    say_summary(study, opened.spec, summary, listener, chosen)
    export_best(study, opened.storage_url, options.home, listener, chosen)
    if options.dashboard_view:
        refresh_dashboard_view(opened.storage_url, study.study_name, options.home, listener)
    say_where(study.study_name, opened.storage_url, tracker, listener)
    return summary


def _run_coordinator(
    opened: OpenStudy,
    options: RunOptions,
    plan: ConstraintPlan,
    slots: list[Slot],
    tracker: MlflowTracker | None,
    evidence: tuple[Sequence[Observation], Sequence[FrozenTrial]],
    listener: SessionListener,
) -> Summary:
    """The coordinator's run on ``slots`` (the runner closed after it, whatever happens)."""
    from tuner.evaluators.registry import warm_ups
    from tuner.runner.choice import make_runner
    from tuner.storage.cost import device_budget_s
    from tuner.study.coordinator import Coordinator
    from tuner.tracking.live import tracking_uri

    study, spec = opened.study, opened.spec
    listeners: list[Listener] = listener.trial_listeners() + ([tracker] if tracker is not None else [])
    stored = StudyRecord.of(study)
    preload = warm_ups(spec.measured_metrics)
    runner = options.runners.runner_for(spec, preload, slots) if options.runners else make_runner(spec, preload)
    coordinator = Coordinator(
        study=study,
        spec=spec,
        runner=runner,
        slots=slots,
        home=options.home,
        device=options.device,
        plan=plan,
        budget_trials=stored.budget_trials,
        wall_time_s=stored.budget_wall_time_s,
        listeners=listeners,
        budget_device_s=device_budget_s(stored.budget_device_hours),
        reference_store=reference_store(
            spec.name, stored.gpu_type, tracking_uri(options.mlflow_uri) if tracker is not None else None
        ),
        memory_model=options.memory_model,
        memory_prior=evidence[0],
        prediction_prior=evidence[1],
        wall_started=options.started,
        finish_reserve_s=finish_reserve_s(stored.budget_wall_time_s),
    )
    kept = False
    try:
        with stop_on_signals(coordinator.interrupt, listener):
            summary = coordinator.run()
        kept = options.runners is not None and not summary.interrupted  # the next study may find it warm
        return summary
    finally:
        if not kept:
            options.runners.close() if options.runners is not None else runner.close()


def storage_cause(error: BaseException) -> str | None:
    """The database's own words when ``error`` is a storage failure (locked past the busy timeout,
    disk full, connection lost; unreachable past the outage bound: how long it was waited for), else
    None. Optuna wraps them in a ``StorageInternalError`` whose text blames "invalid data"; the
    driver's message is further down the exception chain."""
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import DBAPIError

    from tuner.storage.outage import StorageUnavailable

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
