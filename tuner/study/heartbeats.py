"""Trial heartbeats: how coordinators sharing a study tell a live trial from a dead host's.

Every coordinator (``tuner run``, ``resume``, ``worker``) writes on each trial it
starts the attributes ``host`` (this host's name), ``worker`` (``host:pid``, this
coordinator) and ``slot``, and records an Optuna heartbeat for it when it starts
and every ``heartbeat_interval`` seconds while it runs (``storage.record_heartbeat``;
the storage is opened with ``heartbeat_interval`` and ``grace_period``, see
:mod:`tuner.study.storage`). Optuna's own heartbeat thread only runs inside
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

For one grace period after a storage outage ends (:func:`tuner.study.outage.recovered_within`), the
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
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tuner.study.outage import call_through_outage, recovered_within

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

    def __init__(self, study: "optuna.Study") -> None:
        self._storage = study._storage
        interval = self._storage.get_heartbeat_interval() if hasattr(self._storage, "get_heartbeat_interval") \
            else None
        self.interval_s: float | None = float(interval) if interval else None
        self._last = 0.0

    def start(self, trial_id: int) -> None:
        """The first beat of a trial, when it starts (so a host dying at once is still noticed)."""
        if self.interval_s is not None:
            self._storage.record_heartbeat(trial_id)

    def beat(self, trial_ids: Iterable[int]) -> None:
        """Beat for ``trial_ids`` when an interval has passed since the last beat (cheap otherwise)."""
        if self.interval_s is None or time.monotonic() - self._last < self.interval_s:
            return
        self._last = time.monotonic()
        for trial_id in trial_ids:
            self._storage.record_heartbeat(trial_id)


def stale_trial_ids(study: "optuna.Study") -> dict[int, str]:
    """RUNNING trials no live coordinator runs: trial id -> why (see the module docstring)."""
    from optuna.trial import TrialState

    storage = study._storage
    stale: dict[int, str] = {}
    heartbeats = bool(getattr(storage, "get_heartbeat_interval", lambda: None)())
    if heartbeats and not recovered_within(_grace_period_s(storage)):  # after an outage nobody could beat
        for trial_id in storage._get_stale_trial_ids(study._study_id):
            stale[trial_id] = "its worker stopped sending heartbeats (host down or cut off from the storage)"
    unclaimed: list[Any] = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get("worker")
        if trial._trial_id in stale:
            continue
        if _local_worker_gone(worker):
            stale[trial._trial_id] = f"its coordinator ({worker}) stopped while it ran"
        elif worker is None and _started_before(trial, UNCLAIMED_AFTER_S):
            unclaimed.append(trial)
    beating = _trials_with_heartbeat(storage) if heartbeats and unclaimed else set()  # read only when needed
    for trial in unclaimed:
        if trial._trial_id not in beating:
            stale[trial._trial_id] = "the coordinator stopped while it ran"
    return stale


def _started_before(trial: Any, seconds: float) -> bool:
    """Whether the trial started more than ``seconds`` ago (Optuna stores local, naive times)."""
    import datetime

    start = trial.datetime_start
    return start is None or (datetime.datetime.now() - start).total_seconds() > seconds


def _grace_period_s(storage: Any) -> float:
    """The storage's heartbeat grace period in seconds (Optuna's default: twice the interval)."""
    backend = getattr(storage, "_backend", storage)
    grace = getattr(backend, "grace_period", None)
    interval = getattr(backend, "heartbeat_interval", None) or 0
    return float(grace if grace else 2 * interval)


def _trials_with_heartbeat(storage: Any) -> set[int]:
    """Ids of trials that have a heartbeat row (an RDB storage with heartbeats enabled); the query rides
    through a storage outage (:mod:`.outage`)."""
    backend = getattr(storage, "_backend", storage)
    if not hasattr(backend, "scoped_session"):
        return set()  # an unusual storage: no trial is known to beat
    from optuna.storages._rdb import models

    def read() -> set[int]:
        with backend.scoped_session() as session:
            return {row.trial_id for row in session.query(models.TrialHeartbeatModel.trial_id).all()}

    return call_through_outage(read)


def reclaim_stale(study: "optuna.Study", enqueue_again: Callable[[Any, str, int], None]) -> int:
    """Fail every stale RUNNING trial as ``INTERRUPTED`` and enqueue its setting again; the count.

    ``enqueue_again(params, role, rerun_of)`` queues a setting. Only the coordinator whose
    state change succeeds re-queues, so a trial found by several is redone once.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = study._storage
    count = 0
    for trial_id, reason in stale_trial_ids(study).items():
        try:
            trial = storage.get_trial(trial_id)
            storage.set_trial_user_attr(trial_id, "outcome", "INTERRUPTED")
            storage.set_trial_user_attr(trial_id, "reason", reason)
            storage.set_trial_user_attr(trial_id, "measured", False)
            if not storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                continue
        except UpdateFinishedTrialError:
            continue  # another coordinator reclaimed it first
        if trial.params:
            enqueue_again(trial.params, trial.user_attrs.get("role", "search"), trial.number)
        count += 1
    return count


TAKEN_OVER = ("no heartbeat of this coordinator reached the storage for longer than the grace period (the process "
              "was frozen or cut off), so another one failed the trial as stale and re-runs its setting")
"""Why a coordinator drops what it still had to write for a trial (a late result, a copy, a give-back)."""


def taken_over(error: BaseException) -> bool:
    """Whether ``error``, raised by a write to a trial this coordinator holds, says the trial was finished by
    someone else meanwhile (Optuna's "has already finished" / "Cannot tell a FAIL trial")."""
    from optuna.exceptions import UpdateFinishedTrialError

    return isinstance(error, UpdateFinishedTrialError) or (
        isinstance(error, ValueError) and str(error).startswith("Cannot tell a "))

