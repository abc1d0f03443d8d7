"""PostgreSQL storage for real: the CLI runs and reads a study on a throwaway cluster,
wrong credentials give one line without secrets, and every storage has heartbeats."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.errors import StudyError
from tuner.storage.opening import (
    GRACE_PERIOD_ENV,
    GRACE_PERIOD_S,
    HEARTBEAT_ENV,
    HEARTBEAT_INTERVAL_S,
    driver_url,
    open_storage,
)
from tuner.testing.postgres import PostgresCluster, running_postgres

pytestmark = pytest.mark.postgres
SPECS = Path(__file__).parents[1] / "specs"


def tuner(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def test_a_study_runs_and_is_read_back_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    done = tuner(
        "run",
        str(SPECS / "fake_ok.yaml"),
        "--study-name",
        "pg_ok",
        "--storage",
        postgres_url,
        "--no-mlflow",
        "--home",
        str(tmp_path / "home"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / "home" / "studies.db").exists(), "the study went to PostgreSQL, not SQLite"
    password = postgres_url.split(":")[2].split("@")[0]
    assert password not in done.stdout + done.stderr, "the storage is shown redacted"
    status = tuner("status", "pg_ok", "--storage", postgres_url, cwd=tmp_path)
    assert status.returncode == 0, status.stderr[-2000:]
    assert re.search(r"8 measured of budget 8, \d+ recorded", status.stdout), status.stdout[-2000:]
    listing = tuner("status", "--storage", postgres_url, cwd=tmp_path)
    assert listing.returncode == 0 and "pg_ok" in listing.stdout, listing.stdout + listing.stderr
    import optuna

    study = optuna.load_study(study_name="pg_ok", storage=open_storage(postgres_url, create=False))
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials) >= 8


def test_a_wrong_password_is_one_line_without_secrets(postgres_cluster: PostgresCluster, tmp_path: Path) -> None:
    wrong = "not-the-Pa55word"
    done = tuner("status", "--storage", postgres_cluster.url(user="tuner", password=wrong), cwd=tmp_path, timeout=60)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "password authentication failed" in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    for secret in (wrong, postgres_cluster.password):
        assert secret not in done.stderr + done.stdout


@pytest.mark.parametrize("database", ["missing_db", None])
def test_a_missing_database_or_server_is_one_line(postgres_cluster: PostgresCluster, database: str | None) -> None:
    url = (
        postgres_cluster.url(database)
        if database
        else postgres_cluster.url().replace(f":{postgres_cluster.port}/", ":9/")
    )  # nothing listens on port 9
    with pytest.raises(StudyError) as raised:
        open_storage(url)
    message = str(raised.value)
    assert "\n" not in message and postgres_cluster.password not in message, message
    assert ("does not exist" if database else "port 9 failed") in message, message


@pytest.mark.parametrize("scheme", ["postgresql://", "postgres://"])
def test_a_plain_postgresql_url_uses_psycopg(postgres_url: str, scheme: str, tmp_path: Path) -> None:
    plain = postgres_url.replace("postgresql+psycopg://", scheme)
    assert driver_url(plain) == postgres_url
    storage = open_storage(plain)
    assert storage.engine.url.drivername == "postgresql+psycopg"  # type: ignore[attr-defined]
    if scheme == "postgresql://":
        done = tuner("status", "--storage", plain, cwd=tmp_path, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]


def test_a_password_with_braces_and_at_signs_connects(postgres_cluster: PostgresCluster) -> None:
    postgres_cluster.create_role("braces", "p{w}@d/x%")
    url = postgres_cluster.create_database("braces_db", owner="braces")
    storage = open_storage(url.replace(f"tuner:{postgres_cluster.password}@", "braces:p%7Bw%7D%40d%2Fx%25@"))
    assert storage.get_all_studies() == []


def test_heartbeats_are_configured_on_sqlite_and_postgres(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optuna.storages._heartbeat import is_heartbeat_enabled

    for url in (postgres_url, f"sqlite:///{tmp_path / 'studies.db'}"):
        storage = open_storage(url)
        assert is_heartbeat_enabled(storage) and storage.get_heartbeat_interval() == HEARTBEAT_INTERVAL_S
        assert storage.grace_period == GRACE_PERIOD_S  # type: ignore[attr-defined]
        assert storage.engine_kwargs["pool_pre_ping"] is True  # type: ignore[attr-defined]
    monkeypatch.setenv(HEARTBEAT_ENV, "1")
    monkeypatch.setenv(GRACE_PERIOD_ENV, "5")
    storage = open_storage(postgres_url)
    assert (storage.get_heartbeat_interval(), storage.grace_period) == (1, 5)  # type: ignore[attr-defined]
    monkeypatch.setenv(GRACE_PERIOD_ENV, "soon")
    with pytest.raises(StudyError, match="TUNER_GRACE_PERIOD_S"):
        open_storage(postgres_url)


def test_a_stale_trial_is_seen_after_the_grace_period(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage half of failing a dead host's trial: a heartbeat older than the grace period is stale."""
    import time

    import optuna
    from optuna.storages._heartbeat import fail_stale_trials

    monkeypatch.setenv(HEARTBEAT_ENV, "1")
    monkeypatch.setenv(GRACE_PERIOD_ENV, "1")
    storage = open_storage(postgres_url)
    study = optuna.create_study(study_name="stale", storage=storage)
    trial = study.ask()
    storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]
    time.sleep(2.5)
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        fail_stale_trials(study)
    assert study.trials[0].state == optuna.trial.TrialState.FAIL


def test_the_pool_survives_a_server_restart(tmp_path: Path) -> None:
    """Its own cluster: restarting the shared one would break other tests' open connections."""
    import optuna

    with running_postgres(tmp_path / "pg") as cluster:
        storage = open_storage(cluster.create_database("restart"))
        optuna.create_study(study_name="restart", storage=storage)
        subprocess.run(
            cluster.as_user
            + [
                str(cluster.bindir / "pg_ctl"),
                "-D",
                str(cluster.data),
                "-l",
                str(cluster.log),
                "restart",
                "-m",
                "fast",
                "-w",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        assert optuna.load_study(study_name="restart", storage=storage).study_name == "restart"
