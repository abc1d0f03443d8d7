"""A trial's attributes are written in one transaction (issue 27), with what the per-attribute path stores.

:func:`tuner.storage.store.record_result` writes ~20 attributes; through Optuna's ``set_user_attr`` each is a
transaction of its own (a read of the trial, an upsert, a commit). :func:`tuner.storage.store.set_trial_attributes`
writes them as one read and one multi-row upsert (and one of its side records) on an RDB storage. Checked here:
fewer statements, the same stored attributes (and the live trial's copy; the side records aside) as one
``set_user_attr`` each, what ``study.get_trials()`` returns through Optuna's cache while the trial runs and
after it is told, Optuna's error on a finished trial, and the in-memory fallback.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.exceptions import UpdateFinishedTrialError
from sqlalchemy import event

from tuner.results import Metric, Outcome, TrialResult
from tuner.storage import store, store_rows
from tuner.storage.attributes import TRIAL_RECORDS
from tuner.storage.coordination.lock import ensure_tuner_tables
from tuner.testing.postgres import PostgresCluster, PostgresNotInstalled, postgres_bindir, running_postgres

optuna.logging.set_verbosity(optuna.logging.WARNING)


def result() -> TrialResult:
    """A result with every part a real one records (metrics, environment, log tail, invocation)."""
    return TrialResult(
        outcome=Outcome.OK,
        metrics={"latency_p50_s": Metric("latency_p50_s", 0.25, "s", "minimize")},
        log_tail="line\n" * 20,
        wall_time_s=1.5,
        eval_time_s=0.5,
        info={"environment": {"gpu": "H200"}},
        samples={"frame": "f.png"},
        invocation={"argv": ["python", "-m", "x"]},
    )


def written(study: optuna.Study, write: Any) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Statements run by ``write(trial)`` on a new trial of ``study`` (0 without an engine), the attributes then
    stored (read fresh), and the live trial's own copy."""
    trial = study.ask()
    engine, count = store.engine_of(study), [0]
    listener = lambda *_: count.__setitem__(0, count[0] + 1)  # noqa: E731
    if engine is not None:
        event.listen(engine, "before_cursor_execute", listener)
    try:
        write(trial)
    finally:
        if engine is not None:
            event.remove(engine, "before_cursor_execute", listener)
    return count[0], store.trial_by_number(study, trial.number).user_attrs, trial.user_attrs


def one_by_one(trial: optuna.Trial) -> None:
    """The per-attribute path: what record_result stored before it batched."""
    values: dict[str, Any] = {}
    store.record_result(
        _Recorder(values),
        result(),
        "gpu0",
        False,
        reason="why",
        fingerprint_note="note",
        unavailable_constraints={"c": "n/a"},
    )
    for key, value in values.items():
        trial.set_user_attr(key, value)


class _Recorder:
    """A FrozenTrial stand-in that keeps what is set (record_result's fallback path writes one by one)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def set_user_attr(self, key: str, value: Any) -> None:
        self.values[key] = value


def batched(trial: optuna.Trial) -> None:
    store.record_result(
        trial, result(), "gpu0", False, reason="why", fingerprint_note="note", unavailable_constraints={"c": "n/a"}
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster for this module (skipped when PostgreSQL is not installed)."""
    try:
        postgres_bindir()
    except PostgresNotInstalled as error:
        pytest.skip(str(error))
    with running_postgres(tmp_path_factory.mktemp("pg_batch")) as started:
        yield started


@pytest.fixture(params=["sqlite", "postgresql"])
def study(request: pytest.FixtureRequest, tmp_path: Path) -> optuna.Study:
    """A study on SQLite, or on a new database of the PostgreSQL cluster (its own upsert dialect)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'b.db'}"
    else:
        url = request.getfixturevalue("cluster").create_database(f"batch_{uuid.uuid4().hex[:12]}")
    return optuna.create_study(storage=url, study_name="b")


def test_record_result_is_one_transaction_and_stores_the_same(study: optuna.Study) -> None:
    ensure_tuner_tables(study)  # as at a study's creation: the side records' table is there
    slow, stored_slow, live_slow = written(study, one_by_one)
    fast, stored_fast, live_fast = written(study, batched)
    side = store_rows.stored_records(study)[study.trials[-1].number]
    assert len(stored_slow) >= 10 and set(side) == {"log_tail", "worker_info"}, side
    assert not set(stored_fast) & set(TRIAL_RECORDS), "side records are not user attributes"
    assert {**stored_fast, **side} == stored_slow and live_fast == stored_fast and live_slow == stored_slow
    assert fast <= 4 < 2 * len(stored_slow) <= slow, (fast, slow)


def test_constraints_go_in_the_result_s_transaction(study: optuna.Study) -> None:
    """A trial's constraints ride in record_result's one transaction (``trial.set_constraint`` read the whole trial
    back and wrote each in a transaction of its own: about 10 statements per constraint); Optuna reads them as
    its own (``FrozenTrial.constraints``, the samplers), running and told."""
    ensure_tuner_tables(study)
    constraints = {"outcome": 0.0, "vram_gb": 1.5}

    def with_constraints(trial: optuna.Trial) -> None:
        store.record_result(trial, result(), "gpu0", False, constraints=constraints)

    without, _, _ = written(study, batched)
    count, _, _ = written(study, with_constraints)
    assert count <= without + 1, (count, without)  # one multi-row upsert of the system attributes
    running = study.get_trials()[-1]
    assert running.state.name == "RUNNING" and running.constraints == constraints
    study.tell(running.number, 1.0)
    assert study.get_trials()[-1].constraints == constraints
    with pytest.raises(ValueError, match="NaN"):
        store.record_result(study.ask(), result(), "gpu0", False, constraints={"outcome": float("nan")})


def test_constraints_on_a_storage_without_transactions_are_set_one_by_one() -> None:
    memory = optuna.create_study()
    trial = memory.ask()
    store.record_result(trial, result(), "gpu0", False, constraints={"outcome": 1.0})
    memory.tell(trial, 1.0)
    assert memory.trials[-1].constraints == {"outcome": 1.0}


def test_the_batch_upserts_and_the_cache_sees_it(study: optuna.Study) -> None:
    trial = study.ask()
    store.set_trial_attributes(trial, {"a": 1, "b": [1, 2]})
    store.set_trial_attributes(trial, {"b": {"x": None}, "c": "s"})  # b overwritten, as set_user_attr does
    expected = {"a": 1, "b": {"x": None}, "c": "s"}
    assert study.get_trials()[-1].user_attrs == expected  # running: read through Optuna's cache
    assert trial.user_attrs == expected
    study.tell(trial, 1.0)
    assert study.get_trials()[-1].user_attrs == expected  # finished: cached from here on
    with pytest.raises(UpdateFinishedTrialError):
        store.set_trial_attributes(trial, {"d": 1})
    assert "d" not in store.trial_by_number(study, trial.number).user_attrs


def test_reclaim_and_fail_waiting_write_in_one_go(study: optuna.Study) -> None:
    running = study.ask()
    assert store.reclaim(study, store.trial_id(running), "gone") is not None
    assert store.reclaim(study, store.trial_id(running), "gone again") is None  # finished: someone else's
    stored = store.trial_by_number(study, running.number)
    assert stored.state.name == "FAIL" and stored.user_attrs["reason"] == "gone"
    assert stored.user_attrs["measured"] is False


def test_in_memory_storage_falls_back_to_one_by_one() -> None:
    memory = optuna.create_study()
    count, stored, live = written(memory, batched)
    assert count == 0 and stored == live and stored["measured"] is True and stored["reason"] == "why"
    assert stored["worker_info"] == {"environment": {"gpu": "H200"}}, "side records stay user attributes"
