"""``tuner worker``'s loop: which studies of a shared storage this host joins, and running them.

:func:`run_worker` is an ordinary session (:mod:`tuner.session`) on the devices it is given; many
workers on many hosts share one study through the storage (budget, queue, heartbeats). With a study
named it runs that study until its budget is spent and ends; without, it takes the oldest open study
for this host's GPU type, then the next, and waits for new ones (``once``: it ends when there is
nothing to do). It says what it does through a :class:`~tuner.session.events.SessionListener`.

A study is *open* when it was created by the tuner, is not cancelled (study
attribute ``cancelled``), and its budget is not spent (measured trials below
``budget_trials``; a study without a trial budget stays open until cancelled).
It *fits* a host when its ``gpu_type`` (the GPU type it was created or submitted
for, ``cpu`` for a CPU study) is this host's. Workers take the oldest open study
first, so a fleet finishes one study before the next.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import StudyError
from tuner.session.events import Notice, SessionListener
from tuner.session.signals import INTERRUPTED_EXIT
from tuner.storage.optuna_private import RDB_STORAGE_MODULE
from tuner.study.listeners import Summary


@dataclass(frozen=True)
class OpenStudyInfo:
    """An open study: its name, GPU type, device, and measured / budget counts."""

    name: str
    gpu_type: str
    device: str
    measured: int
    budget: int | None


def open_studies(url: str, gpu_type: str | None = None) -> list[OpenStudyInfo]:
    """Open studies of the storage at ``url``, oldest first; only those for ``gpu_type`` when given.

    Reads the storage only (never creates it): a missing SQLite file has no studies. Its connections are
    closed before it returns (a waiting worker calls this every poll).
    """
    from tuner.storage.opening import close_storage, missing_sqlite_file, open_storage

    if missing_sqlite_file(url) is not None:
        return []
    storage = open_storage(url, create=False)
    try:
        return _open_in(storage, gpu_type)
    finally:
        close_storage(storage)


def _open_in(storage: Any, gpu_type: str | None) -> list[OpenStudyInfo]:
    """:func:`open_studies` of an opened storage."""
    from tuner.storage.attributes import cost_of, is_measured
    from tuner.storage.cost import device_budget_s, device_s_of
    from tuner.storage.records import StudyRecord
    from tuner.storage.store import trials_of

    found: list[OpenStudyInfo] = []
    for summary in storage.get_all_studies():
        stored = StudyRecord.of(summary)
        if not stored.tuner_study or stored.cancelled:
            continue
        kind = str(stored.gpu_type or "cpu")
        if gpu_type is not None and kind != gpu_type:
            continue
        budget, trials = stored.budget_trials, trials_of(storage, summary)
        measured = sum(1 for t in trials if is_measured(t))
        if budget is not None and measured >= int(budget):
            continue
        device_budget = device_budget_s(stored.budget_device_hours)
        if device_budget is not None and sum(device_s_of(cost_of(t)) or 0.0 for t in trials) >= device_budget:
            continue
        found.append(
            OpenStudyInfo(
                summary.study_name,
                kind,
                str(stored.device or "cpu"),
                measured,
                int(budget) if budget is not None else None,
            )
        )
    return found


@dataclass(frozen=True)
class WorkerOptions:
    """What a worker joins and how: the storage, the tuner home (trial files), one ``study`` (None: every
    open study for this host), the ``gpus`` it uses (None: every visible one), MLflow (``mlflow_uri``
    None: ``$MLFLOW_TRACKING_URI`` or the local store), ``once`` (end when no open study is left instead
    of waiting) and ``poll_s`` (seconds between looks for a new study)."""

    storage_url: str
    home: Path
    study: str | None = None
    gpus: Sequence[int] | None = None
    mlflow_uri: str | None = None
    use_mlflow: bool = True
    once: bool = False
    poll_s: float = 5.0


STOPPED_EARLY_EXIT = 3  # the named study stopped because continuing would waste its budget
_STOP = threading.Event()  # set by request_stop (the SIGTERM handler): looked at before each look and wait


def request_stop() -> None:
    """Ask :func:`run_worker` to stop: it raises ``KeyboardInterrupt`` at its next look for a study or within
    its poll wait. The SIGTERM handler calls this before it raises ``KeyboardInterrupt`` itself, because a
    signal that lands while Python runs a finalizer or weakref callback (garbage collection, at any moment)
    has its handler's exception printed and dropped: the flag stops the worker anyway."""
    _STOP.set()


def _stop_if_asked() -> None:
    if _STOP.is_set():
        raise KeyboardInterrupt


def run_worker(options: WorkerOptions, listener: SessionListener) -> int:
    """Run studies on this host until done (see the module docstring); the exit status: 130 when
    interrupted, 3 when the named study stopped early, else 0. A study this worker ran to an end
    (budget spent, stopped early) is not joined again.

    Raises ``StudyError`` or ``SpecError`` (one line) when the storage, a study or its spec cannot be
    read, or a GPU study meets a host without GPUs.
    """
    from tuner.gpu import gpu_type
    from tuner.runner.choice import KeptRunner
    from tuner.secrets import redact_url
    from tuner.storage.coordination.heartbeats import HOST

    kind = gpu_type()
    _import_what_a_join_needs()
    shown = f", GPUs {','.join(str(g) for g in options.gpus)}" if options.gpus else ""
    listener.on_notice(Notice("worker_started", f"worker {HOST} ({kind}) on {redact_url(options.storage_url)}{shown}"))
    kept = KeptRunner()  # the next study of the same workload finds its warm workers (tuner.runner.choice)
    try:
        return _serve(kind, options, listener, kept)
    finally:
        kept.close()


def _serve(kind: str, options: WorkerOptions, listener: SessionListener, kept: Any) -> int:
    """:func:`run_worker`'s loop, with the runner ``kept`` between studies; closed while it waits for one (an idle
    worker holds no device memory)."""
    waiting = False
    finished: set[str] = set()  # studies this worker ran to an end (exhausted, stopped early): not again
    while True:
        _stop_if_asked()
        names = (
            [options.study]
            if options.study is not None
            else [s.name for s in open_studies(options.storage_url, kind) if s.name not in finished]
        )
        if not names:
            if options.once:
                listener.on_notice(Notice("worker_done", "no open study for this host: done (--once)"))
                return 0
            if not waiting:
                waiting = True
                kept.close()
                listener.on_notice(
                    Notice(
                        "worker_waiting",
                        f"no open study for {kind}: waiting (every {options.poll_s:g} s; Ctrl-C stops)",
                    )
                )
            _STOP.wait(options.poll_s)
            continue
        waiting = False
        summary = _join(names[0], kind, options, listener, kept)
        if summary.interrupted or options.study is not None:
            return INTERRUPTED_EXIT if summary.interrupted else STOPPED_EARLY_EXIT if summary.failure is not None else 0
        finished.add(names[0])
        if summary.failure is not None:
            listener.on_notice(Notice("worker_moves_on", f"study {names[0]} stopped early; this worker moves on"))


JOIN_MODULES = (
    "tuner.session.run",
    "tuner.study.coordinator",
    "tuner.study.studies",
    "tuner.runner.choice",
    "tuner.runner.subprocess",
    "tuner.evaluators.registry",
    "tuner.search.objectives",
    "tuner.search.samplers",
    "optuna.samplers",
    RDB_STORAGE_MODULE,
    "sqlalchemy.orm",
)


def _import_what_a_join_needs() -> None:
    """Import the modules joining a study runs (:data:`JOIN_MODULES`) before the first look: a waiting
    worker is idle, and a fleet whose hosts all join a new study at the same moment otherwise spends its
    first seconds importing on every host at once (about 1 CPU-second each on a 2-core machine)."""
    import importlib

    for module in JOIN_MODULES:
        importlib.import_module(module)


def _join(name: str, kind: str, options: WorkerOptions, listener: SessionListener, kept: Any = None) -> Summary:
    """Run study ``name`` here as one session of one slot per GPU (or one CPU share); ``kept``: the worker's
    runner kept between studies (:class:`tuner.runner.choice.KeptRunner`)."""
    from tuner.session.run import RunOptions, run_session
    from tuner.storage.coordination.heartbeats import worker_id
    from tuner.storage.opening import close_storage
    from tuner.storage.records import StudyRecord
    from tuner.storage.store import backend_of
    from tuner.study.studies import load_study

    opened = load_study(options.storage_url, name, seed_salt=worker_id())  # hosts joining at once: own seeds
    stored = StudyRecord.of(opened.study)
    device = str(stored.device or "cpu")
    if device == "cuda" and kind == "cpu":
        raise StudyError(f"study '{name}' runs on GPUs ({stored.gpu_type}) but this host has none visible")
    run = RunOptions(
        options.home,
        device,
        1,
        options.mlflow_uri if options.use_mlflow else None,
        options.use_mlflow,
        {},
        options.gpus,
        dashboard_view=False,
        runners=kept,
    )  # a view is built where it is browsed
    try:
        return run_session(opened, run, listener)
    finally:
        close_storage(backend_of(opened.study))  # the worker moves on: this study's connections go back
