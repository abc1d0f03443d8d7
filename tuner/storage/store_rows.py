"""The rows behind a study: Optuna's internals the writes reach for (through :mod:`.optuna_private`), a trial's
attributes in one transaction, and the trial's side records (issue 27).

Part of the storage gateway (with :mod:`tuner.storage.store`, which re-exports what is public here,
:mod:`tuner.storage.attributes` and :mod:`tuner.storage.records`; ``tests/test_storage_gateway.py``).
Layer: below :mod:`tuner.storage.store` (imports nothing of tuner but :mod:`tuner.storage.outage` and
:mod:`tuner.storage.optuna_private`, where Optuna's private API is used).

Side records. Bulky per-trial facts that only ``tuner show``, the export and the views read (the worker's
environment, runtime, info and log tail: :data:`tuner.storage.attributes.TRIAL_RECORDS`) are not user
attributes of the trial, which every coordinator loads into Optuna's trial cache: they live in a table of
tuner's own in the study's database, ``tuner_trial_records(study_id, trial_number, name, value_json)``
(primary key the first three; ``value_json`` is ``json.dumps`` of the value, as Optuna stores
attributes). Contracts:

* :func:`write_attributes` upserts a trial's attributes and its side records in one transaction
  (SQLite >= 3.24, PostgreSQL, MySQL); the table is created if missing before the first write of a
  process to a database (a study created by an older tuner has none).
* A storage without such an engine (in memory, journal) stores the side records as user attributes:
  the readers (:func:`tuner.storage.records.trial_records`) fall back to those, as for trials an older
  tuner wrote.
* :func:`stored_records` reads the table; a database without the table holds no side records.
* :func:`delete_side_records` removes a study's rows (its id may be reused by the next study).
"""

from __future__ import annotations

import functools
import sqlite3
import weakref
from collections.abc import Collection, Mapping
from json import dumps, loads
from typing import TYPE_CHECKING, Any

from tuner.storage.optuna_private import (  # Optuna's internals, re-exported (used by the storage gateway)
    backend_of as backend_of,
)
from tuner.storage.optuna_private import live_trial_cache, rdb_models, rdb_session
from tuner.storage.optuna_private import storage_of as storage_of
from tuner.storage.optuna_private import study_id as study_id
from tuner.storage.optuna_private import trial_id as trial_id
from tuner.storage.outage import call_through_outage

if TYPE_CHECKING:
    import optuna

Trial = Any  # an ``optuna.Trial`` (live, being written) or a ``FrozenTrial``
Study = Any  # an ``optuna.Study``, or a study summary (``FrozenStudy``) where only ids are read
UPSERTS = ("postgresql", "mysql", *(("sqlite",) if sqlite3.sqlite_version_info >= (3, 24) else ()))  # as Optuna's
SIDE_TABLE = "tuner_trial_records"
CONSTRAINT_PREFIX = "constraints:"  # Optuna 5's per-key form of a trial's constraint (``Trial.set_constraint``)
_MAX_LISTED = 500  # more trial numbers than this are not listed in the query: the study's rows are read, then picked
_SIDE_READY: weakref.WeakSet[Any] = weakref.WeakSet()  # engines whose side table this process has seen

# ------------------------------------------------------------------ Optuna internals


def engine_of(study: optuna.Study) -> Any:
    """The SQLAlchemy engine of the study's database; None for a storage without one (in memory, journal)."""
    return getattr(backend_of(study), "engine", None)


# ------------------------------------------------------------------ the side table


def side_table(metadata: Any) -> Any:
    """The ``tuner_trial_records`` table in ``metadata`` (SQLAlchemy ``MetaData``)."""
    from sqlalchemy import Column, Integer, String, Table, Text

    return Table(
        SIDE_TABLE,
        metadata,
        Column("study_id", Integer, primary_key=True),
        Column("trial_number", Integer, primary_key=True),
        Column("name", String(255), primary_key=True),
        Column("value_json", Text, nullable=False),
    )


def ensure_tables(metadata: Any, engine: Any) -> None:
    """Create tuner's own tables in ``metadata`` if missing; another process creating them at the same
    instant is fine (its "already exists" is ignored once the table is seen)."""
    call_through_outage(_create_tables, metadata, engine)


def _create_tables(metadata: Any, engine: Any) -> None:
    from sqlalchemy import inspect
    from sqlalchemy.exc import DBAPIError

    for attempt in range(5):
        try:
            metadata.create_all(engine, checkfirst=True)
            return
        except DBAPIError:  # SQLite: OperationalError; PostgreSQL: IntegrityError on its catalogue
            existing = set(inspect(engine).get_table_names())
            if all(name in existing for name in metadata.tables):
                return
            if attempt == 4:
                raise


@functools.cache
def _side() -> Any:
    from sqlalchemy import MetaData

    return side_table(MetaData())


def _ensure_side_table(engine: Any) -> None:
    """Create the side table in ``engine``'s database if missing (checked once per process and engine)."""
    if engine in _SIDE_READY:
        return
    ensure_tables(_side().metadata, engine)
    _SIDE_READY.add(engine)


def stored_records(study: optuna.Study, numbers: Collection[int] | None = None) -> dict[int, dict[str, Any]]:
    """Trial number -> name -> value of ``study``'s side records (of ``numbers`` when given): empty for a
    storage without an engine or a database without the table. Rides through an outage."""
    engine = engine_of(study)
    if engine is None or (numbers is not None and not numbers):
        return {}

    def read() -> dict[int, dict[str, Any]]:
        from sqlalchemy import inspect, select

        if engine not in _SIDE_READY and not inspect(engine).has_table(SIDE_TABLE):
            return {}
        table = _side()
        query = select(table.c.trial_number, table.c.name, table.c.value_json).where(
            table.c.study_id == study_id(study)
        )
        wanted = None if numbers is None else set(numbers)
        if wanted is not None and len(wanted) <= _MAX_LISTED:
            query = query.where(table.c.trial_number.in_(sorted(wanted)))
        found: dict[int, dict[str, Any]] = {}
        with engine.connect() as connection:
            for row in connection.execute(query):
                if wanted is None or row.trial_number in wanted:
                    found.setdefault(int(row.trial_number), {})[row.name] = loads(row.value_json)
        return found

    return call_through_outage(read)


def delete_side_records(study: Study, engine: Any) -> None:
    """Delete the side records of ``study`` (by id) from ``engine``'s database (nothing when it has no table)."""
    if engine is None:
        return
    from sqlalchemy import delete, inspect

    def remove() -> None:
        if engine in _SIDE_READY or inspect(engine).has_table(SIDE_TABLE):
            with engine.begin() as connection:
                connection.execute(delete(_side()).where(_side().c.study_id == study_id(study)))

    call_through_outage(remove)


# ------------------------------------------------------------------ a trial's attributes in one transaction


def set_trial_attributes(
    trial: Trial,
    values: Mapping[str, Any],
    side: Mapping[str, Any] | None = None,
    constraints: Mapping[str, float] | None = None,
) -> None:
    """Write ``values`` (keys named in :mod:`.attributes`) to the live ``trial``, its ``side`` records
    (:data:`tuner.storage.attributes.TRIAL_RECORDS`) to the side table and its ``constraints`` (name -> value,
    feasible at <= 0) as Optuna 5 stores them (a system attribute ``constraints:<name>`` each, what
    ``trial.set_constraint`` writes): one transaction (a read of the trial's state, one multi-row upsert per
    table) on a SQLite, PostgreSQL or MySQL storage, else one ``set_user_attr`` / ``set_constraint`` each,
    ``side`` included (in memory, journal, a ``FrozenTrial``). Either way the stored rows, the live trial's copy
    (of ``values`` and ``constraints``) and the error on a finished trial (``UpdateFinishedTrialError``: taken
    over) are Optuna's. Optuna's cache (``_CachedStorage``) writes an unfinished trial's attributes to the
    database and reads them from there: ``study.get_trials()`` sees these. A NaN constraint is a ValueError
    before anything is written, as in Optuna."""
    values, side, system = dict(values), dict(side or {}), constraint_attributes(constraints or {})
    cached = live_trial_cache(trial)
    if cached is None:  # a FrozenTrial: Optuna writes it in memory only
        for key, value in {**values, **side}.items():
            trial.set_user_attr(key, value)
        for key, value in (constraints or {}).items():
            trial.set_constraint(key, value)
        return
    aside = write_attributes(trial.study, trial_id(trial), values, side, trial.number, system)
    cached.user_attrs.update(values if aside else {**values, **side})
    cached.system_attrs.update(system)


def constraint_attributes(constraints: Mapping[str, float]) -> dict[str, float]:
    """``constraints`` (name -> value) as the system attributes Optuna 5 reads them from (``FrozenTrial.constraints``,
    the samplers): ``constraints:<name>`` -> the value as a float; ValueError on NaN (Optuna refuses it too)."""
    import math

    attributes = {f"{CONSTRAINT_PREFIX}{key}": float(value) for key, value in constraints.items()}
    for key, value in attributes.items():
        if math.isnan(value):
            raise ValueError(f"constraint {key.removeprefix(CONSTRAINT_PREFIX)!r} is NaN: Optuna refuses it")
    return attributes


def write_attributes(
    study: optuna.Study,
    number: int,
    values: Mapping[str, Any],
    side: Mapping[str, Any] | None = None,
    trial_number: int | None = None,
    system: Mapping[str, Any] | None = None,
) -> bool:
    """Write ``values`` (user attributes) and ``system`` (system attributes) to the unfinished trial of id
    ``number`` (see :func:`set_trial_attributes`) and ``side`` to the side table as trial ``trial_number`` of
    ``study``; True when ``side`` went to the table, False when it was written as user attributes (no upserting
    engine) or there was none."""
    engine = engine_of(study)
    system = dict(system or {})
    rows = (
        []
        if not side or trial_number is None
        else [
            {"study_id": study_id(study), "trial_number": trial_number, "name": key, "value_json": dumps(value)}
            for key, value in side.items()
        ]
    )
    if (values or rows or system) and (dialect := getattr(engine, "name", None)) in UPSERTS:
        if rows:
            _ensure_side_table(engine)
        call_through_outage(_upsert_attributes, backend_of(study), dialect, number, values, rows, system)
        return bool(rows)
    for key, value in {**values, **(side or {})}.items():
        storage_of(study).set_trial_user_attr(number, key, value)
    for key, value in system.items():
        storage_of(study).set_trial_system_attr(number, key, value)
    return False


def _upsert(dialect: str, table: Any, rows: list[dict[str, Any]], keys: list[Any]) -> Any:
    """The multi-row insert of ``rows`` into ``table`` that overwrites ``value_json`` on a conflict of ``keys``."""
    from sqlalchemy.dialects import mysql, postgresql, sqlite

    statement = {"sqlite": sqlite, "postgresql": postgresql, "mysql": mysql}[dialect].insert(table).values(rows)
    if dialect == "mysql":
        return statement.on_duplicate_key_update(value_json=statement.inserted.value_json)
    return statement.on_conflict_do_update(index_elements=keys, set_={"value_json": statement.excluded.value_json})


def _upsert_attributes(
    backend: Any,
    dialect: str,
    number: int,
    values: Mapping[str, Any],
    side_rows: list[dict[str, Any]],
    system: Mapping[str, Any],
) -> None:
    """One transaction: refuse a finished trial ``number`` (as Optuna does), then upsert each of ``values``
    (user attributes), each of ``system`` (system attributes) and each of ``side_rows`` (the side table)."""
    m = rdb_models()
    table, side, system_table = m.TrialUserAttributeModel, _side(), m.TrialSystemAttributeModel
    rows = [{"trial_id": number, "key": key, "value_json": dumps(value)} for key, value in values.items()]
    system_rows = [{"trial_id": number, "key": key, "value_json": dumps(value)} for key, value in system.items()]
    with rdb_session(backend) as session:
        backend.check_trial_is_updatable(number, m.TrialModel.find_or_raise_by_id(number, session).state)
        if rows:
            session.execute(_upsert(dialect, table, rows, [table.trial_id, table.key]))
        if system_rows:
            session.execute(_upsert(dialect, system_table, system_rows, [system_table.trial_id, system_table.key]))
        if side_rows:
            session.execute(_upsert(dialect, side, side_rows, [side.c.study_id, side.c.trial_number, side.c.name]))
