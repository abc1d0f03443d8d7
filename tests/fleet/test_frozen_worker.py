"""A worker frozen past the heartbeat grace period (SIGSTOP), then woken (SIGCONT), goes on.

Two ``tuner worker`` processes in their own process groups stand in for two hosts (1 s heartbeats,
4 s grace). host1's whole group is stopped while its trial runs — a frozen VM, a debugger, a
swapping host. host0 rightly fails that trial as stale and re-runs its setting. When host1 wakes,
its late result is dropped with one line naming the trial and why, and it goes on with the study:
exit 0, never an ``internal error``. On PostgreSQL and on a shared SQLite file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import optuna
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 7
SPEC = """name: frozen_fake
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 120
parameters:
  sleep_s: {type: float, low: 1.5, high: 2.5, step: 0.05}
  noise: {type: int, low: 0, high: 40, step: 5}
objectives:
  - {metric: latency_p50_s, direction: minimize}
reference: {sleep_s: 1.5, noise: 0}
measurement: {warmup: 0, min_repeats: 1, max_repeats: 1}
budget: {trials: %d}
""" % BUDGET


def _wait_for(condition: Callable[[], Any], timeout_s: float = 240.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("timed out waiting")


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="frozen", storage=url).get_trials(deepcopy=False)


@pytest.mark.slow
@pytest.mark.parametrize("storage", [pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"])
def test_a_worker_frozen_past_the_grace_period_wakes_and_goes_on(storage: str, tmp_path: Path,
                                                                  request: pytest.FixtureRequest) -> None:
    import tuner

    url = request.getfixturevalue("postgres_url") if storage == "postgres" else f"sqlite:///{tmp_path / 's.db'}"
    spec = tmp_path / "frozen.yaml"
    spec.write_text(SPEC)
    tuner.create_study(spec, study_name="frozen", storage=url, home=tmp_path / "creator")
    env = {**os.environ, "TUNER_HEARTBEAT_S": "1", "TUNER_GRACE_PERIOD_S": "4",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    workers = [subprocess.Popen([sys.executable, "-m", "tuner", "worker", "frozen", "--storage", url, "--gpus", str(i),
                                 "--no-mlflow", "--home", str(tmp_path / f"host{i}")],
                                env={**env, "TUNER_HOST": f"host{i}"}, start_new_session=True, cwd=tmp_path,
                                stdout=open(tmp_path / f"host{i}.log", "wb"), stderr=subprocess.STDOUT)
               for i in range(2)]
    try:
        victim = _wait_for(lambda: next((t for t in _trials(url) if t.state.name == "RUNNING"
                                         and t.user_attrs.get("role") == "search"
                                         and str(t.user_attrs.get("worker", "")).startswith("host1:")
                                         and t.user_attrs.get("slot")), None))
        os.killpg(workers[1].pid, signal.SIGSTOP)
        _wait_for(lambda: _trials(url)[victim.number].state.name == "FAIL", 120)  # host0 failed it as stale
        time.sleep(2)
        os.killpg(workers[1].pid, signal.SIGCONT)
        codes = {index: process.wait(300) for index, process in enumerate(workers)}
    finally:
        for process in workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
    logs = [(tmp_path / f"host{i}.log").read_text(errors="replace") for i in range(2)]
    assert codes == {0: 0, 1: 0}, [log[-2500:] for log in logs]
    assert "internal error" not in logs[1] and "Traceback" not in logs[1], logs[1][-3000:]
    dropped = [line for line in logs[1].splitlines() if f"trial {victim.number}" in line and "taken over" in line]
    assert len(dropped) == 1, logs[1][-3000:]
    trials = _trials(url)
    assert trials[victim.number].user_attrs["outcome"] == "INTERRUPTED"
    rerun = [t for t in trials if t.user_attrs.get("rerun_of") == victim.number]
    assert rerun and rerun[0].state.name == "COMPLETE", "the frozen host's setting is completed by another"
    measured = [t for t in trials if t.user_attrs.get("measured")]
    assert len(measured) == BUDGET
    keys = [t.user_attrs["candidate_key"] for t in measured]
    assert len(set(keys)) == len(keys), "no setting was measured twice"
    assert not [t.number for t in trials if t.state.name == "RUNNING"]
