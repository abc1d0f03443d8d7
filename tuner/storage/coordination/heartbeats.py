"""Trial heartbeats: how coordinators sharing a study tell a live trial from a dead host's.

Every coordinator (``tuner run``, ``resume``, ``worker``) writes on each trial it
starts the attributes ``host`` (this host's name), ``worker`` (``host:pid``, this
coordinator) and ``slot``, and records an Optuna heartbeat for it when it starts
and every ``heartbeat_interval`` seconds while it runs (``storage.record_heartbeat``;
the storage is opened with ``heartbeat_interval`` and ``grace_period``, see
:mod:`tuner.storage.opening`). Optuna's own heartbeat thread only runs inside
``study.optimize``; the tuner's loop is ask/tell, so it beats from its main loop.

:func:`reclaim_stale` is the tuner's equivalent of Optuna's ``fail_stale_trials``
with a ``RetryFailedTrialCallback``: a RUNNING trial is another coordinator's to
redo only when

- its heartbeat is older than the grace period (Optuna's own test of staleness:
  its host died, or lost the database), or
- its ``worker`` is on this host and that process is gone (a killed local
  coordinator: no need to wait out the grace period), or
- it has neither heartbeat nor ``worker`` and started more than :data:`UNCLAIMED_AFTER_S`
  seconds ago (left by a tuner before heartbeats, or by a coordinator that died between
  claiming it and writing its ``worker``).

For one grace period after a storage outage ends (:func:`tuner.storage.outage.recovered_within`), the
first test is not applied: during the outage no coordinator could beat, so every heartbeat is old.

Such a trial is recorded ``INTERRUPTED`` with the reason, failed through the
storage's atomic state change (so when several coordinators find it at once,
exactly one wins), and its setting enqueued again with ``rerun_of``. A live
coordinator's trials are never touched.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tuner.storage import attributes as names
from tuner.storage import store
from tuner.storage.outage import recovered_within

if TYPE_CHECKING:
    import optuna

HOST_ENV = "TUNER_HOST"  # this host's name in the fleet (default: the hostname); tests stand in hosts with it
HOST = os.environ.get(HOST_ENV) or socket.gethostname()
UNCLAIMED_AFTER_S = 60.0


def worker_id() -> str:
    """This coordinator's id, ``host:pid`` (the trial attribute ``worker``)."""
    return f"{HOST}:{os.getpid()}"


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _local_worker_gone(worker: str | None) -> bool:
    """True when ``worker`` (``host:pid``) ran on this host and that process is gone."""
    if not worker:
        return False
    host, _, pid = worker.rpartition(":")
    if host != HOST or not pid.isdigit():
        return False
    return int(pid) != os.getpid() and not pid_alive(int(pid))


class Heartbeats:
    """Records the heartbeats of the trials this coordinator runs (call :meth:`beat` from its loop)."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study
        self.interval_s: float | None = store.heartbeat_interval_s(study)
        self._last = 0.0

    def start(self, trial_id: int) -> None:
        """The first beat of a trial, when it starts (so a host dying at once is still noticed)."""
        if self.interval_s is not None:
            store.record_heartbeat(self._study, [trial_id])

    def next_due(self) -> float:
        """When (``time.monotonic()``) :meth:`beat` next writes; infinity when the storage keeps no heartbeats."""
        return float("inf") if self.interval_s is None else self._last + self.interval_s

    def beat(self, trial_ids: Iterable[int]) -> None:
        """Beat for ``trial_ids`` when an interval has passed since the last beat (cheap otherwise)."""
        if self.interval_s is None or time.monotonic() - self._last < self.interval_s:
            return
        self._last = time.monotonic()
        store.record_heartbeat(self._study, list(trial_ids))


def stale_trial_ids(study: optuna.Study) -> dict[int, str]:
    """RUNNING trials no live coordinator runs: trial id -> why (see the module docstring)."""
    from optuna.trial import TrialState

    stale: dict[int, str] = {}
    heartbeats = store.heartbeat_interval_s(study) is not None
    if heartbeats and not recovered_within(store.heartbeat_grace_period_s(study)):  # nobody could beat in an outage
        for trial_id in store.heartbeat_stale_trial_ids(study):
            stale[trial_id] = "its worker stopped sending heartbeats (host down or cut off from the storage)"
    unclaimed: list[Any] = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = names.worker_of(trial)
        if store.trial_id(trial) in stale:
            continue
        if _local_worker_gone(worker):
            stale[store.trial_id(trial)] = f"its coordinator ({worker}) stopped while it ran"
        elif worker is None and _started_before(trial, UNCLAIMED_AFTER_S):
            unclaimed.append(trial)
    beating = (
        store.trials_with_heartbeat(study, [store.trial_id(t) for t in unclaimed])
        if heartbeats and unclaimed
        else set()
    )  # read only when needed, only those
    for trial in unclaimed:
        if store.trial_id(trial) not in beating:
            stale[store.trial_id(trial)] = "the coordinator stopped while it ran"
    return stale


def _started_before(trial: Any, seconds: float) -> bool:
    """Whether the trial started more than ``seconds`` ago (Optuna stores local, naive times)."""
    import datetime

    start = trial.datetime_start
    return start is None or (datetime.datetime.now() - start).total_seconds() > seconds


def reclaim_stale(study: optuna.Study) -> int:
    """Fail every stale RUNNING trial as ``INTERRUPTED`` and enqueue its setting again (its role kept,
    ``rerun_of`` set, ``owed``: every host counted the trial as holding a place in the trial budget, so its rerun
    keeps that place and starts even when the live hosts have filled the budget meanwhile); the count.

    Only the coordinator whose state change succeeds re-queues, so a trial found by several is redone once.
    """
    count = 0
    for trial_id, reason in stale_trial_ids(study).items():
        trial = store.reclaim(study, trial_id, reason)
        if trial is None:
            continue  # another coordinator reclaimed it first
        if trial.params:
            store.enqueue(study, trial.params, names.role_of(trial), trial.number, owed=True)
        count += 1
    return count


TAKEN_OVER = (
    "no heartbeat of this coordinator reached the storage for longer than the grace period (the process "
    "was frozen or cut off), so another one failed the trial as stale and re-runs its setting"
)
"""Why a coordinator drops what it still had to write for a trial (a late result, a copy, a give-back)."""


def taken_over(error: BaseException) -> bool:
    """Whether ``error``, raised by a write to a trial this coordinator holds, says the trial was finished by
    someone else meanwhile (Optuna's "has already finished" / "Cannot tell a FAIL trial")."""
    from optuna.exceptions import UpdateFinishedTrialError

    return isinstance(error, UpdateFinishedTrialError) or (
        isinstance(error, ValueError) and str(error).startswith("Cannot tell a ")
    )
