"""A read-only *view* of a study for optuna-dashboard, derived from the storage.

optuna-dashboard 0.21 computes a study's best trials as the Pareto front of every
COMPLETE trial by values alone: it ignores constraints and cannot tell a measurement
from an OOM placeholder or a copy. The real study must keep those COMPLETE (samplers
learn the walls from them), so the dashboard is pointed at a mirror instead: a study
of the same name, directions and metric names in a separate Optuna storage
(default ``sqlite:///<home>/dashboard.db``, :func:`default_view_url`), holding every
trial of the real study under the same number, mapped so that the dashboard's best
trials are exactly ``tuner front`` (:func:`tuner.pareto.front_trials`):

=====================================================  =========  =====================
real trial                                             view       values
=====================================================  =========  =====================
COMPLETE, measured, every constraint <= 0, no copy     COMPLETE   the values
COMPLETE, measured, a constraint > 0                   PRUNED     user attr ``values``
a copy (``duplicate_of``) of a measured trial          PRUNED     user attr ``values``
placeholder (OOM, TIMEOUT, INVALID, SKIPPED_...)       FAIL       none (not measured)
FAIL (CRASH, INTERRUPTED, objective unavailable)       FAIL       none
WAITING / RUNNING                                      the same   none yet
=====================================================  =========  =====================

A copy of a placeholder is FAIL (no measurement beats being a copy). Every view trial
keeps the real params and distributions, the real ``datetime_start`` /
``datetime_complete`` (see *refresh* below), the legacy constraint list (system
attribute ``constraints``, values in sorted key order, labelled by the view study's
``constraint_order`` user attribute; only that form, so the view's
``FrozenTrial.constraints`` is the list) and these user attributes: ``tuner_state`` (the
real state), ``role``, ``outcome`` and ``reason`` (every trial), ``copy_of`` (copies),
``values`` (PRUNED: objective name -> value), each available metric's value under its
own name (e.g. ``latency_p50_s``: numbers, so the dashboard can sort by them), and
``slot``, ``host``, ``wall_time_s``, ``warm_start_from``, ``predicted_peak_gb``,
``prediction_witness`` when set. The view study's user attributes: ``view_of`` (the
real storage, redacted), ``source_study_id``, ``front`` (``tuner front``'s trial
numbers), ``refreshed_at`` (UTC, ISO 8601) and the provenance ``spec_name``,
``device``, ``gpu_type``, ``sampler``, ``budget_trials``.

Refresh (:func:`refresh_view`). ``rebuild=True`` deletes the view study and adds every
trial again in one batch (``study.add_trials``): exact times, a new study id. Otherwise
the view is brought up to date in place, so an open dashboard page keeps working: trials
it lacks are added in one batch, and trials it holds unfinished (WAITING / RUNNING) that
have moved on are updated through the storage (params, attributes, state). Such a trial's
``datetime_start`` / ``datetime_complete`` are then the refresh's time (Optuna's storage
sets them), not the real ones: at most one refresh interval off, until the next rebuild.
A view that no longer matches (another study under that name, more trials than the real
study, a finished trial that differs, other directions or metric names) is rebuilt.
Refreshes of one view storage on one host take turns (a file lock, :func:`_refresh_lock`),
so two processes refreshing at once never add a trial twice.
Edits made in the dashboard (notes, tells) are lost at the next rebuild: the view is
derived, never a source.
"""

from __future__ import annotations

import datetime
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import StudyError
from tuner.pareto import front_trials, is_measured_feasible, named_constraints
from tuner.search.objectives import constraint_order
from tuner.secrets import redact_url
from tuner.storage import attributes as names
from tuner.storage.attributes import attributes_of
from tuner.storage.opening import open_storage
from tuner.storage.records import StudyRecord
from tuner.storage.store import (
    delete_study,
    new_frozen_trial,
    set_study_attribute,
    stored_differently,
    study_id,
    update_unfinished,
)

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

VIEW_FILE = "dashboard.db"
KEPT_ATTRS = (
    names.SLOT,
    names.HOST,
    names.WALL_TIME_S,
    names.WARM_START_FROM,
    names.PREDICTED_PEAK_GB,
    names.PREDICTION_WITNESS,
)
PROVENANCE_ATTRS = (names.SPEC_NAME, names.DEVICE, names.GPU_TYPE, names.SAMPLER, names.BUDGET_TRIALS)


def default_view_url(home: Path) -> str:
    """Where views are written by default: ``sqlite:///<home>/dashboard.db`` (never the study's own file)."""
    return f"sqlite:///{(home / VIEW_FILE).absolute()}"


@dataclass(frozen=True)
class ViewReport:
    """What one refresh wrote: the view study's id (optuna-dashboard's URLs use it), trial counts by
    view state, the front, and whether the view was rebuilt (a new id) rather than updated."""

    study_name: str
    study_id: int
    trials: int
    complete: int
    pruned: int
    failed: int
    unfinished: int
    front: tuple[int, ...]
    rebuilt: bool
    added: int
    updated: int


def metric_names_of(study: optuna.Study) -> list[str] | None:
    """The study's metric names, else the ``objectives`` user attribute tuner stores at creation."""
    found = study.metric_names or list(StudyRecord.of(study).objectives)
    return list(found) if found and len(found) == len(study.directions) else None


def view_trial(trial: FrozenTrial, objective_names: Sequence[str]) -> FrozenTrial:
    """The view of one real trial (the mapping in the module docstring); the trial number is assigned
    by the view's storage, in order."""
    from optuna.trial import TrialState

    attrs = attributes_of(trial)
    constraints = named_constraints(trial)
    kept: dict[str, Any] = {
        names.VIEW_STATE: trial.state.name,
        names.ROLE: names.role_of(trial),
        names.OUTCOME: names.outcome_of(trial),
        names.REASON: attrs.get(names.REASON),
    }
    kept.update({key: attrs[key] for key in KEPT_ATTRS if attrs.get(key) is not None})
    for name, metric in names.metrics_of(trial).items():
        if isinstance(metric, dict) and isinstance(metric.get("value"), (int, float)):
            kept[name] = metric["value"]
    if names.duplicate_of(trial) is not None:
        kept[names.VIEW_COPY_OF] = names.duplicate_of(trial)
    values = None
    state = trial.state
    if state == TrialState.COMPLETE:
        if names.is_placeholder(trial) or trial.values is None:
            state = TrialState.FAIL
        elif is_measured_feasible(trial):
            values = list(trial.values)
        else:
            state = TrialState.PRUNED
            kept[names.VIEW_VALUES] = dict(zip(objective_names, trial.values))
    legacy = [constraints[key] for key in constraint_order(constraints)] if constraints else None
    mirrored = new_frozen_trial(state, values, trial.params, trial.distributions, kept, legacy)
    if state != TrialState.WAITING:  # create_trial stamps "now": the real times instead
        mirrored.datetime_start = trial.datetime_start or mirrored.datetime_start
    if state.is_finished():
        mirrored.datetime_complete = trial.datetime_complete or mirrored.datetime_complete
    return mirrored


def refresh_view(source_url: str, study_name: str, view_url: str, rebuild: bool = False) -> ViewReport:
    """Bring the view of ``study_name`` (in the storage at ``source_url``) up to date in the storage at
    ``view_url``; rebuild it when asked or when it no longer matches (module docstring).

    Reads the real study without writing it (its SQLite file must exist: ``StudyError`` otherwise, or
    when the study is not there, or ``view_url`` is the real storage itself); creates the view storage.
    """
    import optuna

    if view_url == source_url:
        raise StudyError(
            "the dashboard view must live in its own storage, not in the study's "
            f"({redact_url(view_url)}): give another view storage"
        )
    source_storage = open_storage(source_url, create=False, read_only=True)
    if study_name not in {s.study_name for s in source_storage.get_all_studies()}:
        raise StudyError(f"no study '{study_name}' in {redact_url(source_url)}")
    source = optuna.load_study(study_name=study_name, storage=source_storage)
    with _refresh_lock(view_url):  # another process refreshing the same view would add the same trials
        return _refresh_locked(source, study_name, view_url, redact_url(source_url), rebuild)


def _refresh_locked(
    source: optuna.Study, study_name: str, view_url: str, shown_source: str, rebuild: bool
) -> ViewReport:
    trials = source.get_trials(deepcopy=False)
    metric_names = metric_names_of(source)
    wanted = [view_trial(t, metric_names or [f"objective_{i}" for i in range(len(source.directions))]) for t in trials]
    storage = open_storage(view_url)
    view = _matching_view(storage, source, metric_names, wanted, shown_source) if not rebuild else None
    added = updated = 0
    if view is None:
        view = _new_view(storage, source, metric_names, shown_source)
        view.add_trials(wanted)
        added, rebuilt = len(wanted), True
    else:
        held = view.get_trials(deepcopy=False)
        for mirror, desired in zip(held, wanted):
            if not mirror.state.is_finished() and stored_differently(mirror, desired):
                update_unfinished(view, mirror, desired)
                updated += 1
        view.add_trials(wanted[len(held) :])
        added, rebuilt = len(wanted) - len(held), False
    front = tuple(t.number for t in front_trials(trials, [d.name.lower() for d in source.directions]))
    set_study_attribute(view, names.FRONT, list(front))
    set_study_attribute(view, names.REFRESHED_AT, _now().isoformat(timespec="seconds"))
    states = [t.state.name for t in wanted]
    return ViewReport(
        study_name,
        study_id(view),
        len(wanted),
        states.count("COMPLETE"),
        states.count("PRUNED"),
        states.count("FAIL"),
        sum(not t.state.is_finished() for t in wanted),
        front,
        rebuilt,
        added,
        updated,
    )


@contextmanager
def _refresh_lock(view_url: str) -> Iterator[None]:
    """Hold an exclusive lock on refreshing the view storage ``view_url`` (blocks until free).

    A file lock (``flock``): next to a SQLite view (``<file>.refresh.lock``), else in the
    temporary directory keyed by the URL, so it serialises the refreshes of one host
    (``tuner run`` ending while ``tuner dashboard`` serves), not of several hosts.
    """
    import fcntl
    import hashlib
    import tempfile

    if view_url.startswith("sqlite:///"):
        path = Path(view_url.removeprefix("sqlite:///") + ".refresh.lock")
    else:
        path = Path(tempfile.gettempdir()) / f"tuner-view-{hashlib.sha256(view_url.encode()).hexdigest()[:16]}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def study_constraint_order(study: optuna.Study) -> list[str]:
    """Every constraint key told on ``study``'s trials, in the legacy list's order (sorted)."""
    keys: set[str] = set()
    for trial in study.get_trials(deepcopy=False):
        keys.update(named_constraints(trial))
    return constraint_order(dict.fromkeys(keys, 0.0))


def _now() -> datetime.datetime:
    return datetime.datetime.now()


def _new_view(
    storage: optuna.storages.BaseStorage, source: optuna.Study, metric_names: list[str] | None, source_shown: str
) -> optuna.Study:
    """Delete the view study of ``source``'s name (when there is one) and create it empty, with the
    directions, metric names and view attributes of ``source``."""
    import optuna

    for study in storage.get_all_studies():
        if study.study_name == source.study_name:
            delete_study(storage, study)
    view = optuna.create_study(storage=storage, study_name=source.study_name, directions=source.directions)
    if metric_names is not None:
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            view.set_metric_names(metric_names)
    set_study_attribute(view, names.VIEW_OF, source_shown)
    set_study_attribute(view, names.SOURCE_STUDY_ID, study_id(source))
    order = study_constraint_order(source)
    if order:
        set_study_attribute(view, names.CONSTRAINT_ORDER, order)
    provenance = attributes_of(source)
    for key in PROVENANCE_ATTRS:
        if key in provenance:
            set_study_attribute(view, key, provenance[key])
    return view


def _matching_view(
    storage: optuna.storages.BaseStorage,
    source: optuna.Study,
    metric_names: list[str] | None,
    wanted: Sequence[FrozenTrial],
    source_shown: str,
) -> optuna.Study | None:
    """The existing view of ``source`` when it can be updated in place, else None (it is rebuilt)."""
    import optuna

    if source.study_name not in {s.study_name for s in storage.get_all_studies()}:
        return None
    view = optuna.load_study(study_name=source.study_name, storage=storage)
    stored = StudyRecord.of(view)
    if (
        stored.view_of != source_shown
        or stored.source_study_id != study_id(source)
        or view.directions != source.directions
        or view.metric_names != metric_names
        or list(stored.constraint_order) != study_constraint_order(source)
    ):
        return None
    held = view.get_trials(deepcopy=False)
    if len(held) > len(wanted):
        return None
    for mirror, desired in zip(held, wanted):
        if mirror.state.is_finished() and stored_differently(mirror, desired):
            return None
    return view
