"""Where an asked trial goes, and starting on this host's free slots those that run here.

Where it goes: never run (a rule refuses it, or the memory model predicts an OOM), copied (its setting is
measured already, here or on another host), parked (its shape's reference is not measured yet), or held to run
on this host. :class:`Placement` is the coordinator's one step from ``study.ask()`` to that answer; it records
what it decides (:class:`~tuner.study.trial_recording.TrialRecorder`) and claims the setting fleet-wide
(:mod:`tuner.storage.coordination.claims`).

Starting: each turn of the loop (:meth:`tuner.study.coordinator.Coordinator.run`) that read the study calls
:meth:`TrialStarter.refill`. While a slot is free, no exclusive trial runs here, the loop is not stopping, no
more trials wait for their scores than there are slots, and :class:`~tuner.study.budgets.StartRules` allow it,
the next proposal to start is, in order: the one held back for a slot, one whose shape's reference ran
(:mod:`.shapes`), one set aside for the values a warm worker keeps loaded (:mod:`.load_order`), or a new one
:class:`Placement` holds to run here. A dead host's owed rerun starts once the trial budget is otherwise spent
(one ask a turn). Starting a trial checks that an exclusive role (the reference, the baseline) runs alone, here
and elsewhere, and that the wall-time budget admits it (else it is given back and the loop stops); it then takes
a slot, builds the :class:`~tuner.runner.base.TrialRequest` (:mod:`.trial_request`), records the slot (and what
the trial's quality is compared with) on the trial, submits the run to the slot pool and tells the listeners. An
unwritable trial directory gives the trial back and stops the study (:func:`~tuner.search.guards.unwritable`).
Only the coordinator's thread calls either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome
from tuner.search.guards import StudyStop, unwritable
from tuner.spec.space import resolve, suggest
from tuner.storage import attributes as names
from tuner.storage import store
from tuner.storage.coordination.claims import claim_setting
from tuner.storage.coordination.heartbeats import HOST, Heartbeats, worker_id
from tuner.study.coordinator_state import Held, InFlight, LoopState
from tuner.study.shared import EXCLUSIVE_ROLES, SharedView

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from tuner.runner.base import Runner, Slot
    from tuner.search.dominance import RepeatLimits
    from tuner.search.feasibility import FeasibilityModel
    from tuner.search.prediction import OutcomePredictor, Prediction
    from tuner.spec.models import StudySpec
    from tuner.study.budgets import StartRules
    from tuner.study.listeners import Listener
    from tuner.study.shapes import ShapeReferences
    from tuner.study.snapshot import StudySnapshot
    from tuner.study.trial_recording import TrialRecorder
    from tuner.study.trial_request import TrialRequests


@dataclass
class Placement:
    """Asks ``study`` for a trial and places it (see the module docstring)."""

    study: optuna.Study
    spec: StudySpec
    recorder: TrialRecorder
    heartbeats: Heartbeats
    feasibility: FeasibilityModel
    claims: Any
    shapes: ShapeReferences
    snapshot: StudySnapshot
    predictor: OutcomePredictor | None = None  # latency and memory before a run (:mod:`tuner.search.prediction`)
    prior: Sequence[FrozenTrial] = ()  # a warm start's trials: the predictor's other-hardware evidence
    _fed: int = field(default=0, repr=False)  # the snapshot's finished trials the predictor has seen
    limits: dict[int, RepeatLimits] = field(default_factory=dict)  # trial number -> where its repeats may stop

    def __post_init__(self) -> None:
        if self.predictor is None:
            from tuner.search.prediction import OutcomePredictor
            from tuner.spec.space import distributions

            self.predictor = OutcomePredictor(self.spec, distributions(self.spec), self.prior)

    def propose(self, view: SharedView, state: LoopState) -> Held | None:
        """Ask for a candidate: it when it must run here; None when recorded (or set aside to be copied)."""
        trial = self.study.ask()
        held = None
        with self.recorder.holding(trial.number):
            held = self.place(trial, view, state)
        return held

    def place(self, trial: optuna.Trial, view: SharedView, state: LoopState) -> Held | None:
        """Resolve, record and claim the asked ``trial``: it when it must run here (see :meth:`propose`)."""
        role = store.start_trial(trial, HOST, worker_id())
        self.heartbeats.start(store.trial_id(trial))
        params = suggest(trial, self.spec)
        candidate, problem = resolve(self.spec, params)
        if candidate is None:
            self.recorder.unrun(trial, Outcome.INVALID, problem, {})
            return None
        store.record_candidate(trial, candidate.key, candidate.derived)
        if candidate.key in view.measured_by_key and role == "search":
            self.recorder.copy(trial, view.measured_by_key[candidate.key])
            return None
        prediction = self.feasibility.predict(candidate.params)
        if prediction.skip and role not in EXCLUSIVE_ROLES:
            self.recorder.unrun(trial, Outcome.SKIPPED_PREDICTED_OOM, prediction.reason, prediction.attributes())
            return None
        predicted = None  # computed once: the dominance check's predictions are the ones recorded below
        if role == "search" and self.spec.sampler.skip_dominated is not None:
            predicted = self._predictions(candidate.params)
            if self._dominated(trial, predicted):
                return None
        holder = claim_setting(self.study, self.claims, trial.number, candidate.key, role)
        if holder is None:
            parked = (
                self.shapes.park(
                    (trial, candidate, role), state.parked, self.snapshot, state.keys_in_flight(), view.running_keys
                )
                if role != names.REFERENCE
                else False
            )
            if not parked:
                predicted = self._predictions(candidate.params) if predicted is None else predicted
                store.record_prediction(trial, {name: p.record() for name, p in predicted.items()})
            return None if parked else (trial, candidate, role)
        if names.is_measured(holder) and holder.values is not None:
            self.recorder.copy(trial, holder)
        else:
            state.waiting.setdefault(candidate.key, []).append((trial, candidate))  # copied once it is measured
        return None

    def _predictions(self, params: Mapping[str, Any]) -> dict[str, Prediction]:
        """The setting's predicted latency and memory, from the trials finished so far."""
        assert self.predictor is not None
        finished = self.snapshot.finished_log
        self.predictor.update(finished[self._fed :])
        self._fed = len(finished)
        return self.predictor.predict(params)

    def _dominated(self, trial: optuna.Trial, predictions: Mapping[str, Prediction]) -> bool:
        """Whether ``trial`` is skipped as predicted dominated (recorded, with its prediction); an audited one is
        marked and runs (:mod:`tuner.search.dominance`); ``predictions``: the setting's (:meth:`_predictions`)."""
        from tuner.search.dominance import RepeatLimits, judge_proposal, latency_ceiling, latency_thresholds

        skip = self.spec.sampler.skip_dominated
        assert skip is not None
        verdict = judge_proposal(
            self.spec,
            predictions,
            self.snapshot.successful_reference,
            self.snapshot.front(),
            trial.number,
            skip.audit_share,
        )
        if verdict.audit:
            store.record_skip_audit(trial, verdict.audit_record())
        if not verdict.skip:
            front = self.snapshot.front()
            ceiling = latency_ceiling(self.spec, predictions, self.snapshot.successful_reference, front)
            self.limits[trial.number] = RepeatLimits(ceiling, latency_thresholds(self.spec, front))
            return False
        recorded = {name: p.record() for name, p in predictions.items()}
        self.recorder.unrun(trial, Outcome.SKIPPED_PREDICTED_DOMINATED, verdict.reason, {names.PREDICTION: recorded})
        return True


@dataclass
class TrialStarter:
    """Starts trials on one coordinator's free slots (see the module docstring); built once per run of its loop.

    ``slots``: how many slots the coordinator has; ``budget_trials``: the study's trial budget (None: none);
    ``stopping``: whether nothing new may start (an early stop, an interrupt or a cancel) for a loop state."""

    study: optuna.Study
    runner: Runner
    slots: int
    budget_trials: int | None
    listeners: Sequence[Listener]
    rules: StartRules
    placement: Placement
    recorder: TrialRecorder
    requests: TrialRequests
    shapes: ShapeReferences
    snapshot: StudySnapshot
    space: Mapping[str, BaseDistribution]  # what the wall budget's duration forecast reads
    stopping: Callable[[LoopState], bool]

    def refill(self, state: LoopState, view: SharedView, pool: ThreadPoolExecutor) -> None:
        """Start trials on the free slots while the budget, the other hosts and the study allow."""
        state.blocked = False
        while (
            state.free_slots
            and not state.exclusive
            and not self.stopping(state)
            and not state.scores_block(self.slots)
            and self.rules.may_start(state, view)
        ):
            remaining = state.remaining(self.budget_trials, view.measured, view.running_elsewhere)
            if self.rules.asks_over(state):
                remaining = state.order.waiting()  # nothing more to ask: those set aside run, oldest first
            if state.held is None:
                unparked = self.shapes.unpark(state.parked, self.snapshot)  # its shape's reference ran
                if unparked is not None:
                    state.held = self._keep(state, unparked, remaining)
                    if state.held is None:
                        continue  # set aside: that reference left other reload_on values loaded
            if state.held is None:
                state.held = state.order.next_aside(state.free_slots[0], remaining, state.waiting.keys())
            if state.held is None:
                if state.parked_count() >= self.slots and not self.snapshot.waiting():
                    break  # as many wait for their shape's reference as there are slots: no more proposals
                parked = state.parked_count()
                held = self.placement.propose(view, state)
                if held is None:
                    state.idle_proposals += int(state.parked_count() == parked)
                    continue
                state.held = self._keep(state, held, remaining)
                if state.held is None:
                    continue  # set aside until its reload_on values are loaded (.load_order): ask another
            if not self._start_held(state, view, pool):
                break
        if self.rules.owed_may_start(state, view, self.stopping(state)):
            self._start_owed(state, view, pool)
        if state.parked and not state.inflight and any(key in view.running_keys for key in state.parked):
            state.blocked = True  # a shape's reference runs on another host: wait for it

    def _start_owed(self, state: LoopState, view: SharedView, pool: ThreadPoolExecutor) -> None:
        """Ask the dead host's rerun that waits oldest and start it: its original held a place in the trial budget
        that the live hosts counted while filling it (``names.owed``). One ask a turn; the next look sees what is
        left. Another host may have taken the rerun meanwhile: a proposal that is not owed is given back."""
        state.blocked = True  # look again: another rerun may wait, or this one was copied
        held = self.placement.propose(view, state)
        if held is None:
            return
        if not names.owed(held[0]):
            self.recorder.give_back(held[0], held[1].params, held[2], "not started: the trial budget is spent")
            return
        state.held = held
        self._start_held(state, view, pool)

    def _keep(self, state: LoopState, held: Held, remaining: int | None) -> Held | None:
        """What starts now that ``held`` is at hand (:meth:`LoadOrder.keep`); ``held``, when it waits, records
        why (``tuner status`` shows it)."""
        starts = state.order.keep(held, state.free_slots[0], remaining)
        if starts is not held:
            trial, candidate, _ = held
            with self.recorder.holding(trial.number):
                store.record_waiting(trial, state.order.waiting_note(candidate))
        return starts

    def _start_held(self, state: LoopState, view: SharedView, pool: ThreadPoolExecutor) -> bool:
        """Start the held proposal on a free slot; False when it must wait (or the study must stop)."""
        assert state.held is not None
        trial, candidate, role = state.held
        if role in EXCLUSIVE_ROLES and (state.inflight or view.running_elsewhere):
            state.blocked = not state.inflight
            return False  # run it alone once the slots drain, here and elsewhere
        if role != names.REFERENCE and not self.rules.wall.admits(
            trial.number, candidate.params, self.snapshot.finished_log, self.space
        ):
            self.recorder.give_back(trial, candidate.params, role, f"not started: {self.rules.wall.refused}")
            state.held, state.stopped = None, self.rules.wall.refused or ""
            return False
        state.held = None
        state.idle_proposals = 0
        slot = state.take_slot(role)
        state.order.started(slot, candidate)
        comparison = self.shapes.comparison(trial.number, candidate, self.snapshot, names.attributes_of(self.study))
        request = self.requests.build(trial, candidate, role, comparison, self.placement.limits.pop(trial.number, None))
        problem = unwritable(Path(request.workdir))
        if problem is not None:
            self.recorder.give_back(trial, candidate.params, role, problem)
            state.failure = StudyStop(problem)
            state.untake_slot(slot)
            return False
        reference = self.snapshot.successful_reference
        compared = self.shapes.compared_with(comparison, trial.number, role, reference)
        if not self._assign(trial, slot, compared):
            state.untake_slot(slot)
            return True
        future = pool.submit(self.runner.run, request, slot)
        state.inflight[future] = InFlight(trial, candidate, slot, role, request)
        for listener in self.listeners:
            listener.on_trial_start(trial.number, role, slot.label, request.timeout_s)
        return True

    def _assign(self, trial: optuna.Trial, slot: Slot, compared_with: Mapping[str, Any] | None) -> bool:
        """Record the slot ``trial`` starts on (and what its quality is compared with, when the study has a
        reference per shape); False when the trial was taken over meanwhile."""
        assigned = False
        with self.recorder.holding(trial.number):
            store.record_slot(trial, slot.label, compared_with)
            assigned = True
        return assigned
