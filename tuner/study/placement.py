"""Where an asked trial goes: never run (a rule refuses it, or the memory model predicts an OOM), copied (its
setting is measured already, here or on another host), parked (its shape's reference is not measured yet), or
held to run on this host.

:class:`Placement` is the coordinator's one step from ``study.ask()`` to that answer; it records what it decides
(:class:`~tuner.study.trial_recording.TrialRecorder`) and claims the setting fleet-wide (:mod:`tuner.storage.coordination.claims`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome
from tuner.spec.space import resolve, suggest
from tuner.storage import attributes as names
from tuner.storage import store
from tuner.storage.coordination.claims import claim_setting
from tuner.storage.coordination.heartbeats import HOST, Heartbeats, worker_id
from tuner.study.coordinator_state import Held, LoopState
from tuner.study.shared import EXCLUSIVE_ROLES, SharedView

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.search.dominance import RepeatLimits
    from tuner.search.feasibility import FeasibilityModel
    from tuner.search.prediction import OutcomePredictor, Prediction
    from tuner.spec.models import StudySpec
    from tuner.study.shapes import ShapeReferences
    from tuner.study.snapshot import StudySnapshot
    from tuner.study.trial_recording import TrialRecorder


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
