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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from tuner.pareto import front_trials, is_measured_feasible, named_constraints
from tuner.secrets import redact_url
from tuner.study.objectives import CONSTRAINT_ORDER_ATTR, LEGACY_CONSTRAINTS_ATTR, constraint_order
from tuner.study.storage import StudyError, open_storage

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

VIEW_FILE = "dashboard.db"
KEPT_ATTRS = ("slot", "host", "wall_time_s", "warm_start_from", "predicted_peak_gb", "prediction_witness")
PROVENANCE_ATTRS = ("spec_name", "device", "gpu_type", "sampler", "budget_trials")


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


def metric_names_of(study: "optuna.Study") -> list[str] | None:
    """The study's metric names, else the ``objectives`` user attribute tuner stores at creation."""
    names = study.metric_names or study.user_attrs.get("objectives")
    return list(names) if names and len(names) == len(study.directions) else None


def view_trial(trial: "FrozenTrial", objective_names: Sequence[str]) -> "FrozenTrial":
    """The view of one real trial (the mapping in the module docstring); the trial number is assigned
    by the view's storage, in order."""
    from optuna.trial import TrialState, create_trial

    attrs = trial.user_attrs
    constraints = named_constraints(trial)
    kept: dict[str, Any] = {"tuner_state": trial.state.name, "role": attrs.get("role", "search"),
                            "outcome": attrs.get("outcome", trial.state.name), "reason": attrs.get("reason")}
    kept.update({key: attrs[key] for key in KEPT_ATTRS if attrs.get(key) is not None})
    for name, metric in (attrs.get("metrics") or {}).items():
        if isinstance(metric, dict) and isinstance(metric.get("value"), (int, float)):
            kept[name] = metric["value"]
    if attrs.get("duplicate_of") is not None:
        kept["copy_of"] = attrs["duplicate_of"]
    values = None
    state = trial.state
    if state == TrialState.COMPLETE:
        if attrs.get("placeholder_values") or trial.values is None:
            state = TrialState.FAIL
        elif is_measured_feasible(trial):
            values = list(trial.values)
        else:
            state = TrialState.PRUNED
            kept["values"] = dict(zip(objective_names, trial.values))
    system_attrs: dict[str, Any] = {}
    if constraints:
        system_attrs[LEGACY_CONSTRAINTS_ATTR] = [constraints[key] for key in constraint_order(constraints)]
    mirrored = create_trial(state=state, values=values, params=dict(trial.params),
                            distributions=dict(trial.distributions), user_attrs=kept, system_attrs=system_attrs)
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
        raise StudyError("the dashboard view must live in its own storage, not in the study's "
                         f"({redact_url(view_url)}): give another view storage")
    source_storage = open_storage(source_url, create=False, read_only=True)
    if study_name not in {s.study_name for s in source_storage.get_all_studies()}:
        raise StudyError(f"no study '{study_name}' in {redact_url(source_url)}")
    source = optuna.load_study(study_name=study_name, storage=source_storage)
    with _refresh_lock(view_url):  # another process refreshing the same view would add the same trials
        return _refresh_locked(source, study_name, view_url, redact_url(source_url), rebuild)


def _refresh_locked(source: "optuna.Study", study_name: str, view_url: str, shown_source: str,
                    rebuild: bool) -> ViewReport:
    trials = source.get_trials(deepcopy=False)
    names = metric_names_of(source)
    wanted = [view_trial(t, names or [f"objective_{i}" for i in range(len(source.directions))]) for t in trials]
    storage = open_storage(view_url)
    view = _matching_view(storage, source, names, wanted, shown_source) if not rebuild else None
    added = updated = 0
    if view is None:
        view = _new_view(storage, source, names, shown_source)
        view.add_trials(wanted)
        added, rebuilt = len(wanted), True
    else:
        held = view.get_trials(deepcopy=False)
        for mirror, desired in zip(held, wanted):
            if not mirror.state.is_finished() and _differs(mirror, desired):
                _update_in_place(view, mirror, desired)
                updated += 1
        view.add_trials(wanted[len(held):])
        added, rebuilt = len(wanted) - len(held), False
    front = tuple(t.number for t in front_trials(trials, [d.name.lower() for d in source.directions]))
    view.set_user_attr("front", list(front))
    view.set_user_attr("refreshed_at", _now().isoformat(timespec="seconds"))
    states = [t.state.name for t in wanted]
    return ViewReport(study_name, view._study_id, len(wanted), states.count("COMPLETE"), states.count("PRUNED"),
                      states.count("FAIL"), sum(not t.state.is_finished() for t in wanted), front, rebuilt,
                      added, updated)


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


def view_study_ids(view_url: str) -> dict[str, int]:
    """Study name -> study id in the view storage (optuna-dashboard's page of a study is
    ``/dashboard/studies/<id>``); empty when the view storage does not exist yet."""
    from tuner.study.storage import missing_sqlite_file

    if missing_sqlite_file(view_url) is not None:
        return {}
    return {s.study_name: s._study_id for s in open_storage(view_url, create=False).get_all_studies()}


def study_constraint_order(study: "optuna.Study") -> list[str]:
    """Every constraint key told on ``study``'s trials, in the legacy list's order (sorted)."""
    keys: set[str] = set()
    for trial in study.get_trials(deepcopy=False):
        keys.update(named_constraints(trial))
    return constraint_order(dict.fromkeys(keys, 0.0))


def _now() -> datetime.datetime:
    return datetime.datetime.now()


def _new_view(storage: "optuna.storages.BaseStorage", source: "optuna.Study", names: list[str] | None,
              source_shown: str) -> "optuna.Study":
    """Delete the view study of ``source``'s name (when there is one) and create it empty, with the
    directions, metric names and view attributes of ``source``."""
    import optuna

    for study in storage.get_all_studies():
        if study.study_name == source.study_name:
            storage.delete_study(study._study_id)
    view = optuna.create_study(storage=storage, study_name=source.study_name, directions=source.directions)
    if names is not None:
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            view.set_metric_names(names)
    view.set_user_attr("view_of", source_shown)
    view.set_user_attr("source_study_id", source._study_id)
    order = study_constraint_order(source)
    if order:
        view.set_user_attr(CONSTRAINT_ORDER_ATTR, order)
    for key in PROVENANCE_ATTRS:
        if key in source.user_attrs:
            view.set_user_attr(key, source.user_attrs[key])
    return view


def _matching_view(storage: "optuna.storages.BaseStorage", source: "optuna.Study", names: list[str] | None,
                   wanted: Sequence["FrozenTrial"], source_shown: str) -> "optuna.Study | None":
    """The existing view of ``source`` when it can be updated in place, else None (it is rebuilt)."""
    import optuna

    if source.study_name not in {s.study_name for s in storage.get_all_studies()}:
        return None
    view = optuna.load_study(study_name=source.study_name, storage=storage)
    attrs = view.user_attrs
    if (attrs.get("view_of") != source_shown or attrs.get("source_study_id") != source._study_id
            or view.directions != source.directions or view.metric_names != names
            or attrs.get(CONSTRAINT_ORDER_ATTR, []) != study_constraint_order(source)):
        return None
    held = view.get_trials(deepcopy=False)
    if len(held) > len(wanted):
        return None
    for mirror, desired in zip(held, wanted):
        if mirror.state.is_finished() and _differs(mirror, desired):
            return None
    return view


def _differs(mirror: "FrozenTrial", desired: "FrozenTrial") -> bool:
    return (mirror.state != desired.state or mirror.values != desired.values or mirror.params != desired.params
            or mirror.user_attrs != desired.user_attrs or mirror.system_attrs != desired.system_attrs)


def _update_in_place(view: "optuna.Study", mirror: "FrozenTrial", desired: "FrozenTrial") -> None:
    """Move an unfinished view trial to ``desired`` through the storage (times become the storage's)."""
    from optuna.trial import TrialState

    storage, trial_id = view._storage, mirror._trial_id
    if mirror.state == TrialState.WAITING and desired.state != TrialState.WAITING:
        storage.set_trial_state_values(trial_id, TrialState.RUNNING)
    for name, value in desired.params.items():
        if name not in mirror.params:
            distribution = desired.distributions[name]
            storage.set_trial_param(trial_id, name, distribution.to_internal_repr(value), distribution)
    for key, value in desired.user_attrs.items():
        if mirror.user_attrs.get(key) != value:
            storage.set_trial_user_attr(trial_id, key, value)
    for key, value in desired.system_attrs.items():
        if mirror.system_attrs.get(key) != value:
            storage.set_trial_system_attr(trial_id, key, value)
    if desired.state.is_finished():
        storage.set_trial_state_values(trial_id, desired.state, desired.values)
