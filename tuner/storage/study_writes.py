"""Study writes and the dashboard mirror's trial writes: the storage gateway's write side for whole studies.

Re-exported by :mod:`tuner.storage.store` (the rest of tuner calls them as ``store.record_event`` ...):
:func:`record_study_created`, :func:`set_study_attribute`, :func:`record_event` (overrides applied and an
event appended), :func:`record_mlflow_run`, :func:`cancel_study`; and for the optuna-dashboard view's mirror
study (:mod:`tuner.tracking.dashboard`): :func:`new_frozen_trial`, :func:`stored_differently`,
:func:`update_unfinished`. Part of the gateway (``tests/test_storage_gateway.py``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tuner.storage import attributes as names
from tuner.storage.store_rows import storage_of, trial_id, write_attributes

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial


# ------------------------------------------------------------------ study writes


def set_study_attribute(study: optuna.Study, name: str, value: Any) -> None:
    """Write the study attribute ``name`` (one of :mod:`.attributes`' study names)."""
    study.set_user_attr(name, value)


def set_study_attributes(study: optuna.Study, values: Mapping[str, Any]) -> None:
    """Write each of ``values`` as a study attribute, in order."""
    for key, value in values.items():
        study.set_user_attr(key, value)


def record_study_created(
    study: optuna.Study,
    spec_text: str,
    sampler: str,
    budget_trials: int | None,
    budget_wall_time_s: float | None,
    objectives: Sequence[str],
    provenance: Mapping[str, Any],
    budget_device_hours: float | None = None,
) -> None:
    """What a new study stores: its spec's text, sampler, budget (trials, wall time, device-hours), objective
    metrics and ``provenance`` (:func:`tuner.study.studies.study_attributes`, keys of :mod:`.attributes`)."""
    set_study_attributes(
        study,
        {
            names.SPEC_YAML: spec_text,
            names.SAMPLER: sampler,
            names.BUDGET_TRIALS: budget_trials,
            names.BUDGET_WALL_TIME_S: budget_wall_time_s,
            names.BUDGET_DEVICE_HOURS: budget_device_hours,
            names.OBJECTIVES: list(objectives),
        },
    )
    set_study_attributes(study, provenance)


def record_event(study: optuna.Study, kind: str, overrides: Mapping[str, Any]) -> None:
    """Apply ``overrides`` (study attributes) and append ``{at, event, overrides}`` to the study's ``events``."""
    set_study_attributes(study, overrides)
    events = list(study.user_attrs.get(names.EVENTS, []))
    events.append(
        {
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "event": kind,
            "overrides": dict(overrides),
        }
    )
    study.set_user_attr(names.EVENTS, events)


def record_mlflow_run(study: optuna.Study, run_id: str, shown_uri: str) -> None:
    """Record the study's MLflow parent run and the (redacted) tracking URI it lives at."""
    set_study_attributes(study, {names.MLFLOW_RUN_ID: run_id, names.MLFLOW_URI: shown_uri})


def cancel_study(study: optuna.Study, at: str) -> None:
    """Mark the study cancelled (workers finish the trial in flight, then stop proposing) at ``at`` (UTC)."""
    set_study_attributes(study, {names.CANCELLED: True, names.CANCELLED_AT: at})


# ------------------------------------------------------------------ mirrors (the dashboard view's storage)


def new_frozen_trial(
    state: Any,
    values: Sequence[float] | None,
    params: Mapping[str, Any],
    distributions: Mapping[str, Any],
    attributes: Mapping[str, Any],
    legacy_constraints: Sequence[float] | None = None,
) -> FrozenTrial:
    """A trial to add to a study (``study.add_trials``) with user ``attributes`` and, when given, the
    legacy constraint list optuna-dashboard reads."""
    from optuna.trial import create_trial

    system = {names.LEGACY_CONSTRAINTS: list(legacy_constraints)} if legacy_constraints else {}
    return create_trial(
        state=state,
        values=None if values is None else list(values),
        params=dict(params),
        distributions=dict(distributions),
        user_attrs=dict(attributes),
        system_attrs=system,
    )


def stored_differently(mirror: FrozenTrial, desired: FrozenTrial) -> bool:
    """Whether two trials differ in state, values, params or attributes (times and ids aside)."""
    return (
        mirror.state != desired.state
        or mirror.values != desired.values
        or mirror.params != desired.params
        or mirror.user_attrs != desired.user_attrs
        or mirror.system_attrs != desired.system_attrs
    )


def update_unfinished(study: optuna.Study, mirror: FrozenTrial, desired: FrozenTrial) -> None:
    """Move the unfinished trial ``mirror`` of ``study`` to ``desired`` through the storage: state, new params,
    changed attributes, values (its times become the storage's)."""
    from optuna.trial import TrialState

    storage, number = storage_of(study), trial_id(mirror)
    if mirror.state == TrialState.WAITING and desired.state != TrialState.WAITING:
        storage.set_trial_state_values(number, TrialState.RUNNING)
    for name, value in desired.params.items():
        if name not in mirror.params:
            distribution = desired.distributions[name]
            storage.set_trial_param(number, name, distribution.to_internal_repr(value), distribution)
    write_attributes(study, number, {k: v for k, v in desired.user_attrs.items() if mirror.user_attrs.get(k) != v})
    for key, value in desired.system_attrs.items():
        if mirror.system_attrs.get(key) != value:
            storage.set_trial_system_attr(number, key, value)
    if desired.state.is_finished():
        storage.set_trial_state_values(number, desired.state, desired.values)
