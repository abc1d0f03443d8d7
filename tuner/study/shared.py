"""What a coordinator must know of a study other coordinators also run, and the queue it keeps.

:class:`SharedView` is read from one snapshot of the study's trials each turn of
the coordinator's loop: how many trials are measured (all hosts), how many run
elsewhere (they hold budget), whether the reference or the baseline runs
elsewhere (both run alone, so nothing else starts), whether the reference has
failed for good, and the candidate keys measured or in flight anywhere (a
setting is never run twice: a later proposal of it is a copy).

:func:`enqueue_again`, :func:`queue_reference` and :func:`give_back` keep the
study's queue of waiting settings (roles and ``rerun_of`` kept). :func:`tell_copy` and
:func:`tell_unrun` record trials that ran nothing: a copy of a measured setting, a
setting a rule refuses (INVALID) or one the memory model skips (SKIPPED_PREDICTED_OOM).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from tuner.study.guards import successful_reference

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.results import Outcome
    from tuner.spec.models import StudySpec
    from tuner.study.objectives import Verdict

EXCLUSIVE_ROLES = ("reference", "baseline")  # run alone: their latencies anchor every comparison


@dataclass(frozen=True)
class SharedView:
    """One snapshot of a study shared by coordinators; ``mine`` are this coordinator's trial ids."""

    measured: int
    running_elsewhere: int
    exclusive_elsewhere: bool
    reference_pending_elsewhere: bool
    failed_reference: "FrozenTrial | None"
    measured_by_key: dict[str, "FrozenTrial"] = field(default_factory=dict)  # measured with values
    finished_by_key: dict[str, "FrozenTrial"] = field(default_factory=dict)  # measured, values or not
    running_keys: frozenset[str] = frozenset()

    @staticmethod
    def of(trials: Sequence["FrozenTrial"], mine: set[int], spec: "StudySpec") -> "SharedView":
        from optuna.trial import TrialState

        running = [t for t in trials if t.state == TrialState.RUNNING and t._trial_id not in mine]
        done = [t for t in trials if t.state.is_finished() and t.user_attrs.get("measured")]  # told, not telling
        references = [t for t in trials if t.user_attrs.get("role") == "reference"]
        has_reference = spec.reference is not None and successful_reference(trials) is None
        pending = [t for t in references if t.state in (TrialState.WAITING, TrialState.RUNNING)]
        finished = [t for t in references if t.state.is_finished() and t.user_attrs.get("measured")]
        return SharedView(
            measured=len(done),
            running_elsewhere=len(running),
            exclusive_elsewhere=any(t.user_attrs.get("role") in EXCLUSIVE_ROLES for t in running),
            reference_pending_elsewhere=has_reference and any(t.state == TrialState.RUNNING and t._trial_id
                                                              not in mine for t in pending),
            failed_reference=finished[-1] if has_reference and finished and not pending else None,
            measured_by_key={t.user_attrs["candidate_key"]: t for t in done
                             if t.values is not None and "candidate_key" in t.user_attrs},
            finished_by_key={t.user_attrs["candidate_key"]: t for t in done if "candidate_key" in t.user_attrs},
            running_keys=frozenset(str(t.user_attrs["candidate_key"]) for t in running
                                   if "candidate_key" in t.user_attrs))


def enqueue_again(study: "optuna.Study", params: Any, role: str, rerun_of: int | None) -> None:
    """Queue a setting that did not run to the end, keeping its role and the trial it re-runs."""
    attrs: dict[str, Any] = {"role": role} | ({"rerun_of": rerun_of} if rerun_of is not None else {})
    study.enqueue_trial(dict(params), user_attrs=attrs)


def give_back(study: "optuna.Study", trial: "optuna.Trial", params: Any, role: str, reason: str) -> None:
    """Record a trial that did not run to the end as INTERRUPTED (not measured) and queue it again."""
    from optuna.trial import TrialState

    trial.set_user_attr("outcome", "INTERRUPTED")
    trial.set_user_attr("reason", reason)
    trial.set_user_attr("measured", False)
    study.tell(trial, state=TrialState.FAIL)
    enqueue_again(study, params, role, trial.number)


def queue_reference(study: "optuna.Study", spec: "StudySpec") -> None:
    """On a resume after a failed reference: queue the reference again, ahead of every waiting trial.

    Optuna runs waiting trials oldest first, so trials already waiting (the
    baseline) are recorded as re-queued and enqueued again behind it. Nothing is
    done while a reference waits or runs (another coordinator may be running it).
    """
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    if spec.reference is None or successful_reference(trials) is not None:
        return
    if any(t.user_attrs.get("role") == "reference" and t.state in (TrialState.WAITING, TrialState.RUNNING)
           for t in trials):
        return
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    storage = study._storage
    for trial in waiting:
        storage.set_trial_user_attr(trial._trial_id, "outcome", "INTERRUPTED")
        storage.set_trial_user_attr(trial._trial_id, "reason", "re-queued behind the reference's new run")
        storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    study.enqueue_trial(dict(spec.reference), user_attrs={"role": "reference"})
    for trial in waiting:
        enqueue_again(study, trial.params or trial.system_attrs.get("fixed_params", {}),
                      trial.user_attrs.get("role", "search"), trial.user_attrs.get("rerun_of"))


Twin = tuple["optuna.Trial", Any]  # a proposal set aside: (the asked trial, its Candidate)


def settle_copies(waiting: dict[str, list[Twin]], view: SharedView, here: set[str],
                  copy: Callable[["optuna.Trial", Any, "FrozenTrial"], None],
                  drop: Callable[["optuna.Trial", Any, str], None]) -> None:
    """Settle set-aside duplicates of settings run elsewhere: ``copy`` those now measured, ``drop`` (give
    back) those whose original finished without a result; keys in ``here`` (in flight on this
    coordinator) are settled when their own trial ends."""
    for key in [k for k in waiting if k not in here]:
        original = view.finished_by_key.get(key)
        if original is not None:
            for twin, candidate in waiting.pop(key):
                copy(twin, candidate, original)
        elif key not in view.running_keys:
            for twin, candidate in waiting.pop(key):
                drop(twin, candidate, "the run it repeated on another host did not finish")


def held_ids(inflight: dict[Any, Any], waiting: dict[str, list[Twin]], held: tuple[Any, ...] | None) -> set[int]:
    """Storage ids of the RUNNING trials a coordinator holds: in flight (values with a ``trial``), set
    aside, or held back."""
    ids = {job.trial._trial_id for job in inflight.values()}
    ids |= {trial._trial_id for twins in waiting.values() for trial, _ in twins}
    return ids | ({held[0]._trial_id} if held is not None else set())


def tell_copy(study: "optuna.Study", trial: "optuna.Trial", original: "FrozenTrial") -> "FrozenTrial":
    """Tell ``trial`` as a copy of ``original`` (same setting, measured before): its outcome, reason,
    metrics, values and constraints, ``duplicate_of`` set and ``measured`` false (it costs no budget)."""
    from optuna.trial import TrialState

    trial.set_user_attr("duplicate_of", original.number)
    trial.set_user_attr("measured", False)
    for key in ("outcome", "reason", "metrics", "placeholder_values"):
        if key in original.user_attrs:
            trial.set_user_attr(key, original.user_attrs[key])
    if original.values is None:
        return study.tell(trial, state=TrialState.FAIL)
    for key, value in original.constraints.items():
        trial.set_constraint(key, value)
    return study.tell(trial, list(original.values))


def tell_unrun(study: "optuna.Study", trial: "optuna.Trial", outcome: "Outcome", reason: str | None,
               refused: "Verdict", attributes: Mapping[str, Any] | None = None) -> "FrozenTrial":
    """Tell ``trial``, which is never run, as the infeasible point ``refused`` (placeholder values worse than
    anything measured, ``outcome`` constraint 1: the sampler learns the wall, as from an OOM); ``measured``
    false (it costs no budget), ``outcome`` and ``reason`` set, ``attributes`` added."""
    trial.set_user_attr("outcome", outcome.value)
    trial.set_user_attr("reason", reason)
    trial.set_user_attr("measured", False)
    trial.set_user_attr("placeholder_values", True)
    for key, value in (attributes or {}).items():
        trial.set_user_attr(key, value)
    for key, value in refused.constraints.items():
        trial.set_constraint(key, value)
    return study.tell(trial, refused.values)
