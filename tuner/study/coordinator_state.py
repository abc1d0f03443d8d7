"""What one run of the coordinator's loop keeps between its turns (:class:`LoopState`).

The state belongs to one :meth:`tuner.study.coordinator.Coordinator.run`: this
host's free slots, its trials in flight, the proposals it set aside to be copied
(:func:`tuner.study.shared.settle_copies`), the proposal it holds back for a slot,
and why the loop stops. Only the coordinator's thread reads or changes it.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tuner.results import Outcome, TrialResult
from tuner.runner.base import Slot, TrialRequest
from tuner.search.guards import StudyStop
from tuner.spec.candidate import Candidate
from tuner.storage import store
from tuner.study.load_order import LoadOrder
from tuner.study.shared import EXCLUSIVE_ROLES, Twin

if TYPE_CHECKING:
    from collections.abc import Sequence

    import optuna

    from tuner.study.listeners import Listener, Summary
    from tuner.study.snapshot import StudySnapshot

Held = tuple["optuna.Trial", Candidate, str]
"""A proposal that must run here and waits for a slot: (the asked trial, its candidate, its role)."""


@dataclass
class InFlight:
    """A trial running on one of this host's slots, or (``scoring``) measured and waiting for its quality score
    off the device, its slot free again (:mod:`tuner.runner.scoring`)."""

    trial: optuna.Trial
    candidate: Candidate
    slot: Slot
    role: str
    request: TrialRequest | None = None  # what it runs with (the scorer reads it)
    scoring: bool = False


@dataclass
class LoopState:
    """The loop's state: see the module docstring. ``started`` is ``time.monotonic()`` at the start."""

    started: float
    free_slots: list[Slot]
    last_reclaim: float  # when stale trials were last looked for (``time.monotonic()``)
    inflight: dict[Future[TrialResult], InFlight] = field(default_factory=dict)
    waiting: dict[str, list[Twin]] = field(default_factory=dict)  # candidate key -> proposals to copy once measured
    held: Held | None = None
    parked: dict[str, list[Held]] = field(default_factory=dict)  # shape reference key -> proposals waiting for it
    exclusive: bool = False  # the reference or the baseline runs here: nothing else starts
    cancelled: bool = False  # the study attribute ``cancelled`` was seen
    blocked: bool = False  # this turn nothing could start because of other hosts: look again after a pause
    idle_proposals: int = 0  # proposals in a row that needed no run
    ran: int = 0  # trials this run measured
    stopped: str = "budget spent"  # why the loop ended, when nothing more specific is known
    failure: StudyStop | None = None  # an early stop: continuing would waste the budget
    interrupted_at: float | None = None  # when the loop first saw the interrupt with trials in flight
    look_now: bool = True  # the next turn reads the study: first turn, or a trial here ended
    last_look: float = 0.0  # when the loop last read the study (``time.monotonic()``)
    order: LoadOrder = field(default_factory=lambda: LoadOrder((), 1))  # proposals set aside for a reload (.load_order)

    def held_ids(self) -> set[int]:
        """Storage ids of the RUNNING trials this loop holds: in flight, set aside, or held back."""
        ids = {store.trial_id(job.trial) for job in self.inflight.values()}
        ids |= {store.trial_id(trial) for twins in self.waiting.values() for trial, _ in twins}
        ids |= {store.trial_id(held[0]) for parked in self.parked.values() for held in parked}
        ids |= {store.trial_id(held[0]) for held in self.order.aside}
        return ids | ({store.trial_id(self.held[0])} if self.held is not None else set())

    def parked_count(self) -> int:
        """How many proposals wait for their shape's reference (:mod:`tuner.study.shapes`)."""
        return sum(len(parked) for parked in self.parked.values())

    def remaining(self, budget_trials: int | None, measured: int, running_elsewhere: int) -> int | None:
        """Trials the budget still lets start (``measured`` and ``running_elsewhere``: the study's, every host);
        None without a trial budget."""
        if budget_trials is None:
            return None
        return budget_trials - measured - len(self.inflight) - running_elsewhere

    def take_unstarted(self) -> list[tuple[optuna.Trial, Candidate, str, str]]:
        """Every proposal held here that has not started, taken out, with why it stops waiting: (trial, candidate,
        role, reason). The study stops: they are given back (queued again)."""
        taken: list[tuple[optuna.Trial, Candidate, str, str]] = []
        if self.held is not None:
            taken.append((*self.held, "not started: the study stopped"))
            self.held = None
        repeats = "not copied: the study stopped before the setting it repeats was measured"
        taken += [
            (twin, candidate, "search", repeats)
            for key in list(self.waiting)
            for twin, candidate in self.waiting.pop(key)
        ]
        reload = "not started: the study stopped while it waited for its reload_on values"
        taken += [(*held, reload) for held in self.order.take_all()]
        shape = "not started: the study stopped before the reference at its shape was measured"
        taken += [(*held, shape) for key in list(self.parked) for held in self.parked.pop(key)]
        return taken

    def keys_in_flight(self) -> set[str]:
        """Candidate keys of the trials in flight here (their set-aside twins settle when they end)."""
        return {job.candidate.key for job in self.inflight.values()}

    def take_slot(self, role: str) -> Slot:
        """The first free slot, for a trial of ``role`` (the reference or baseline then runs alone)."""
        self.exclusive = role in EXCLUSIVE_ROLES
        return self.free_slots.pop(0)

    def untake_slot(self, slot: Slot) -> None:
        """``slot`` was taken but nothing started on it."""
        self.free_slots.append(slot)
        self.exclusive = False

    def scores_block(self, slots: int) -> bool:
        """Whether no trial may start because more than ``slots`` measured trials wait for their quality score
        (their outputs wait on disk: a bound on what piles up when scoring is slower than measuring)."""
        return sum(job.scoring for job in self.inflight.values()) > slots

    def finished(self, future: Future[TrialResult]) -> InFlight:
        """The trial of ``future``, which ended: its slot is free again (slots kept in index order; a scored
        trial's was freed when its measurement ended)."""
        job = self.inflight.pop(future)
        if job.scoring:
            return job
        self.free_slots.append(job.slot)
        self.free_slots.sort(key=lambda s: s.index)
        if job.role in EXCLUSIVE_ROLES:
            self.exclusive = False
        return job

    def reclaim_due(self, every_s: float) -> float:
        """When (``time.monotonic()``) the next look for dead coordinators' trials is due: ``every_s`` after
        the last, while a slot here is free; infinity while every slot here is busy (it could not run them)."""
        if self.inflight and not self.free_slots:
            return float("inf")
        return self.last_reclaim + every_s

    def wait_s(
        self,
        now: float,
        interrupted: bool,
        beat_due: float,
        reclaim_every_s: float,
        tick_s: float,
        poll_s: float,
        grace_s: float,
    ) -> float:
        """Seconds from ``now`` until the loop has something to do other than collect a trial: the next
        heartbeat (``beat_due``), a look at the study (every ``poll_s``, only while a slot is free or proposals
        wait), a reclaim (:meth:`reclaim_due`), the end of an interrupt's grace (``grace_s``), a listener tick
        (at most ``tick_s``); 0 when an interrupt is new."""
        if interrupted and self.interrupted_at is None:
            return 0.0
        due = [now + tick_s, beat_due, self.reclaim_due(reclaim_every_s)]
        if self.free_slots or self.waiting or self.parked or self.order.aside or self.held is not None:
            due.append(self.last_look + poll_s)
        if self.interrupted_at is not None and self.interrupted_at + grace_s > now:
            due.append(self.interrupted_at + grace_s)  # then the runner is closed, once a tick after
        return max(0.0, min(due) - now)

    def summary(
        self, study_name: str, snapshot: StudySnapshot, listeners: Sequence[Listener], interrupted: bool
    ) -> Summary:
        """Tell ``listeners`` the study's trials and front (``snapshot``, refreshed by the caller); what this
        run did."""
        from tuner.storage import attributes as names
        from tuner.study.listeners import Summary

        trials, front = snapshot.trials, snapshot.front()
        for listener in listeners:
            listener.on_finish(trials, front)
        outcomes: dict[str, int] = {}
        for t in trials:
            key = names.outcome_of(t)
            outcomes[key] = outcomes.get(key, 0) + 1
        stopped = self.stopped
        if self.failure is not None:
            stopped = "stopped early: " + self.failure.message
        elif interrupted:
            stopped = "interrupted"
        return Summary(
            study_name,
            snapshot.measured,
            len(trials),
            outcomes,
            [t.number for t in front],
            stopped,
            failure=self.failure.message if self.failure is not None else None,
            interrupted=interrupted,
            ran=self.ran,
        )


def result_of(future: Future[TrialResult]) -> TrialResult:
    """The runner's result; a runner bug becomes a CRASH outcome, never a lost trial."""
    try:
        return future.result()
    except Exception as error:  # noqa: BLE001
        return TrialResult(Outcome.CRASH, reason=f"runner failed: {type(error).__name__}: {error}")
