"""A worker frozen past the heartbeat grace period (SIGSTOP), then woken (SIGCONT), goes on.

Two ``tuner worker`` processes in their own process groups stand in for two hosts (1 s heartbeats,
4 s grace). host1's whole group is stopped while its trial runs — a frozen VM, a debugger, a
swapping host. The search trials wait at the test's gate (``TUNER_FAKE_GATE_DIR``) until host1 is
stopped, so its trial cannot end between the test seeing it in flight and the SIGSTOP, however
loaded the machine. host0 rightly fails that trial as stale and re-runs its setting. When host1 wakes,
its late result is dropped with one line naming the trial and why, and it goes on with the study:
exit 0, never an ``internal error``. On PostgreSQL and on a shared SQLite file.
"""

from __future__ import annotations

import os
import signal
import time
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

BUDGET = 7
SPEC = fake_spec("frozen_fake", BUDGET, 1.5, 2.5, gated=True)  # search trials wait at the gate


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    return study_trials(url, "frozen")


def _held_at_gate_for(host: str, gate: Path) -> bool:
    """True once a trial process of ``host`` (``TUNER_HOST`` in the environment it started with; trial processes
    run in sessions of their own) waits at the gate: its trial cannot end until the gate opens."""
    for arrival in gate.glob("arrived.*"):
        try:
            environ = Path(f"/proc/{arrival.suffix[1:]}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"TUNER_HOST={host}".encode() in environ:
            return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("storage", [pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"])
def test_a_worker_frozen_past_the_grace_period_wakes_and_goes_on(
    storage: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if storage == "postgres" else f"sqlite:///{tmp_path / 's.db'}"
    gate = tmp_path / "gate"
    gate.mkdir()
    workers = create_and_start_workers(url, tmp_path, "frozen", SPEC, 2, {"TUNER_FAKE_GATE_DIR": str(gate)})
    try:
        wait_for(lambda: _held_at_gate_for("host1", gate))
        victim = wait_for(
            lambda: next(
                (
                    t
                    for t in _trials(url)
                    if t.state.name == "RUNNING"
                    and t.user_attrs.get("role") == "search"
                    and str(t.user_attrs.get("worker", "")).startswith("host1:")
                    and t.user_attrs.get("slot")
                ),
                None,
            )
        )
        os.killpg(workers[1].pid, signal.SIGSTOP)
        (gate / "open").touch()  # host1's trial ends now, but its coordinator is frozen and cannot tell it
        wait_for(lambda: _trials(url)[victim.number].state.name == "FAIL", 120)  # host0 failed it as stale
        time.sleep(2)
        os.killpg(workers[1].pid, signal.SIGCONT)
        codes = {index: process.wait(300) for index, process in enumerate(workers)}
    finally:
        (gate / "open").touch()
        kill_leftovers(workers)
    logs = host_logs(tmp_path, 2)
    assert codes == {0: 0, 1: 0}, [log[-2500:] for log in logs]
    assert "internal error" not in logs[1] and "Traceback" not in logs[1], logs[1][-3000:]
    dropped = [line for line in logs[1].splitlines() if f"trial {victim.number}" in line and "taken over" in line]
    assert len(dropped) == 1, logs[1][-3000:]
    trials = _trials(url)
    assert trials[victim.number].user_attrs["outcome"] == "INTERRUPTED"
    rerun = [t for t in trials if t.user_attrs.get("rerun_of") == victim.number]
    assert rerun and rerun[0].state.name == "COMPLETE", "the frozen host's setting is completed by another"
    measured = [t for t in trials if t.user_attrs.get("measured")]
    assert_fleet_budget(measured, BUDGET, live_slots=2)
    keys = [t.user_attrs["candidate_key"] for t in measured]
    assert len(set(keys)) == len(keys), "no setting was measured twice"
    assert not [t.number for t in trials if t.state.name == "RUNNING"]
