"""Two ``tuner worker`` processes on one PostgreSQL study ride through what a database does in real life.

A real cluster of its own (this module restarts it), real worker processes in their own process
groups standing in for two hosts, 1 s heartbeats and a 4 s grace period:

- ``pg_ctl restart -m fast`` mid-study, and the server down for 20 s (mid-study by construction: the search
  trials wait at the test's gate, ``TUNER_FAKE_GATE_DIR``, until the server is back): both workers wait, say so once,
  go on when it is back, and the study reaches its budget with nothing left RUNNING, each setting
  measured once;
- the server down past the outage bound (``TUNER_STORAGE_OUTAGE_S``): each worker stops with the one
  line of a storage stop (exit 2, no traceback), and every trial measured before is still there.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from fleet_harness import (
    assert_fleet_budget,
    create_and_start_workers,
    fake_spec,
    host_logs,
    kill_leftovers,
    study_trials,
    wait_for,
)

from tuner.testing.postgres import PostgresCluster, PostgresNotInstalled, postgres_bindir, running_postgres

BUDGET = 10
SPEC = fake_spec("outage_fake", BUDGET, 1.0, 2.0, gated=True)  # search trials wait at the test's gate

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    """A cluster only this module uses: its tests restart and stop it."""
    try:
        postgres_bindir()
    except PostgresNotInstalled as error:
        pytest.skip(str(error))
    with running_postgres(tmp_path_factory.mktemp("pg_outage")) as cluster:
        yield cluster


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    return study_trials(url, "outage")


def _measured(url: str) -> int:
    return sum(1 for t in _trials(url) if t.user_attrs.get("measured"))


def _start_workers(url: str, tmp_path: Path, extra_env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    """Two workers on the study; its search trials wait at the gate ``tmp_path/gate`` until :func:`_open_gate`."""
    (tmp_path / "gate").mkdir(exist_ok=True)
    return create_and_start_workers(
        url, tmp_path, "outage", SPEC, 2, {"TUNER_FAKE_GATE_DIR": str(tmp_path / "gate"), **extra_env}
    )


def _search_trial_in_flight(tmp_path: Path) -> bool:
    """True once a search trial's run has reached the gate: it is in flight, and stays so until the gate opens."""
    return any((tmp_path / "gate").glob("arrived.*"))


def _open_gate(tmp_path: Path) -> None:
    (tmp_path / "gate" / "open").touch()


def _finish(workers: list[subprocess.Popen[bytes]], timeout_s: float = 300) -> dict[int, int]:
    try:
        return {index: process.wait(timeout_s) for index, process in enumerate(workers)}
    finally:
        kill_leftovers(workers)


@pytest.mark.parametrize("event", ["restart", "down_20s"])
def test_a_fleet_rides_through_a_database_restart(event: str, own_cluster: PostgresCluster, tmp_path: Path) -> None:
    url = own_cluster.create_database(f"outage_{event}")
    workers = _start_workers(url, tmp_path, {})
    try:
        wait_for(lambda: _measured(url) >= 1)  # the reference, which the gate lets through
        wait_for(lambda: _search_trial_in_flight(tmp_path))  # held at the gate: the outage comes mid-study
        if event == "restart":
            own_cluster.restart("fast")
        else:
            own_cluster.shut_down("fast")
            time.sleep(20)
            own_cluster.start_again()
        assert _measured(url) < BUDGET, "the outage came mid-study"
        _open_gate(tmp_path)
    except BaseException:
        _open_gate(tmp_path)
        _finish(workers, 1)
        raise
    codes = _finish(workers)
    logs = host_logs(tmp_path, 2)
    assert codes == {0: 0, 1: 0}, [log[-2500:] for log in logs]
    trials = _trials(url)
    assert not [t.number for t in trials if t.state.name == "RUNNING"], "nothing is left RUNNING"
    assert not [t.number for t in trials if t.user_attrs.get("outcome") == "INTERRUPTED"], (
        "no live worker's trial was taken for stale because nobody could beat during the outage"
    )
    measured = [t for t in trials if t.user_attrs.get("measured")]
    assert_fleet_budget(measured, BUDGET, live_slots=2)
    keys = [t.user_attrs["candidate_key"] for t in measured]
    assert len(set(keys)) == len(keys), "no setting was measured twice"
    assert all(t.user_attrs.get("outcome") == "OK" for t in measured), [t.user_attrs.get("reason") for t in measured]
    said = "\n".join(logs)
    if event == "down_20s":  # a restart of a second may fall between two storage calls: a silent reconnect then
        assert "the storage is unreachable" in said and "the storage is back after" in said, said[-3000:]
    assert said.count("the storage is unreachable") == said.count("the storage is back after"), said[-3000:]
    for log in logs:
        assert log.count("the storage is unreachable") <= 2, "said once per outage, not once per retry"
        assert "Traceback" not in log and "internal error" not in log, log[-3000:]


def test_a_fleet_stops_with_one_line_when_the_database_stays_away(own_cluster: PostgresCluster, tmp_path: Path) -> None:
    url = own_cluster.create_database("outage_bound")
    workers = _start_workers(url, tmp_path, {"TUNER_STORAGE_OUTAGE_S": "6"})
    try:
        wait_for(lambda: _measured(url) >= 1 and _search_trial_in_flight(tmp_path))
        own_cluster.shut_down("fast")
        _open_gate(tmp_path)
        codes = _finish(workers, 120)
    finally:
        if not (own_cluster.data / "postmaster.pid").exists():
            own_cluster.start_again()
    logs = host_logs(tmp_path, 2)
    assert codes == {0: 2, 1: 2}, [log[-2500:] for log in logs]
    for log in logs:
        assert "storage error, the study stopped" in log and "stayed unreachable" in log, log[-2500:]
        assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    trials = _trials(url)
    assert sum(1 for t in trials if t.user_attrs.get("measured")) >= 1, "every trial measured before is kept"
