"""A storage that refuses the tuner is a misconfiguration, not an outage: it stops at once, in one line.

A changed password, an unknown role or database, a permission revoked: no amount of waiting mends
them, so they are never waited out as "unreachable" (``TUNER_STORAGE_OUTAGE_S``, set to its default of
120 s here so that the bound itself tells the two apart). Real PostgreSQL (the session's cluster,
``conftest.py``; its TCP logins use SCRAM passwords), a login role and database of each test's own,
the driver's real exceptions and real ``tuner worker`` processes. That a restart is still waited out
is ``test_storage_outages.py``'s.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import optuna
import psycopg
import pytest
from fleet_harness import (
    create_and_start_workers,
    fake_spec,
    fleet_env,
    host_logs,
    kill_leftovers,
    study_trials,
    wait_for,
)

from tuner.host import free_port
from tuner.storage.opening import close_storage, open_storage
from tuner.storage.outage import OUTAGE_BOUND_ENV, StorageMisconfigured, is_transient, misconfiguration
from tuner.testing.postgres import PostgresCluster

pytestmark = [pytest.mark.postgres]
BOUND_S = 120  # the outage bound the workers run with: a misconfiguration must stop them well before it
STOP_WITHIN_S = 90  # generous: a stop takes seconds; waiting the misconfiguration out would take BOUND_S


class Tenant:
    """A login role with a password and a database it owns, of one test (names unique in the session)."""

    def __init__(self, cluster: PostgresCluster) -> None:
        self.cluster = cluster
        self.role = f"r_{uuid.uuid4().hex[:10]}"
        self.password = f"pw-{uuid.uuid4().hex}"
        self.database = f"db_{uuid.uuid4().hex[:10]}"
        cluster.create_role(self.role, self.password)
        cluster.create_database(self.database, owner=self.role)

    def url(self, password: str | None = None, database: str | None = None) -> str:
        return self.cluster.url(database or self.database, self.role, password or self.password)

    def connect(self, password: str | None = None, database: str | None = None, role: str | None = None) -> None:
        psycopg.connect(
            host="127.0.0.1",
            port=self.cluster.port,
            user=role or self.role,
            password=password or self.password,
            dbname=database or self.database,
            connect_timeout=10,
        ).close()

    def cut_off(self) -> None:
        """End every session of the role: its processes must log in again."""
        self.cluster.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{self.role}'")

    def change_password(self) -> None:
        self.cluster.execute(f"ALTER ROLE {self.role} PASSWORD 'changed-{uuid.uuid4().hex}'")
        self.cut_off()

    def drop_database(self) -> None:
        self.cluster.execute(f"DROP DATABASE {self.database} WITH (FORCE)")

    def refuse(self, event: str) -> None:
        """What an operator does mid-study: ``password_changed`` or ``database_dropped``."""
        if event == "password_changed":
            self.change_password()
        else:
            self.drop_database()


@pytest.fixture
def tenant(postgres_cluster: PostgresCluster) -> Tenant:
    return Tenant(postgres_cluster)


@pytest.fixture
def bound_of_120_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OUTAGE_BOUND_ENV, str(BOUND_S))


def _raised(call: Callable[..., object], *args: object, **kwargs: object) -> BaseException:
    try:
        call(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the error is what the test is about
        return error
    raise AssertionError(f"{call} raised nothing")


def test_the_servers_refusals_are_misconfiguration_and_a_server_away_is_an_outage(tenant: Tenant) -> None:
    refusals = {
        "wrong password": _raised(tenant.connect, password="not-the-password"),
        "unknown role": _raised(tenant.connect, role="nobody_here"),
        "unknown database": _raised(tenant.connect, database="no_such_db"),
    }
    for what, error in refusals.items():
        assert isinstance(error, psycopg.OperationalError) and getattr(error, "sqlstate", None) is None, (what, error)
        assert not is_transient(error), f"{what} is waited out as an outage: {error}"
        assert misconfiguration(error), f"{what} is not named a misconfiguration: {error}"
    assert "refused the login" in (misconfiguration(refusals["wrong password"]) or "")
    assert 'database "no_such_db" does not exist' in (misconfiguration(refusals["unknown database"]) or "")
    tenant.cluster.execute("CREATE TABLE IF NOT EXISTS superuser_only (x int)")
    with psycopg.connect(
        host="127.0.0.1",
        port=tenant.cluster.port,
        user=tenant.role,
        password=tenant.password,
        dbname="postgres",
        connect_timeout=10,
    ) as connection:
        denied = _raised(connection.execute, "SELECT * FROM superuser_only")
    assert getattr(denied, "sqlstate", None) == "42501" and not is_transient(denied)
    assert "permission denied" in (misconfiguration(denied) or "")
    away = _raised(
        psycopg.connect,
        host="127.0.0.1",
        port=free_port(),
        user=tenant.role,
        password=tenant.password,
        dbname=tenant.database,
        connect_timeout=10,
    )
    assert is_transient(away) and misconfiguration(away) is None, away  # a server not (yet) listening: waited out


def test_opening_a_storage_that_refuses_the_login_says_so_in_one_line(tenant: Tenant) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    with pytest.raises(StorageMisconfigured) as raised:
        open_storage(tenant.url(password=wrong))
    message = str(raised.value)
    assert message.startswith(f"storage postgresql+psycopg://{tenant.role}:***@127.0.0.1:{tenant.cluster.port}/"), (
        message
    )
    assert f'refused the login: password authentication failed for user "{tenant.role}"' in message, message
    assert "\n" not in message and wrong not in message and tenant.password not in message, message
    with pytest.raises(StorageMisconfigured, match='database "no_such_db" does not exist'):
        open_storage(tenant.url(database="no_such_db"))


@pytest.mark.parametrize("event", ["password_changed", "database_dropped"])
def test_a_storage_call_stops_at_once_when_the_storage_refuses_mid_study(
    event: str, tenant: Tenant, bound_of_120_s: None
) -> None:
    storage = open_storage(tenant.url())
    try:
        optuna.create_study(storage=storage, study_name="s").ask()
        tenant.refuse(event)
        with pytest.raises(StorageMisconfigured) as raised:  # waited out, it would end as StorageUnavailable
            storage.get_all_studies()  # its pooled connection is gone: it must log in again
    finally:
        close_storage(storage)
    expected = "refused the login" if event == "password_changed" else f'database "{tenant.database}" does not exist'
    assert expected in str(raised.value) and tenant.password not in str(raised.value), raised.value


def _exit_codes_within(workers: list[subprocess.Popen[bytes]], seconds: float) -> dict[int, int | None]:
    """Each worker's exit status, or None for one still running ``seconds`` from now."""
    deadline = time.monotonic() + seconds
    codes: dict[int, int | None] = {}
    for index, process in enumerate(workers):
        try:
            codes[index] = process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            codes[index] = None
    return codes


@pytest.mark.slow
@pytest.mark.parametrize("event", ["password_changed", "database_dropped"])
def test_a_fleet_stops_with_one_line_when_the_storage_refuses_mid_study(
    event: str, tenant: Tenant, tmp_path: Path
) -> None:
    superuser_url = tenant.cluster.url(tenant.database)  # the test's own view, still allowed in after the change
    (tmp_path / "gate").mkdir()
    workers = create_and_start_workers(
        tenant.url(),
        tmp_path,
        "refused",
        fake_spec("refused_fake", 10, 1.0, 2.0, True),
        2,
        {"TUNER_FAKE_GATE_DIR": str(tmp_path / "gate"), OUTAGE_BOUND_ENV: str(BOUND_S)},
    )
    try:
        wait_for(
            lambda: (
                any(t.user_attrs.get("measured") for t in study_trials(superuser_url, "refused"))
                and any((tmp_path / "gate").glob("arrived.*"))
            )
        )  # the reference measured, a search trial in flight
        tenant.refuse(event)
        (tmp_path / "gate" / "open").touch()
        codes = _exit_codes_within(workers, STOP_WITHIN_S)
    finally:
        (tmp_path / "gate" / "open").touch()
        kill_leftovers(workers)
    logs = host_logs(tmp_path, 2)
    assert None not in codes.values(), (
        f"a worker still ran {STOP_WITHIN_S} s after the storage refused it: waited out as an outage",
        [log[-2000:] for log in logs],
    )
    assert codes == {0: 2, 1: 2}, [log[-2500:] for log in logs]
    expected = (
        "refused the login: password authentication failed"
        if event == "password_changed"
        else f'database "{tenant.database}" does not exist'
    )
    for log in logs:
        errors = [line for line in log.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and expected in errors[0], log[-2500:]
        assert f"postgresql+psycopg://{tenant.role}:***@" in errors[0] and "stayed unreachable" not in log, errors[0]
        assert "Traceback" not in log and "internal error" not in log and tenant.password not in log, log[-3000:]


def test_a_worker_started_on_a_refusing_storage_stops_at_once(tenant: Tenant, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "worker",
            "--storage",
            tenant.url(password="wrong-pw"),
            "--no-mlflow",
            "--once",
            "--home",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=STOP_WITHIN_S,
        env={**fleet_env({OUTAGE_BOUND_ENV: str(BOUND_S)}), "TUNER_STORAGE": ""},
    )
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: storage postgresql+psycopg://"), done.stderr
    assert "refused the login" in lines[0] and "wrong-pw" not in done.stdout + done.stderr, lines
    assert "Traceback" not in done.stderr
