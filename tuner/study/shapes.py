"""A reference per output shape, in the loop: which reference a trial is compared with, and when it runs.

With ``reference_shape.per`` in the spec (:mod:`tuner.spec.quality.reference_shape`) a trial is compared with the
reference setting at its own shape. The spec's reference covers its own shape (:mod:`.reference`, as
without ``per``). Another shape's reference is measured once, when a trial first needs it:

* a trial whose setting *is* the reference at its shape runs as that shape's reference: its output is
  saved (``reference_output_<key hash>.npz``), published like the reference's, and it is compared with
  itself;
* any other trial of a shape whose reference is not measured yet is **parked** (held, not run) and the
  shape's reference is queued with the role ``shape_reference`` -- unless it is already queued, running
  (here or on another host) or measured. A parked trial starts once its shape's reference has finished;
  if that reference did not run OK, the trial runs anyway and its quality metrics are unavailable with
  the reason (never a figure against another shape).

Every trial of such a study records ``compared_with``: the trial whose output it was compared with and
that trial's shape (``tuner show`` names it). At most as many trials are parked as the loop has slots.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome
from tuner.spec.quality.reference_shape import ShapeReference, reference_at, resized_comparison
from tuner.spec.space import resolve
from tuner.storage import attributes as names
from tuner.storage import store
from tuner.study.reference import ReferenceHandOff, ReferenceStore

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.spec.candidate import Candidate
    from tuner.spec.models import StudySpec
    from tuner.study.coordinator_state import Held
    from tuner.study.snapshot import StudySnapshot

SHAPE_REFERENCE = "shape_reference"  # the role of a shape's reference, queued when a trial first needs it


@dataclass(frozen=True)
class ShapeTarget:
    """The reference at a trial's shape (not the spec's own): its :class:`ShapeReference`, the candidate key of
    its setting (None when that setting breaks a rule: ``problem`` says which) and its settings."""

    reference: ShapeReference
    key: str | None
    settings: dict[str, Any]
    problem: str | None


@dataclass(frozen=True)
class Comparison:
    """How one trial's quality is measured: where its output is saved (a shape's reference), whether it is
    compared with itself, the reference output and settings it is compared with (or why there is none), and
    ``compared_with`` to record (None: the spec has no ``per``)."""

    save_output: str | None = None
    compare_with_self: bool = False
    reference_output: str | None = None
    reference_settings: dict[str, Any] | None = None
    reference_missing: str | None = None
    compared_with: dict[str, Any] | None = None
    resize_to_reference: bool = False


class ShapeReferences:
    """The shape references of one coordinator's study (see the module docstring)."""

    def __init__(self, study: optuna.Study, spec: StudySpec, study_dir: Path, store_: ReferenceStore) -> None:
        self.study = study
        self.spec = spec
        self.study_dir = study_dir
        self.store = store_
        self.per = bool(spec.reference_shape is not None and spec.reference_shape.per)
        self._handoffs: dict[str, ReferenceHandOff] = {}
        self._ended: dict[str, list[FrozenTrial]] = {}  # candidate key -> its finished trials (any outcome)
        self._indexed = 0  # how many of the snapshot's finished trials are in ``_ended``

    def target(self, params: Mapping[str, Any]) -> ShapeTarget | None:
        """The reference at the shape of ``params`` when it is not the spec's own reference; else None."""
        if not self.per:
            return None
        found = reference_at(self.spec, params)
        if found is None or found.default:
            return None
        candidate, problem = resolve(self.spec, found.params)
        if candidate is None:
            return ShapeTarget(found, None, dict(found.params), problem)
        return ShapeTarget(found, candidate.key, candidate.settings, None)

    def park(
        self,
        held: Held,
        parked: dict[str, list[Held]],
        snapshot: StudySnapshot,
        in_flight_here: set[str],
        running_elsewhere: frozenset[str],
    ) -> bool:
        """Whether ``held`` must wait for its shape's reference (then it is parked, and that reference queued
        unless it is queued, running or finished already)."""
        trial, candidate, role = held
        target = self.target(candidate.params)
        if target is None or target.key is None or target.key == candidate.key:
            return False
        if target.key in self._ended_keys(snapshot):
            return False
        parked.setdefault(target.key, []).append(held)
        if not (
            target.key in in_flight_here or target.key in running_elsewhere or target.key in self._queued(snapshot)
        ):
            store.enqueue(self.study, {k: target.reference.params[k] for k in self.spec.parameters}, SHAPE_REFERENCE)
            snapshot.refresh()  # the loop sees the queued reference (it asks for it next)
        return True

    def unpark(self, parked: dict[str, list[Held]], snapshot: StudySnapshot) -> Held | None:
        """A parked trial whose shape's reference has finished (taken out of ``parked``), or None."""
        ended = self._ended_keys(snapshot)
        for key in [k for k in parked if k in ended]:
            held = parked[key].pop(0)
            if not parked[key]:
                del parked[key]
            return held
        return None

    def comparison(
        self, trial_number: int, candidate: Candidate, snapshot: StudySnapshot, study_attrs: Mapping[str, Any]
    ) -> Comparison | None:
        """How trial ``trial_number`` (``candidate``) is compared; None: as without ``per``."""
        if not self.per:
            return None
        target = self.target(candidate.params)
        if target is None:
            own = reference_at(self.spec, candidate.params)
            assert own is not None
            return Comparison(
                compared_with={"trial": "reference", "shape": own.shape},
                resize_to_reference=resized_comparison(self.spec, candidate.params, own.params),
            )
        shape = target.reference.shape
        resize = resized_comparison(self.spec, candidate.params, target.reference.params)
        if target.key is None:
            return Comparison(
                reference_settings=target.settings,
                compared_with={"trial": None, "shape": shape},
                reference_missing=f"no reference at {target.reference.label}: the reference setting "
                f"at this shape is not runnable ({target.problem})",
                resize_to_reference=resize,
            )
        if target.key == candidate.key:
            return Comparison(
                save_output=str(self.output_path(target.key)),
                compare_with_self=True,
                reference_settings=target.settings,
                compared_with={"trial": trial_number, "shape": shape},
            )
        self._ended_keys(snapshot)
        fetched = self._fetched(target, self._ended.get(target.key, []), study_attrs)
        return replace(fetched, resize_to_reference=resize)

    def compared_with(
        self, comparison: Comparison | None, number: int, role: str, reference: FrozenTrial | None
    ) -> dict[str, Any] | None:
        """``compared_with`` to record on trial ``number`` (``role``): the trial whose output its quality is
        compared with and that trial's shape; ``reference``: the spec's reference, when it ran OK."""
        if comparison is None or comparison.compared_with is None:
            return None
        found = dict(comparison.compared_with)
        if found.get("trial") == "reference":  # the spec's own reference, at its own shape
            found["trial"] = number if role == names.REFERENCE else (reference.number if reference else None)
        return found

    def output_path(self, key: str) -> Path:
        """Where a shape's reference output is kept on this host."""
        return self.study_dir / f"reference_output_{hashlib.sha256(key.encode()).hexdigest()[:12]}.npz"

    def _fetched(
        self, target: ShapeTarget, finished: Sequence[FrozenTrial], study_attrs: Mapping[str, Any]
    ) -> Comparison:
        """The comparison with a measured shape reference: a verified local copy of its output, or why none."""
        assert target.key is not None
        ran = [t for t in finished if names.candidate_key_of(t) == target.key and names.is_measured(t)]
        label = target.reference.label
        handoff = self._handoffs.setdefault(target.key, ReferenceHandOff(self.store, self.output_path(target.key)))
        path = handoff.output(ran, study_attrs)
        by = ran[0].number if ran else None
        if path is not None:
            by = next((t.number for t in ran if names.attributes_of(t).get(names.REFERENCE_OUTPUT)), by)
            return Comparison(
                reference_output=path,
                reference_settings=target.settings,
                compared_with={"trial": by, "shape": target.reference.shape},
            )
        if not ran:
            why = f"no reference at {label}: it did not run"
        elif handoff.reason:
            why = f"no reference at {label} (trial {by}): {handoff.reason}"
        else:
            why = f"no reference at {label}: trial {by} ended {names.outcome_of(ran[0])}"
        return Comparison(
            reference_settings=target.settings,
            reference_missing=why,
            compared_with={"trial": by, "shape": target.reference.shape},
        )

    def _ended_keys(self, snapshot: StudySnapshot) -> dict[str, list[FrozenTrial]]:
        """Finished trials by candidate key (any outcome, never-run ones too -- a setting the rules refuse or the
        memory model says cannot fit never will), indexed as they arrive. Not a search proposal skipped because
        the front beats it: that setting can still run, and as a shape's reference it must (found 2026-12-07:
        after one, every later trial of that shape was compared with no reference)."""
        for trial in snapshot.finished_log[self._indexed :]:
            key = names.candidate_key_of(trial)
            if key is not None and names.outcome_of(trial) != Outcome.SKIPPED_PREDICTED_DOMINATED.value:
                self._ended.setdefault(key, []).append(trial)
        self._indexed = len(snapshot.finished_log)
        return self._ended

    def _queued(self, snapshot: StudySnapshot) -> set[str]:
        """Candidate keys of the settings waiting in the study's queue or asked but not finished."""
        from optuna.trial import TrialState

        keys: set[str] = set()
        for trial in snapshot.unfinished:
            key = names.candidate_key_of(trial)
            if key is None and trial.state == TrialState.WAITING:
                candidate, _ = resolve(self.spec, trial.params or names.enqueued_params(trial) or {})
                key = candidate.key if candidate is not None else None
            if key is not None:
                keys.add(key)
        return keys
