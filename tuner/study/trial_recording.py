"""How a coordinator tells a trial it holds: measured, a copy, never run, or given back.

:func:`tell_measured` records a result the runner returned, judged into a
:class:`~tuner.search.objectives.Verdict` (values and graded constraints, or FAIL).
:func:`tell_copy` and :func:`tell_unrun` record trials that ran nothing: a copy of a
measured setting, a setting a rule refuses (INVALID) or one the memory model skips
(SKIPPED_PREDICTED_OOM). :func:`give_back` records a trial that did not run to the end
as INTERRUPTED and queues its setting again. Only ``measured`` trials count against the budget.

:class:`TrialRecorder` is how a coordinator uses them: it judges results, tells its listeners each
trial recorded, and drops (one line to the listeners) a write to a trial another coordinator took
over as stale meanwhile (:data:`~tuner.storage.coordination.heartbeats.TAKEN_OVER`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome, TrialResult
from tuner.search.objectives import ConstraintPlan, judge, wall
from tuner.storage import attributes as names
from tuner.storage import store
from tuner.storage.coordination.heartbeats import TAKEN_OVER, taken_over
from tuner.study.listeners import Listener
from tuner.study.reference import ReferenceHandOff
from tuner.study.snapshot import StudySnapshot

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.search.objectives import Verdict
    from tuner.spec.models import StudySpec


def measured_count(study: optuna.Study) -> int:
    """Trials of ``study`` that ran a workload (every host): what the budget counts."""
    return sum(1 for t in study.get_trials(deepcopy=False) if names.is_measured(t))


@dataclass
class TrialRecorder:
    """Tells the trials one coordinator holds (see the module docstring); ``started`` (``time.monotonic()``)
    is when its run began, for the listeners' clocks."""

    study: optuna.Study
    spec: StudySpec
    plan: ConstraintPlan
    handoff: ReferenceHandOff  # the reference's output, shared between hosts
    listeners: Sequence[Listener]
    budget_trials: int | None
    started: float = field(default_factory=time.monotonic)
    snapshot: StudySnapshot | None = None  # the coordinator's (kept current by its loop); None: the recorder's own

    def __post_init__(self) -> None:
        self._own_snapshot = self.snapshot is None
        self._snapshot = self.snapshot or StudySnapshot(self.study, [o.direction for o in self.spec.objectives])

    def _known(self) -> StudySnapshot:
        """The study's trials as known here: the coordinator's snapshot as of its last turn (plus the trials this
        recorder told since), or — the recorder's own — read now."""
        if self._own_snapshot:
            self._snapshot.refresh()
        return self._snapshot

    @contextlib.contextmanager
    def holding(self, number: int) -> Iterator[None]:
        """Write to trial ``number`` inside; when another coordinator took it over as stale meanwhile, the
        error ends the block quietly and the listeners hear it once (the caller's result stays unset)."""
        try:
            yield
        except Exception as error:  # noqa: BLE001 - only a taken-over trial is handled here
            if not taken_over(error):
                raise
            for listener in self.listeners:
                listener.on_trial_dropped(number, TAKEN_OVER)

    def measured(self, trial: optuna.Trial, role: str, slot: str, result: TrialResult) -> FrozenTrial | None:
        """Judge and tell ``result``; None (dropped) when the trial was taken over. The reference's output
        is published to the other hosts first (:class:`~tuner.study.reference.ReferenceHandOff`)."""
        frozen = None
        with self.holding(trial.number):
            verdict = judge(self.spec, self.plan, result, self._measured_values())
            hands_over = bool(
                result.output_path
            )  # a reference's output (the spec's, or a shape's): later trials need it
            frozen = tell_measured(
                self.study,
                trial,
                slot,
                result,
                verdict,
                reference_output=result.output_path if hands_over else None,
                published=self._publish(trial, result) if hands_over else None,
                fingerprint_note=None if hands_over else self.handoff.note or None,
            )
            self._snapshot.add_finished(frozen)
        return frozen

    def unrun(self, trial: optuna.Trial, outcome: Outcome, reason: str | None, attributes: Mapping[str, Any]) -> None:
        """Record a trial that is never run (INVALID, SKIPPED_PREDICTED_OOM) as a wall for the sampler."""
        refused = wall(self.spec, self.plan, self._measured_values(), reason)
        frozen = tell_unrun(self.study, trial, outcome, reason, refused, attributes)
        self._snapshot.add_finished(frozen)
        self.notify(frozen)

    def copy(self, trial: optuna.Trial, original: FrozenTrial) -> None:
        """Record ``trial`` as a copy of ``original`` (unless taken over)."""
        frozen = None
        with self.holding(trial.number):
            frozen = tell_copy(self.study, trial, original)
        if frozen is not None:
            self._snapshot.add_finished(frozen)
            self.notify(frozen)

    def give_back(
        self, trial: optuna.Trial, params: Any, role: str, reason: str, cost: Mapping[str, Any] | None = None
    ) -> None:
        """Record ``trial`` INTERRUPTED for ``reason`` (with its run's ``cost`` when it ran) and queue its
        setting again (unless taken over)."""
        with self.holding(trial.number):
            give_back(self.study, trial, params, role, reason, cost)

    def _publish(self, trial: optuna.Trial, result: TrialResult) -> dict[str, Any]:
        """The reference's output, when it ran OK, made reachable by the other hosts (hash-checked): the
        attributes recording where (empty when it failed)."""
        if result.outcome is not Outcome.OK or not result.output_path:
            return {}
        return self.handoff.publish(self.study.study_name, trial.number, Path(result.output_path))

    def _measured_values(self) -> list[list[float]]:
        """The values of the study's OK, real measurements (what a placeholder must be worse than)."""
        return self._known().measured_values

    def notify(self, frozen: FrozenTrial) -> None:
        """Tell the listeners ``frozen`` was recorded (measured so far, the budget, the front's size: as known,
        see :meth:`_known`)."""
        if not self.listeners:
            return
        known = self._known()
        known.add_finished(frozen)
        done, front_size = known.measured, len(known.front())
        for listener in self.listeners:
            listener.on_trial(frozen, done, self.budget_trials, front_size, time.monotonic() - self.started)


def tell_measured(
    study: optuna.Study,
    trial: optuna.Trial,
    slot: str,
    result: TrialResult,
    verdict: Verdict,
    *,
    reference_output: str | None = None,
    published: Mapping[str, Any] | None = None,
    fingerprint_note: str | None = None,
) -> FrozenTrial:
    """Tell ``trial``, run on ``slot``, with ``result`` judged as ``verdict``; ``measured`` true (it costs
    budget). The reference records its ``reference_output`` path and what its hand-off ``published``;
    another trial the ``fingerprint_note`` (how this host differs from the reference's), when given. A
    verdict without values is told FAIL; a verdict's reason on an OK run (an objective or a constraint
    not evaluated) is joined to the result's."""
    from optuna.trial import TrialState

    joined = (
        "; ".join(filter(None, [verdict.reason, result.reason]))
        if verdict.reason and result.outcome is Outcome.OK
        else None
    )
    store.record_result(
        trial,
        result,
        slot,
        verdict.placeholder,
        reference_output=reference_output,
        published=published,
        fingerprint_note=fingerprint_note,
        unavailable_constraints=verdict.unavailable_constraints,
        reason=joined,
        constraints=verdict.constraints if verdict.values is not None else None,
    )
    if verdict.values is None:
        return study.tell(trial, state=TrialState.FAIL)
    return study.tell(trial, verdict.values)


def tell_copy(study: optuna.Study, trial: optuna.Trial, original: FrozenTrial) -> FrozenTrial:
    """Tell ``trial`` as a copy of ``original`` (same setting, measured before): its outcome, reason,
    metrics, values and constraints, ``duplicate_of`` set and ``measured`` false (it costs no budget)."""
    from optuna.trial import TrialState

    store.record_copy(trial, original)  # with the original's constraints
    if original.values is None:
        return study.tell(trial, state=TrialState.FAIL)
    return study.tell(trial, list(original.values))


def tell_unrun(
    study: optuna.Study,
    trial: optuna.Trial,
    outcome: Outcome,
    reason: str | None,
    refused: Verdict,
    attributes: Mapping[str, Any] | None = None,
) -> FrozenTrial:
    """Tell ``trial``, which is never run, as the infeasible point ``refused`` (placeholder values worse than
    anything measured, ``outcome`` constraint 1: the sampler learns the wall, as from an OOM); ``measured``
    false (it costs no budget), ``outcome`` and ``reason`` set, ``attributes`` added."""
    store.record_unrun(trial, outcome.value, reason, attributes, constraints=refused.constraints)
    return study.tell(trial, refused.values)


def give_back(
    study: optuna.Study, trial: optuna.Trial, params: Any, role: str, reason: str, cost: Mapping[str, Any] | None = None
) -> None:
    """Record a trial that did not run to the end as INTERRUPTED (not measured; ``cost``: the device time its
    run held, when it ran) and queue it again."""
    from optuna.trial import TrialState

    store.record_interrupted(trial, reason, cost)
    study.tell(trial, state=TrialState.FAIL)
    store.enqueue(study, params, role, trial.number, owed=names.owed(trial))  # a dead host's rerun stays owed
