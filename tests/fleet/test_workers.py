"""Three ``tuner worker`` processes share one study; one host dies mid-trial; nothing is lost or run twice.

Real processes in their own sessions (process groups), standing in for three hosts
(``TUNER_HOST``, distinct ``--gpus``), on a real PostgreSQL (and on a shared SQLite
file), with heartbeats every second and a 4 s grace period. The SIGKILLed worker's
trial is failed by the others once its heartbeat is stale, its setting re-run by
another host, and the budget is met (overshot by at most the other live slot, the fleet's contract:
``assert_fleet_budget``) with no setting measured twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from fleet_harness import (
    assert_fleet_budget,
    create_and_start_workers,
    fake_spec,
    fleet_env,
    kill_leftovers,
    study_trials,
    wait_for,
)

BUDGET = 8
SPEC = fake_spec("fleet_fake", BUDGET, 0.6, 1.5)


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    return study_trials(url, "fleet")


def _run_fleet(url: str, tmp_path: Path) -> tuple[int, dict[int, int], subprocess.CompletedProcess[str]]:
    """Create the study, start three workers, SIGKILL host1's group mid-trial, wait for the others.

    Returns (the killed trial's number, the surviving workers' exit codes by index, ``tuner status``)."""
    workers = create_and_start_workers(url, tmp_path, "fleet", SPEC, 3)
    try:
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
        os.killpg(workers[1].pid, signal.SIGKILL)  # the host dies mid-trial: worker, fork server, trial
        codes = {index: workers[index].wait(300) for index in (0, 2)}
    finally:
        kill_leftovers(workers)
    shown = subprocess.run(
        [sys.executable, "-m", "tuner", "status", "fleet", "--storage", url],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**fleet_env(), "COLUMNS": "250"},
        timeout=120,
    )
    return victim.number, codes, shown


@pytest.mark.slow
@pytest.mark.parametrize("storage", [pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"])
def test_three_workers_share_a_study_and_survive_a_dead_host(
    storage: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if storage == "postgres" else f"sqlite:///{tmp_path / 's.db'}"
    killed, codes, shown = _run_fleet(url, tmp_path)
    assert codes == {0: 0, 2: 0}, [(tmp_path / f"host{i}.log").read_text()[-2000:] for i in (0, 2)]
    trials = _trials(url)
    measured = [t for t in trials if t.user_attrs.get("measured")]
    assert_fleet_budget(measured, BUDGET, live_slots=2)  # host0 and host2, one slot each
    keys = [t.user_attrs["candidate_key"] for t in measured]
    assert len(set(keys)) == len(keys), "no setting was measured twice"
    assert trials[killed].state.name == "FAIL" and trials[killed].user_attrs["outcome"] == "INTERRUPTED"
    assert "heartbeats" in trials[killed].user_attrs["reason"], trials[killed].user_attrs["reason"]
    rerun = [t for t in trials if t.user_attrs.get("rerun_of") == killed]
    assert rerun and rerun[0].state.name == "COMPLETE", "the dead host's setting is completed by another"
    assert not str(rerun[0].user_attrs["worker"]).startswith("host1:")
    assert all(t.user_attrs.get("host") and t.user_attrs.get("slot") for t in measured)
    assert len({t.user_attrs["host"] for t in measured}) >= 2, "the work was shared"
    assert shown.returncode == 0 and "host0" in shown.stdout and "host2" in shown.stdout, shown.stdout[-3000:]
