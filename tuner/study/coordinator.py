"""The coordinator: the ask → run → tell loop that owns the storage.

Any number of coordinators may run one study (``tuner worker`` on every host of a
fleet, one storage). Each asks Optuna for candidates, resolves derived values
and rules (a rule-breaking candidate is recorded INVALID, never run, and told to
the sampler as an infeasible point, like OOM), claims the setting fleet-wide
(:mod:`.claims`: a setting measured anywhere is copied, one in flight elsewhere
is copied once measured), runs the rest on its runner's slots in parallel
threads and tells each result back (:mod:`.trial_recording`). Only this thread talks
to the storage. The reference runs first and alone (every quality metric needs its
output), then the baseline, then the search; while either runs on another host, this
one waits. A predicted OOM (:mod:`.feasibility`) is recorded SKIPPED_PREDICTED_OOM:
never run, free, a wall. Each trial records ``host``, ``worker`` and ``slot`` and beats
a heartbeat while it runs; RUNNING trials whose coordinator died are marked FAIL
(``INTERRUPTED``) and their settings enqueued again (:mod:`.heartbeats`) — a live one's never.

The loop (:meth:`Coordinator.run`) keeps its state in a
:class:`~tuner.study.coordinator_state.LoopState`; each turn looks at the study, fills the
free slots (:class:`~tuner.study.placement.TrialStarter`), lets go of what it holds when the study
stops, beats and reclaims, then collects the trials that ended. Between turns it sleeps
(:meth:`Coordinator._wait`, one blocking wait) until a trial ends, an interrupt comes, a heartbeat is due
or, while a slot is free, a look at the study (:data:`POLL_S`) or a reclaim (:data:`RECLAIM_EVERY_S`); a
coordinator whose slots are all busy reads nothing and turns at most every :data:`TICK_S` (issue 27: waiting
costs nothing, ``bench/idle_coordinator.py``).

What lets a trial start -- the trial, device-hour and wall-time budgets (``budget_trials``,
``budget_device_s``, ``wall_time_s`` counted from ``wall_started`` with ``finish_reserve_s`` kept for the
finish), the other hosts, an exhausted space, a dead host's owed rerun -- is :mod:`.budgets`; the study
attribute ``cancelled`` stops proposing everywhere (trials in flight finish). Early stops
(a failed reference, the same failure on every first run) and adaptive timeouts
are in :mod:`.guards`; such a stop, or an unwritable trial directory, sets
:attr:`Summary.failure`. :meth:`Coordinator.interrupt` (Ctrl-C) stops proposing,
gives trials in flight :data:`INTERRUPT_GRACE_S` seconds, then kills them through
``runner.close()``; they are recorded ``INTERRUPTED`` and enqueued again.

A search trial whose quality is scored off the device (``measurement.score_off_device``,
:mod:`tuner.runner.scoring`) returns measured with its outputs saved; its slot is free at once, a scorer
scores it beside the next trial, and it stays in flight (held, counted) until it is told, scored. No trial
starts while more trials wait for their scores than there are slots.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot
from tuner.runner.scoring import Scorer, pending
from tuner.search.feasibility import FeasibilityModel, Observation
from tuner.search.guards import reference_stop, same_failure_stop
from tuner.search.objectives import ConstraintPlan
from tuner.spec.space import distributions
from tuner.storage import attributes as names
from tuner.storage import store
from tuner.storage.coordination.claims import claims_for
from tuner.storage.coordination.heartbeats import Heartbeats, reclaim_stale
from tuner.storage.cost import trial_cost
from tuner.study.budgets import StartRules, WallBudget
from tuner.study.coordinator_state import InFlight, LoopState, result_of
from tuner.study.listeners import Listener, Summary
from tuner.study.load_order import LoadOrder
from tuner.study.placement import Placement, TrialStarter
from tuner.study.reference import LocalReferenceStore, ReferenceHandOff, ReferenceStore
from tuner.study.shapes import ShapeReferences
from tuner.study.shared import ORIGINAL_LOST, SharedView, queue_reference, settle_copies
from tuner.study.snapshot import StudySnapshot
from tuner.study.studies import study_directory
from tuner.study.trial_recording import TrialRecorder
from tuner.study.trial_request import TrialRequests
from tuner.study.wakeup import Wakeup

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.spec.models import StudySpec

INTERRUPT_GRACE_S = 3.0
POLL_S = 1.0  # how often a coordinator with a free slot (or waiting on other hosts) looks at the storage again
RECLAIM_EVERY_S = 5.0  # how often one with a free slot looks for trials whose coordinator died
TICK_S = 5.0  # the longest one wait for a trial in flight lasts (listeners tick at least this often)


@dataclass
class Coordinator:
    """Runs ``study`` (created from ``spec``) until its budget is spent. See the module docstring."""

    study: optuna.Study
    spec: StudySpec
    runner: Runner
    slots: list[Slot]
    home: Path
    device: str
    plan: ConstraintPlan
    budget_trials: int | None
    wall_time_s: float | None
    listeners: list[Listener] = field(default_factory=list)
    reference_store: ReferenceStore = field(default_factory=LocalReferenceStore)  # how hosts share the output
    memory_model: bool = True  # skip settings predicted to run out of memory (:mod:`.feasibility`)
    memory_prior: Sequence[Observation] = ()  # its evidence from a warm-start study on other hardware
    prediction_prior: Sequence[FrozenTrial] = ()  # a warm start's trials: the predictions' other-hardware evidence
    budget_device_s: float | None = None  # device-seconds the study's runs may hold, every host (tuner.storage.cost)
    wall_started: float | None = None  # monotonic time ``wall_time_s`` counts from (None: the loop's start)
    finish_reserve_s: float = 0.0  # of ``wall_time_s``, seconds kept for what follows the loop (.budgets)

    def __post_init__(self) -> None:
        self.directions = [o.direction for o in self.spec.objectives]
        self.study_dir = study_directory(self.home, self.study.study_name)
        self._interrupt = threading.Event()
        self._claims = claims_for(self.study)
        self._handoff = ReferenceHandOff(self.reference_store, self.study_dir / "reference_output.npz")
        self._shapes = ShapeReferences(self.study, self.spec, self.study_dir, self.reference_store)
        self._feasibility = FeasibilityModel(self.spec, self.plan, self.memory_prior, enabled=self.memory_model)
        self._snapshot = StudySnapshot(self.study, self.directions)
        self._requests = TrialRequests(
            self.study, self.spec, self.device, self.study_dir, self._handoff, self._snapshot
        )
        self._space = distributions(self.spec)  # what the wall budget's duration forecast reads
        self._fed = 0  # how many of the snapshot's finished trials the memory model has seen

    def interrupt(self) -> None:
        """Ask the loop to stop (signal-safe): no new trials; those in flight end within seconds."""
        self._interrupt.set()
        wakeup = getattr(self, "_wakeup", None)
        if wakeup is not None:
            wakeup.set()  # a waiting loop sees it at once

    # ----------------------------------------------------------------- state
    def recover_interrupted(self) -> int:
        """Fail the RUNNING trials no live coordinator runs and enqueue them again (:mod:`.heartbeats`)."""
        return reclaim_stale(self.study)

    # ------------------------------------------------------------------ loop
    def run(self) -> Summary:
        """Run trials on this host's slots until the budget is spent or the study stops; what happened."""
        self._wakeup = Wakeup()  # a trial's end or an interrupt wakes the waiting loop (:meth:`_wait`)
        self._watched: set[Future[TrialResult]] = set()
        state = self._begin()
        self._scorer = Scorer()
        slots, scorers = len(self.slots), len(self.slots) + 1  # every slot's, and one more while it waits
        with (
            ThreadPoolExecutor(max_workers=slots, thread_name_prefix="tuner-slot") as pool,
            ThreadPoolExecutor(max_workers=scorers, thread_name_prefix="tuner-score") as self._scoring,
        ):
            while True:
                if self._look_due(state):
                    self._starter.refill(state, self._look(state), pool)
                stopping = self._stopping(state)
                if stopping:
                    self._let_go(state)
                self._beat_and_reclaim(state)
                if not state.inflight:
                    if self._look_again(state, stopping):
                        continue
                    self._let_go(state)  # trials parked for a shape's reference that can no longer run
                    break
                self._collect(state, self._wait(state))
        return self._summary(state)

    def _begin(self) -> LoopState:
        """Recover stale trials, queue a failed reference again, tell the listeners; the loop's state."""
        started = time.monotonic()
        wall = WallBudget(self.wall_time_s, self.wall_started or started, self.finish_reserve_s)
        self._rules = StartRules(self.budget_trials, self.budget_device_s, wall, self.study.sampler)
        self._recorder = TrialRecorder(
            self.study, self.spec, self.plan, self._handoff, self.listeners, self.budget_trials, started, self._snapshot
        )
        self.recover_interrupted()
        queue_reference(self.study, self.spec)
        self._snapshot.refresh()
        for listener in self.listeners:
            listener.on_start(
                self.study.study_name,
                self._snapshot.measured,
                self.budget_trials,
                self._rules.wall.left_s(),
                self.spec.objective_names,
            )
        self._heartbeats = Heartbeats(self.study)
        self._placement = Placement(
            self.study,
            self.spec,
            self._recorder,
            self._heartbeats,
            self._feasibility,
            self._claims,
            self._shapes,
            self._snapshot,
            prior=self.prediction_prior,
        )
        self._starter = TrialStarter(
            self.study,
            self.runner,
            len(self.slots),
            self.budget_trials,
            self.listeners,
            self._rules,
            self._placement,
            self._recorder,
            self._requests,
            self._shapes,
            self._snapshot,
            self._space,
            self._stopping,
        )
        return LoopState(
            started=started, free_slots=list(self.slots), last_reclaim=time.monotonic(), order=LoadOrder.of(self.spec)
        )

    def _stopping(self, state: LoopState) -> bool:
        """Whether nothing new may start: an early stop, an interrupt or a cancel."""
        return state.failure is not None or self._interrupt.is_set() or state.cancelled

    def _look_due(self, state: LoopState) -> bool:
        """Whether this turn reads the study: after a trial here ended (or on the first turn), when nothing
        runs here, and once a :data:`POLL_S` while a slot is free or proposals wait on other hosts. A
        coordinator whose slots are all busy reads nothing until one of its trials ends."""
        if state.look_now or not state.inflight:
            return True
        if state.free_slots or state.waiting or state.held is not None:
            return time.monotonic() - state.last_look >= POLL_S
        return False

    def _look(self, state: LoopState) -> SharedView:
        """Read what changed in the study (:meth:`StudySnapshot.refresh`, one read), settle set-aside copies,
        see a failed reference or a cancel (one attribute)."""
        state.look_now, state.last_look = False, time.monotonic()
        self._snapshot.refresh()
        view = SharedView.from_snapshot(self._snapshot, state.held_ids(), self.spec)
        finished = self._snapshot.finished_log
        self._feasibility.update(sorted(finished[self._fed :], key=lambda t: t.number))  # evidence since
        self._fed = len(finished)
        settled = settle_copies(state.waiting, view, state.keys_in_flight())
        for twin, _, original in settled.copies:
            self._recorder.copy(twin, original)
        for twin, candidate in settled.drops:
            self._recorder.give_back(twin, candidate.params, "search", ORIGINAL_LOST)
        if state.failure is None and view.failed_reference is not None and not state.inflight:
            state.failure = reference_stop(self.study.study_name, view.failed_reference)
        state.cancelled = state.cancelled or bool(store.study_attribute(self.study, names.CANCELLED))
        if state.cancelled:
            state.stopped = "cancelled: trials in flight finished, no new ones"
        return view

    def _let_go(self, state: LoopState) -> None:
        """The study stops: give back the held proposal and every set-aside one (queued again)."""
        for trial, candidate, role, reason in state.take_unstarted():
            self._recorder.give_back(trial, candidate.params, role, reason)

    def _beat_and_reclaim(self, state: LoopState) -> None:
        """Beat for the trials held here when a beat is due; every :data:`RECLAIM_EVERY_S` while a slot here
        is free, reclaim the trials of dead coordinators. A coordinator whose slots are all busy reclaims
        nothing: it could not run what it frees (one with a free slot does), and it reads no trials."""
        self._heartbeats.beat(state.held_ids())
        if state.reclaim_due(RECLAIM_EVERY_S) <= time.monotonic():  # infinity while every slot is busy
            state.last_reclaim = time.monotonic()
            self.recover_interrupted()

    def _look_again(self, state: LoopState, stopping: bool) -> bool:
        """Nothing in flight here: whether the loop goes on (after a pause when other hosts hold it up)."""
        if state.held is not None and not state.blocked:
            return True
        if (state.blocked or state.waiting) and not stopping:
            self._wakeup.wait(POLL_S)  # other hosts hold the budget, the reference or a setting; Ctrl-C wakes it
            return True
        return False

    def _wait(self, state: LoopState) -> set[Future[TrialResult]]:
        """Sleep until a trial in flight ends, an interrupt comes or the next thing is due (:meth:`_wait_s`);
        past the interrupt's grace, kill the trials in flight. Those that ended.

        The sleep is one blocking wait (:class:`~tuner.study.wakeup.Wakeup`): no turn of the loop, no read
        of the study, while every slot is busy and nothing is due."""
        self._watched.intersection_update(state.inflight)
        for future in state.inflight.keys() - self._watched:
            self._watched.add(future)
            future.add_done_callback(self._wakeup.set)  # at once when it has ended already
        if not any(future.done() for future in state.inflight):
            self._wakeup.wait(self._wait_s(state))
        done = {future for future in state.inflight if future.done()}
        state.look_now = state.look_now or bool(done)
        for listener in self.listeners:
            listener.on_tick(time.monotonic() - state.started)
        if self._interrupt.is_set() and state.inflight:
            if state.interrupted_at is None:
                state.interrupted_at = time.monotonic()
            elif time.monotonic() - state.interrupted_at >= INTERRUPT_GRACE_S:
                self.runner.close()  # kills every worker; their futures end at once
                self._scorer.close()  # and every scorer: their trials keep the measurement
        return done

    def _wait_s(self, state: LoopState) -> float:
        """Seconds until the loop has something to do other than collect a trial (:meth:`LoopState.wait_s`)."""
        return state.wait_s(
            time.monotonic(),
            self._interrupt.is_set(),
            self._heartbeats.next_due(),
            RECLAIM_EVERY_S,
            TICK_S,
            POLL_S,
            INTERRUPT_GRACE_S,
        )

    def _collect(self, state: LoopState, done: set[Future[TrialResult]]) -> None:
        """Tell the trials that ended (an interrupted one is given back), copy their set-aside twins."""
        for future in done:
            job = state.finished(future)
            result = result_of(future)
            if pending(result) and job.request is not None:  # measured, its quality owed: scored beside the next
                self._score_later(state, job, result)
                continue
            if state.interrupted_at is not None and result.outcome is not Outcome.OK:
                self._recorder.give_back(
                    job.trial,
                    job.candidate.params,
                    job.role,
                    "the run was interrupted (Ctrl-C)",
                    cost=trial_cost(result, job.slot.label),
                )
                continue
            frozen = self._recorder.measured(job.trial, job.role, job.slot.label, result)
            if frozen is None:
                continue  # another coordinator took it over as stale; its re-run counts instead
            state.ran += 1
            if job.role == "reference":
                state.failure = state.failure or reference_stop(self.study.study_name, frozen)
            state.failure = state.failure or same_failure_stop(self._snapshot.same_failure_evidence())
            for twin, _candidate in state.waiting.pop(job.candidate.key, []):
                self._recorder.copy(twin, frozen)
            self._recorder.notify(frozen)

    def _score_later(self, state: LoopState, job: InFlight, result: TrialResult) -> None:
        """``result`` is measured and its slot free: its quality is scored off the device (:mod:`tuner.runner.
        scoring`) while the slot runs the next trial; the trial is told when the scored result comes back."""
        assert job.request is not None
        scored = self._scoring.submit(self._scorer.score, job.request, result)
        state.inflight[scored] = replace(job, scoring=True)

    def _summary(self, state: LoopState) -> Summary:
        """Tell the listeners the study's front; what this run did."""
        self._snapshot.refresh()
        return state.summary(self.study.study_name, self._snapshot, self.listeners, self._interrupt.is_set())
