"""What a coordinator must know of a study other coordinators also run, and the queue it keeps.

:class:`SharedView` is read from the coordinator's :class:`~tuner.study.snapshot.StudySnapshot`
each turn of its loop (no storage access of its own): how many trials are measured (all hosts), how many run
elsewhere (they hold budget), whether the reference or the baseline runs
elsewhere (both run alone, so nothing else starts), whether the reference has
failed for good, and the candidate keys measured or in flight anywhere (a
setting is never run twice: a later proposal of it is a copy).

:func:`queue_reference` puts a failed reference back at the head of the study's queue
(the settings queued behind it keep their roles and ``rerun_of``). :func:`settle_copies` says what becomes of the
proposals a coordinator set aside because their setting runs on another host.
How a trial is told is in :mod:`.trial_recording`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from tuner.search.guards import successful_reference
from tuner.storage import attributes as names
from tuner.storage import store
from tuner.study.snapshot import StudySnapshot

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.spec.models import StudySpec

EXCLUSIVE_ROLES = (names.REFERENCE, names.BASELINE)  # run alone: their latencies anchor every comparison


@dataclass(frozen=True)
class SharedView:
    """One snapshot of a study shared by coordinators; ``mine`` are this coordinator's trial ids."""

    measured: int
    running_elsewhere: int
    exclusive_elsewhere: bool
    reference_pending_elsewhere: bool
    failed_reference: FrozenTrial | None
    measured_by_key: dict[str, FrozenTrial] = field(default_factory=dict)  # measured with values
    finished_by_key: dict[str, FrozenTrial] = field(default_factory=dict)  # measured, values or not
    running_keys: frozenset[str] = frozenset()
    spent_device_s: float = 0.0  # device-seconds the study's runs held (every host; tuner.storage.cost)
    median_run_device_s: float | None = None  # a run's median device-seconds (None: no run recorded yet)
    owed_next: bool = False  # the oldest waiting trial is a dead host's rerun (``names.owed``): the next ask gets it

    @staticmethod
    def of(trials: Sequence[FrozenTrial], mine: set[int], spec: StudySpec) -> SharedView:
        """The view of ``trials`` (a whole study's, read now): a one-off snapshot of them."""
        snapshot = StudySnapshot.of_trials(trials)
        return SharedView.from_snapshot(snapshot, mine, spec)

    @staticmethod
    def from_snapshot(snapshot: StudySnapshot, mine: set[int], spec: StudySpec) -> SharedView:
        """The view of the study as ``snapshot`` last read it: O(unfinished trials) work, no storage access
        (the finished trials' facts are the snapshot's, kept as they arrive). The key maps are the snapshot's
        own (not copied): they only ever gain trials."""
        from optuna.trial import TrialState

        running = [t for t in snapshot.unfinished if t.state == TrialState.RUNNING and store.trial_id(t) not in mine]
        pending = [t for t in snapshot.unfinished if names.role_of(t) == names.REFERENCE]  # WAITING or RUNNING
        finished = [t for t in snapshot.references if names.is_measured(t)]
        has_reference = spec.reference is not None and snapshot.successful_reference is None
        oldest_waiting = next((t for t in snapshot.unfinished if t.state == TrialState.WAITING), None)  # by number
        return SharedView(
            measured=snapshot.measured,
            running_elsewhere=len(running),
            exclusive_elsewhere=any(names.role_of(t) in EXCLUSIVE_ROLES for t in running),
            reference_pending_elsewhere=has_reference
            and any(t.state == TrialState.RUNNING and store.trial_id(t) not in mine for t in pending),
            failed_reference=finished[-1] if has_reference and finished and not pending else None,
            measured_by_key=snapshot.measured_by_key,
            finished_by_key=snapshot.finished_by_key,
            running_keys=frozenset(key for t in running if (key := names.candidate_key_of(t)) is not None),
            spent_device_s=snapshot.spent_device_s,
            median_run_device_s=snapshot.median_run_device_s,
            owed_next=oldest_waiting is not None and names.owed(oldest_waiting),
        )


def queue_reference(study: optuna.Study, spec: StudySpec) -> None:
    """On a resume after a failed reference: queue the reference again, ahead of every waiting trial.

    Optuna runs waiting trials oldest first, so trials already waiting (the
    baseline) are recorded as re-queued and enqueued again behind it. Nothing is
    done while a reference waits or runs (another coordinator may be running it).
    """
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    if spec.reference is None or successful_reference(trials) is not None:
        return
    if any(names.role_of(t) == names.REFERENCE and t.state in (TrialState.WAITING, TrialState.RUNNING) for t in trials):
        return
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    for trial in waiting:
        store.fail_waiting(study, trial, "re-queued behind the reference's new run")
    store.enqueue(study, spec.reference, names.REFERENCE)
    for trial in waiting:
        store.enqueue(
            study,
            trial.params or names.enqueued_params(trial) or {},
            names.role_of(trial),
            names.rerun_of(trial),
            owed=names.owed(trial),
        )


Twin = tuple["optuna.Trial", Any]  # a proposal set aside: (the asked trial, its Candidate)

ORIGINAL_LOST = "the run it repeated on another host did not finish"
"""Why a set-aside proposal is given back (:func:`settle_copies`'s ``drops``)."""


class Settled(NamedTuple):
    """What to do with set-aside proposals whose original settled elsewhere (:func:`settle_copies`)."""

    copies: list[tuple[optuna.Trial, Any, FrozenTrial]]  # (twin, candidate, original): tell as a copy
    drops: list[Twin]  # the original finished without a result: give back (:data:`ORIGINAL_LOST`)


def settle_copies(waiting: dict[str, list[Twin]], view: SharedView, here: set[str]) -> Settled:
    """Take out of ``waiting`` the set-aside duplicates of settings run elsewhere that are settled, and say
    what to do with them: copy those now measured, drop (give back) those whose original finished without
    a result. Keys in ``here`` (in flight on this coordinator) are settled when their own trial ends."""
    settled = Settled([], [])
    for key in [k for k in waiting if k not in here]:
        original = view.finished_by_key.get(key)
        if original is not None:
            settled.copies.extend((twin, candidate, original) for twin, candidate in waiting.pop(key))
        elif key not in view.running_keys:
            settled.drops.extend(waiting.pop(key))
    return settled
