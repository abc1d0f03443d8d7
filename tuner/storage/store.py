"""Writes to the Optuna storage, and the Optuna internals tuner relies on: the storage gateway's write side.

With :mod:`tuner.storage.attributes` (the names, and the readers of a stored trial) and :mod:`tuner.storage.records`
(typed records of a trial and of a study), this is the only code of ``tuner/`` that names Optuna's attributes
(``tests/test_storage_gateway.py`` holds it; Optuna's private members are reached through
:mod:`tuner.storage.optuna_private`, the one module that names them). The rest of tuner writes through the typed
functions here (a trial's attributes in one transaction each: :func:`set_trial_attributes`) and reads through
the records. The internals and that one-transaction write live in :mod:`tuner.storage.store_rows` (re-exported
here), with the trial's side records: what only ``show``, the export and the views read (environment, runtime,
worker info, log tail), kept out of the user attributes every coordinator loads
(:data:`tuner.storage.attributes.TRIAL_RECORDS`).

Contracts:

* A trial attribute is written by the function named for the moment it records:
  :func:`start_trial` (host, worker, role), :func:`record_candidate`, :func:`record_slot`,
  :func:`record_result` (a run's result, ``measured`` true), :func:`record_unrun` (never run:
  placeholder values, ``measured`` false), :func:`record_copy` (a copy of a measured trial),
  :func:`record_interrupted` / :func:`fail_waiting` / :func:`reclaim` (given back, re-queued).
  None of them tells the trial: the caller does (``study.tell``), so a write and the tell stay
  in the order the caller chose.
* A study attribute is written by :func:`record_study_created`, :func:`set_study_attribute`,
  :func:`record_event` (overrides applied and an event appended), :func:`cancel_study` ... (in
  :mod:`tuner.storage.study_writes`, re-exported here with the dashboard mirror's trial writes).
* Internals: :func:`storage_of`, :func:`backend_of`, :func:`engine_of`, :func:`study_id`,
  :func:`trial_id`, the heartbeat functions. Behaviour follows Optuna 5.0; a change there is
  fixed here and in :mod:`tuner.storage.optuna_private` only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tuner.storage import attributes as names
from tuner.storage.cost import trial_cost
from tuner.storage.optuna_private import backend_of_storage, rdb_models, stale_trial_ids
from tuner.storage.outage import call_through_outage
from tuner.storage.records import result_attributes, result_records
from tuner.storage.store_rows import (  # Optuna's internals and the one-transaction write, re-exported
    backend_of as backend_of,
)
from tuner.storage.store_rows import delete_side_records, write_attributes
from tuner.storage.store_rows import engine_of as engine_of
from tuner.storage.store_rows import set_trial_attributes as set_trial_attributes
from tuner.storage.store_rows import storage_of as storage_of
from tuner.storage.store_rows import study_id as study_id
from tuner.storage.store_rows import trial_id as trial_id
from tuner.storage.study_writes import cancel_study as cancel_study  # study writes, re-exported
from tuner.storage.study_writes import new_frozen_trial as new_frozen_trial
from tuner.storage.study_writes import record_event as record_event
from tuner.storage.study_writes import record_mlflow_run as record_mlflow_run
from tuner.storage.study_writes import record_study_created as record_study_created
from tuner.storage.study_writes import set_study_attribute as set_study_attribute
from tuner.storage.study_writes import set_study_attributes as set_study_attributes
from tuner.storage.study_writes import stored_differently as stored_differently
from tuner.storage.study_writes import update_unfinished as update_unfinished

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.results import TrialResult

Trial = Any  # an ``optuna.Trial`` (live, being written) or a ``FrozenTrial``
Study = Any  # an ``optuna.Study``, or a study summary (``FrozenStudy``) where only ids are read

# ------------------------------------------------------------------ Optuna internals


def trials_of(storage: Any, study: Study) -> list[FrozenTrial]:
    """Every trial of ``study`` (e.g. a summary from ``storage.get_all_studies()``), not copied."""
    return list(storage.get_all_trials(study_id(study), deepcopy=False))


def trial_by_number(study: optuna.Study, number: int) -> FrozenTrial:
    """The trial ``number`` of ``study``, read fresh from the storage."""
    storage = storage_of(study)
    return storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id(study), number))


def study_attribute(study: optuna.Study, name: str) -> Any:
    """The study attribute ``name`` (None when unset); on an RDB storage one row is read, not every attribute
    (the spec's text included) as ``study.user_attrs`` does; rides through an outage (:mod:`.outage`)."""
    if not hasattr(backend := backend_of(study), "scoped_session"):
        return study.user_attrs.get(name)
    from json import loads

    Attr = rdb_models().StudyUserAttributeModel

    def read() -> Any:
        with backend.scoped_session() as session:
            row = session.query(Attr.value_json).filter(Attr.study_id == study_id(study), Attr.key == name).first()
        return None if row is None else loads(row.value_json)

    return call_through_outage(read)


def delete_study(storage: Any, study: Study) -> None:
    """Delete ``study`` (a summary from ``storage.get_all_studies()``), its trials and their side records from
    ``storage``."""
    storage.delete_study(study_id(study))
    delete_side_records(study, getattr(backend_of_storage(storage), "engine", None))


def add_finished_trials(study: optuna.Study, trials: Sequence[FrozenTrial]) -> None:
    """Add finished ``trials`` after ``study``'s last in one transaction (tests, benches; not RDB: add_trials)."""
    if not hasattr(backend := backend_of(study), "scoped_session"):
        return study.add_trials(trials)
    from json import dumps  # noqa: I001 - one block of local imports
    from optuna.distributions import distribution_to_json
    from sqlalchemy import func

    m = rdb_models()
    with backend.scoped_session() as session:
        m.StudyModel.find_or_raise_by_id(study_id(study), session, for_update=True)
        first = session.query(func.count(m.TrialModel.trial_id)).filter(m.TrialModel.study_id == study_id(study))
        for number, t in enumerate(trials, start=int(first.scalar())):
            model = m.TrialModel(
                study_id=study_id(study),
                number=number,
                state=t.state,
                datetime_start=t.datetime_start,
                datetime_complete=t.datetime_complete,
            )
            model.params = [
                m.TrialParamModel(
                    param_name=k, param_value=d.to_internal_repr(t.params[k]), distribution_json=distribution_to_json(d)
                )
                for k, d in t.distributions.items()
            ]
            model.values = [
                m.TrialValueModel(objective=i, value=v, value_type=kind)
                for i, (v, kind) in enumerate(m.TrialValueModel.value_to_stored_repr(v) for v in t.values or ())
            ]
            model.user_attributes = [
                m.TrialUserAttributeModel(key=k, value_json=dumps(v)) for k, v in t.user_attrs.items()
            ]
            model.system_attributes = [
                m.TrialSystemAttributeModel(key=k, value_json=dumps(v)) for k, v in t.system_attrs.items()
            ]
            session.add(model)
        session.commit()


# ------------------------------------------------------------------ heartbeats


def heartbeat_interval_s(study: optuna.Study) -> float | None:
    """The storage's heartbeat interval in seconds; None when it keeps no heartbeats."""
    interval = getattr(storage_of(study), "get_heartbeat_interval", lambda: None)()
    return float(interval) if interval else None


def record_heartbeat(study: optuna.Study, trial_ids: Sequence[int]) -> None:
    """One heartbeat for each of ``trial_ids`` (the storage must keep heartbeats)."""
    for number in trial_ids:
        storage_of(study).record_heartbeat(number)


def heartbeat_grace_period_s(study: optuna.Study) -> float:
    """The storage's heartbeat grace period in seconds (Optuna's default: twice the interval)."""
    grace, interval = (getattr(backend_of(study), name, None) for name in ("grace_period", "heartbeat_interval"))
    return float(grace if grace else 2 * (interval or 0))


def heartbeat_stale_trial_ids(study: optuna.Study) -> list[int]:
    """Ids of the study's RUNNING trials whose last heartbeat is older than the grace period."""
    return stale_trial_ids(storage_of(study), study_id(study))


def trials_with_heartbeat(study: optuna.Study, among: Collection[int] | None = None) -> set[int]:
    """Ids of trials that have a heartbeat row (an RDB storage with heartbeats), of ``among`` when given (only those
    rows read); empty for another storage. The query rides through a storage outage (:mod:`.outage`)."""
    if not hasattr(backend := backend_of(study), "scoped_session"):
        return set()  # an unusual storage: no trial is known to beat
    models = rdb_models()

    def read() -> set[int]:
        with backend.scoped_session() as session:
            query = session.query(models.TrialHeartbeatModel.trial_id)
            query = query if among is None else query.filter(models.TrialHeartbeatModel.trial_id.in_(list(among)))
            return {row.trial_id for row in query.all()}

    return call_through_outage(read)


# ------------------------------------------------------------------ trial writes


def start_trial(trial: Trial, host: str, worker: str) -> str:
    """Record where the asked ``trial`` runs (``host``, ``worker`` = ``host:pid``) and its role (kept when
    enqueued with one, else ``search``); the role."""
    role = names.role_of(trial)
    set_trial_attributes(trial, {names.HOST: host, names.WORKER: worker, names.ROLE: role})
    return role


def record_candidate(trial: Trial, key: str, derived: Mapping[str, Any]) -> None:
    """Record the resolved setting's canonical ``key`` and its ``derived`` values."""
    set_trial_attributes(trial, {names.CANDIDATE_KEY: key, names.DERIVED: dict(derived)})


def record_prediction(trial: Trial, prediction: Mapping[str, Any]) -> None:
    """Record what was predicted of the setting before it ran (:mod:`tuner.search.prediction`), by metric."""
    if prediction:
        trial.set_user_attr(names.PREDICTION, dict(prediction))


def record_skip_audit(trial: Trial, audit: Mapping[str, Any]) -> None:
    """Mark ``trial`` as an audit of a skip (:mod:`tuner.search.dominance`): it runs although predicted dominated;
    ``audit`` holds the front it was judged against."""
    trial.set_user_attr(names.SKIP_AUDIT, dict(audit))


def record_waiting(trial: Trial, why: str) -> None:
    """Record why the asked ``trial`` waits to start (one line; ``tuner status`` shows it while it waits)."""
    trial.set_user_attr(names.WAITING, why)


def record_slot(trial: Trial, label: str, compared_with: Mapping[str, Any] | None = None) -> None:
    """Record the slot the trial runs on, and (a study with a reference per shape) the trial whose output its
    quality is compared with and that trial's shape: ``{"trial": number or None, "shape": {name: value}}``."""
    trial.set_user_attr(names.SLOT, label)
    if compared_with is not None:
        trial.set_user_attr(names.COMPARED_WITH, dict(compared_with))


def record_result(
    trial: Trial,
    result: TrialResult,
    slot: str,
    placeholder: bool,
    *,
    reference_output: str | None = None,
    published: Mapping[str, Any] | None = None,
    fingerprint_note: str | None = None,
    unavailable_constraints: Mapping[str, str] | None = None,
    reason: str | None = None,
    constraints: Mapping[str, float] | None = None,
) -> None:
    """Record a run's ``result`` (:func:`~tuner.storage.records.result_attributes`), its ``slot``, what the adapter
    ran, ``measured`` true and ``placeholder`` (values are the wall, not a measurement); when given: the reference's
    local ``reference_output`` path and what its hand-off ``published``, the host's ``fingerprint_note``, the
    ``unavailable_constraints`` and a ``reason`` replacing the result's; its bulky side records (environment,
    runtime, worker info, log tail: :func:`~tuner.storage.records.result_records`) go to the side table and its
    ``constraints`` (name -> value, as ``trial.set_constraint``) to the trial, in the same transaction
    (:func:`set_trial_attributes`; one by one on a storage without one)."""
    given = _given(
        {
            names.INVOCATION: result.invocation,
            names.REFERENCE_OUTPUT: reference_output,
            names.FINGERPRINT_NOTE: fingerprint_note,
            names.REASON: reason,
            names.UNAVAILABLE_CONSTRAINTS: dict(unavailable_constraints) if unavailable_constraints else None,
        }
    )
    set_trial_attributes(
        trial,
        {
            **result_attributes(result),
            names.COST: trial_cost(result, slot),
            names.SLOT: slot,
            names.MEASURED: True,
            names.PLACEHOLDER_VALUES: placeholder,
            **(published or {}),
            **given,
        },
        side=result_records(result),
        constraints=constraints,
    )


def _given(values: Mapping[str, Any]) -> dict[str, Any]:  # ``values`` without those that are None (not given)
    return {key: value for key, value in values.items() if value is not None}


def record_unrun(
    trial: Trial,
    outcome: str,
    reason: str | None,
    extra: Mapping[str, Any] | None = None,
    constraints: Mapping[str, float] | None = None,
) -> None:
    """Record a trial that is never run (INVALID, SKIPPED_PREDICTED_OOM): ``outcome``, ``reason``,
    ``measured`` false (no budget), placeholder values; ``extra`` attributes (named in :mod:`.attributes`);
    its ``constraints`` in the same transaction."""
    set_trial_attributes(
        trial,
        {
            names.OUTCOME: outcome,
            names.REASON: reason,
            names.MEASURED: False,
            names.PLACEHOLDER_VALUES: True,
            **(extra or {}),
        },
        constraints=constraints,
    )


def record_copy(trial: Trial, original: FrozenTrial) -> None:
    """Record ``trial`` as a copy of the measured ``original``: ``duplicate_of``, ``measured`` false (no
    budget), and the original's outcome, reason, metrics, placeholder flag, ``compared_with`` (the reference
    its metrics were computed against) and per-input figures; its constraints when it has values (one transaction)."""
    copied = (
        names.OUTCOME,
        names.REASON,
        names.METRICS,
        names.PLACEHOLDER_VALUES,
        names.COMPARED_WITH,
        names.PER_INPUT,
        names.CLIFFS,
    )
    set_trial_attributes(
        trial,
        {
            names.DUPLICATE_OF: original.number,
            names.MEASURED: False,
            **{key: original.user_attrs[key] for key in copied if key in original.user_attrs},
        },
        constraints=original.constraints if original.values is not None else None,
    )


def record_interrupted(trial: Trial, reason: str, cost: Mapping[str, Any] | None = None) -> None:
    """Record a trial given back before it ended: outcome ``INTERRUPTED``, ``reason``, ``measured`` false, and
    the device time its interrupted run held (``cost``, :func:`~tuner.storage.cost.trial_cost`) when it ran."""
    set_trial_attributes(
        trial,
        {
            names.OUTCOME: names.INTERRUPTED,
            names.REASON: reason,
            names.MEASURED: False,
            **_given({names.COST: None if cost is None else dict(cost)}),
        },
    )


def fail_waiting(study: optuna.Study, trial: FrozenTrial, reason: str) -> None:
    """Fail the WAITING ``trial`` as ``INTERRUPTED`` with ``reason`` (it is enqueued again by the caller)."""
    from optuna.trial import TrialState

    write_attributes(study, trial_id(trial), {names.OUTCOME: names.INTERRUPTED, names.REASON: reason})
    storage_of(study).set_trial_state_values(trial_id(trial), TrialState.FAIL)


def reclaim(study: optuna.Study, stale_id: int, reason: str) -> FrozenTrial | None:
    """Fail the stale RUNNING trial ``stale_id`` as ``INTERRUPTED`` (``measured`` false) with ``reason``; the
    trial as it was, or None when another coordinator finished or reclaimed it first (then only that one
    re-queues its setting)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = storage_of(study)
    try:
        trial = storage.get_trial(stale_id)
        write_attributes(
            study, stale_id, {names.OUTCOME: names.INTERRUPTED, names.REASON: reason, names.MEASURED: False}
        )
        if not storage.set_trial_state_values(stale_id, state=TrialState.FAIL):
            return None
    except UpdateFinishedTrialError:
        return None
    return trial


def enqueue(
    study: optuna.Study,
    params: Mapping[str, Any],
    role: str,
    rerun_of: int | None = None,
    warm_start_from: str | None = None,
    owed: bool = False,
) -> None:
    """Queue the setting ``params`` with its ``role``, the trial it re-runs and the warm-start study it came from;
    ``owed``: the re-run keeps that trial's place in the trial budget (:func:`tuner.storage.attributes.owed`)."""
    given = {names.RERUN_OF: rerun_of, names.WARM_START_FROM: warm_start_from, names.OWED: owed or None}
    attrs = {names.ROLE: role, **_given(given)}
    study.enqueue_trial(dict(params), user_attrs=attrs)
