"""Storage outages are waited out for a bounded time: what counts as transient, what the user hears,
and which writes are safe to repeat (real SQLite storages, real driver exception types)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import psycopg
import pytest
from optuna.exceptions import StorageInternalError, UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import TrialState
from sqlalchemy.exc import IntegrityError, OperationalError

from tuner.storage import outage
from tuner.storage.coordination.claims import Claims
from tuner.storage.coordination.heartbeats import stale_trial_ids
from tuner.storage.opening import open_storage
from tuner.storage.outage import (
    StorageMisconfigured,
    StorageUnavailable,
    call_through_outage,
    is_transient,
    misconfiguration,
)


def _wrapped(driver_error: Exception) -> StorageInternalError:
    """How Optuna's RDB storage raises a driver error: StorageInternalError <- SQLAlchemy <- driver."""
    try:
        try:
            raise OperationalError("SELECT 1", {}, driver_error)  # type: ignore[arg-type]
        except OperationalError as sqlalchemy_error:
            raise StorageInternalError("An exception is raised during the commit.") from sqlalchemy_error
    except StorageInternalError as error:
        return error


@pytest.fixture(autouse=True)
def heard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    lines: list[str] = []
    outage.set_reporter(lines.append)
    monkeypatch.setattr(outage, "FIRST_WAIT_S", 0.01)
    monkeypatch.setattr(outage, "LONGEST_WAIT_S", 0.05)
    yield lines
    outage.set_reporter(None)


def test_connection_level_errors_are_transient_and_request_errors_are_not() -> None:
    refused = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5 failed: Connection refused'
    )
    assert is_transient(_wrapped(refused))
    assert is_transient(_wrapped(psycopg.errors.AdminShutdown("terminating connection due to administrator command")))
    assert is_transient(_wrapped(psycopg.errors.CannotConnectNow("the database system is shutting down")))
    assert not is_transient(_wrapped(sqlite3.OperationalError("database is locked")))  # its busy timeout waited
    assert not is_transient(_wrapped(psycopg.errors.UndefinedTable('relation "trials" does not exist')))
    assert not is_transient(_wrapped(sqlite3.OperationalError("no such table: trials")))
    assert not is_transient(IntegrityError("INSERT", {}, psycopg.errors.UniqueViolation("duplicate key")))
    assert not is_transient(ValueError("Cannot tell a COMPLETE trial."))
    assert not is_transient(StorageUnavailable("the storage stayed unreachable for 120 s"))


CONNECT = 'connection failed: connection to server at "127.0.0.1", port 5432 failed: '  # psycopg's connect preamble


def test_a_server_starting_up_is_waited_for_and_a_refusal_is_not() -> None:
    """psycopg gives a failed connect no SQLSTATE: its words decide (as a real server says them; the real
    server's own refusals are tests/fleet/test_storage_misconfiguration.py's)."""
    for words in (
        "FATAL:  the database system is starting up",
        "FATAL:  the database system is shutting down",
        "FATAL:  sorry, too many clients already",
        "Connection refused",
    ):
        assert is_transient(_wrapped(psycopg.OperationalError(CONNECT + words))), words
        assert misconfiguration(_wrapped(psycopg.OperationalError(CONNECT + words))) is None, words
    refusals = {
        'FATAL:  password authentication failed for user "tuner"': "refused the login",
        'FATAL:  no pg_hba.conf entry for host "10.0.0.7", user "tuner", database "db", no encryption': "refused the login",
        "fe_sendauth: no password supplied": "refused the login",
        'FATAL:  role "tuner" is not permitted to log in': "refused the login",
        'FATAL:  role "nobody" does not exist': "refused the login",
        'FATAL:  database "db" does not exist': "has no such database",
        'FATAL:  permission denied for database "db"': "denied a permission",
    }
    for words, problem in refusals.items():
        error = _wrapped(psycopg.OperationalError(CONNECT + words))
        assert not is_transient(error), words
        said = misconfiguration(error) or ""
        assert said.startswith(f"{problem}: ") and "FATAL" not in said and "connection to server" not in said, said
    denied = _wrapped(psycopg.errors.InsufficientPrivilege("permission denied for table trials"))
    assert misconfiguration(denied) == "denied a permission: permission denied for table trials"
    assert misconfiguration(_wrapped(psycopg.errors.InvalidPassword("password authentication failed")))
    assert misconfiguration(_wrapped(psycopg.errors.UndefinedTable('relation "trials" does not exist'))) is None


def test_a_refusal_ends_an_outage_at_once_with_the_stop(heard: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The password changed and the old sessions terminated: the lost connection is waited for, the refused
    login that follows is not — one StorageMisconfigured, no "back" line, long before the bound."""
    monkeypatch.setenv(outage.OUTAGE_BOUND_ENV, "120")
    errors = [
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.OperationalError(CONNECT + 'FATAL:  password authentication failed for user "tuner"'),
    ]
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise _wrapped(errors[min(len(calls), 2) - 1])

    with pytest.raises(StorageMisconfigured) as raised:
        call_through_outage(refused)
    assert calls == [1, 1]
    assert str(raised.value) == 'the storage refused the login: password authentication failed for user "tuner"'
    assert len(heard) == 1 and "unreachable" in heard[0], heard
    assert not outage.recovered_within(0), "the outage is over: the process stops"
    assert misconfiguration(raised.value) == raised.value.problem  # a caller naming the storage reads it back


def test_a_call_is_retried_until_the_storage_is_back_and_the_outage_is_said_once(heard: list[str]) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) <= 4:
            raise _wrapped(psycopg.errors.AdminShutdown("terminating connection due to administrator command"))
        return "rows"

    assert call_through_outage(flaky) == "rows"
    assert len(calls) == 5
    assert len(heard) == 2, heard
    assert "unreachable" in heard[0] and "AdminShutdown" in heard[0] and "TUNER_STORAGE_OUTAGE_S" in heard[0]
    assert heard[1].startswith("the storage is back after")
    assert outage.recovered_within(60)


def test_past_the_bound_the_call_stops_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(outage.OUTAGE_BOUND_ENV, "0.3")
    calls: list[int] = []

    def away() -> None:
        calls.append(1)
        raise _wrapped(psycopg.OperationalError("connection failed: Connection refused"))

    with pytest.raises(StorageUnavailable) as raised:
        call_through_outage(away)
    message = str(raised.value)
    assert "stayed unreachable" in message and "TUNER_STORAGE_OUTAGE_S=0" in message and "Connection refused" in message
    assert "\n" not in message
    assert len(calls) >= 2


def test_other_errors_are_raised_at_once_and_nested_calls_retry_only_outermost() -> None:
    calls: list[int] = []

    def wrong() -> None:
        calls.append(1)
        raise _wrapped(psycopg.errors.UndefinedTable('relation "trials" does not exist'))

    with pytest.raises(StorageInternalError):
        call_through_outage(wrong)
    assert calls == [1]
    inner: list[int] = []

    def outer() -> str:
        def once() -> None:
            inner.append(1)
            if len(inner) == 1:
                raise _wrapped(psycopg.OperationalError("server closed the connection unexpectedly"))

        call_through_outage(once)  # nested: raises straight to the outer retry
        return "done"

    assert call_through_outage(outer) == "done"
    assert inner == [1, 1]


def test_the_outage_bound_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(outage.OUTAGE_BOUND_ENV, raising=False)
    assert outage.outage_bound_s() == 120.0
    monkeypatch.setenv(outage.OUTAGE_BOUND_ENV, "0")
    assert outage.outage_bound_s() == 0.0
    for bad in ("soon", "-1", "inf"):
        monkeypatch.setenv(outage.OUTAGE_BOUND_ENV, bad)
        with pytest.raises(Exception, match="TUNER_STORAGE_OUTAGE_S"):
            outage.outage_bound_s()


def test_a_state_change_whose_commit_landed_before_the_connection_dropped_counts_as_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask()
    real = RDBStorage.set_trial_state_values
    dropped: list[int] = []

    def commit_then_drop(self: Any, trial_id: int, state: TrialState, values: Any = None) -> bool:
        done = real(self, trial_id, state, values)
        if not dropped:
            dropped.append(trial_id)  # the server committed; the client never heard back
            raise _wrapped(psycopg.OperationalError("consuming input failed: server closed the connection"))
        return done

    monkeypatch.setattr(RDBStorage, "set_trial_state_values", commit_then_drop)
    study.tell(trial, 1.5)
    assert dropped and study.trials[0].state is TrialState.COMPLETE and study.trials[0].value == 1.5
    other = study.ask()
    storage.set_trial_state_values(other._trial_id, TrialState.FAIL)  # someone else finished it
    with pytest.raises(UpdateFinishedTrialError):
        storage.set_trial_state_values(other._trial_id, TrialState.COMPLETE, [2.0])


def test_a_claim_found_held_by_the_claiming_trial_is_its_own(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    claims = Claims(storage.engine, "s")
    assert claims.claim("key", 5) is None
    assert claims.claim("key", 5) is None, "a retried insert that had landed finds its own claim"
    assert claims.claim("key", 6) == 5


def test_after_an_outage_nobody_is_stale_for_one_grace_period(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_HEARTBEAT_S", "1")
    monkeypatch.setenv("TUNER_GRACE_PERIOD_S", "1")
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask()
    trial.set_user_attr("worker", "elsewhere:1")
    study._storage.record_heartbeat(trial._trial_id)
    time.sleep(2.5)  # the heartbeat is older than the grace period
    assert trial._trial_id in stale_trial_ids(study)
    attempts: list[int] = []

    def back_on_second() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise _wrapped(psycopg.OperationalError("connection failed: Connection refused"))

    call_through_outage(back_on_second)  # an outage just ended: no coordinator could beat during it
    assert trial._trial_id not in stale_trial_ids(study)
    monkeypatch.setattr(outage._STATE, "recovered_at", time.monotonic() - 10)  # one grace period later
    assert trial._trial_id in stale_trial_ids(study)
