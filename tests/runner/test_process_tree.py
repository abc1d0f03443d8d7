"""A trial's whole process tree dies with the trial, with the coordinator and with runner.close().

Real processes and real signals: the trial's program (see ``process_tree_helpers.SPAWNER``)
starts a child in the worker's process group, one in a new session (as torchrun starts its
ranks) and a daemonised one re-parented to init, then hangs, exits or kills its worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
from process_tree_helpers import (
    ROOT,
    alive,
    describe,
    make_runner,
    processes,
    spawner_request,
    wait_all_dead,
    wait_for_pids,
    write_spawner,
)

from tuner.results import Outcome, TrialResult
from tuner.runner.base import Slot

KINDS = ["fork", "exec", "warm"]
SLOT = Slot(0, None, 1)


def _run_in_thread(runner: Any, request: Any) -> tuple[threading.Thread, list[TrialResult]]:
    results: list[TrialResult] = []
    thread = threading.Thread(target=lambda: results.append(runner.run(request, SLOT)), daemon=True)
    thread.start()
    return thread, results


@pytest.mark.parametrize(
    ("kind", "signum"),
    [
        ("fork", signal.SIGKILL),
        ("exec", signal.SIGKILL),
        ("warm", signal.SIGKILL),
        ("fork", signal.SIGTERM),
        ("warm", signal.SIGTERM),
    ],
    ids=["fork-SIGKILL", "exec-SIGKILL", "warm-SIGKILL", "fork-SIGTERM", "warm-SIGTERM"],
)
def test_the_trial_tree_dies_with_a_killed_coordinator(kind: str, signum: int, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids.json"
    driver = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "runner" / "process_tree_helpers.py"), kind, str(tmp_path), str(pidfile)],
        cwd=ROOT,
    )
    try:
        pids = wait_for_pids(pidfile)
        tree = processes(list(pids.values()) + [p.pid for p in psutil.Process(driver.pid).children(recursive=True)])
        assert len(alive(tree)) >= 5, describe(tree)
        driver.send_signal(signum)
        driver.wait(30)
        survivors = wait_all_dead(tree)
        assert not survivors, f"outlived the coordinator: {describe(survivors)}"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)


@pytest.mark.parametrize("kind", KINDS)
def test_what_a_trial_leaves_running_dies_when_it_ends(kind: str, tmp_path: Path) -> None:
    runner = make_runner(kind)
    try:
        spawner = write_spawner(tmp_path)
        result = runner.run(spawner_request(tmp_path / "trial", spawner, tmp_path / "pids.json", "leave"), SLOT)
        assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-800:])
        pids = wait_for_pids(tmp_path / "pids.json")
        left = processes([pids[name] for name in ("in_group", "new_session", "orphan")])
        survivors = alive(left)  # no waiting: gone by the time run() returned
        assert not survivors, f"left behind by the trial: {describe(survivors)}"
        if kind == "warm":
            assert alive(processes([pids["worker"]])), "an OK trial keeps its warm worker"
    finally:
        runner.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_timeout_kills_the_whole_tree(kind: str, tmp_path: Path) -> None:
    runner = make_runner(kind)
    try:
        spawner = write_spawner(tmp_path)
        request = spawner_request(tmp_path / "trial", spawner, tmp_path / "pids.json", "hang", timeout_s=8.0)
        result = runner.run(request, SLOT)
        assert result.outcome is Outcome.TIMEOUT, (result.reason, result.log_tail[-800:])
        pids = wait_for_pids(tmp_path / "pids.json", timeout_s=1)
        survivors = alive(processes(list(pids.values())))
        assert not survivors, f"outlived the timeout: {describe(survivors)}"
    finally:
        runner.close()


@pytest.mark.parametrize("kind", KINDS)
def test_close_kills_in_flight_trials_promptly(kind: str, tmp_path: Path) -> None:
    runner = make_runner(kind)
    spawner = write_spawner(tmp_path)
    thread, results = _run_in_thread(
        runner, spawner_request(tmp_path / "trial", spawner, tmp_path / "pids.json", "hang")
    )
    try:
        pids = wait_for_pids(tmp_path / "pids.json")
        tree = processes(list(pids.values()))
        runner.close()
        thread.join(60)  # the trial hangs forever: only close() can end it
        assert not thread.is_alive(), "run() must return once the runner is closed"
        assert not alive(tree), f"outlived close(): {describe(alive(tree))}"
        assert results[0].outcome is Outcome.CRASH and "runner was closed" in str(results[0].reason), results[0]
    finally:
        runner.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_killed_from_outside_is_a_crash_not_an_oom(kind: str, tmp_path: Path) -> None:
    runner = make_runner(kind)
    try:
        spawner = write_spawner(tmp_path)
        thread, results = _run_in_thread(
            runner, spawner_request(tmp_path / "trial", spawner, tmp_path / "pids.json", "hang")
        )
        pids = wait_for_pids(tmp_path / "pids.json")
        os.kill(pids["worker"], signal.SIGKILL)
        thread.join(60)
        result = results[0]
        assert result.outcome is Outcome.CRASH, (result.outcome, result.reason)
        assert "SIGKILL" in str(result.reason) and "not sent by the tuner" in str(result.reason), result.reason
        survivors = alive(processes(list(pids.values())))
        assert not survivors, f"outlived its dead worker: {describe(survivors)}"
    finally:
        runner.close()


@pytest.mark.parametrize("kind", ["fork", "warm"])
def test_an_oom_kill_counted_by_the_cgroup_is_oom(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = tmp_path / "memory.events"  # stands in for the kernel's cgroup file
    events.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    monkeypatch.setenv("TUNER_MEMORY_EVENTS", str(events))
    runner = make_runner(kind)
    try:
        spawner = write_spawner(tmp_path)
        result = runner.run(spawner_request(tmp_path / "trial", spawner, tmp_path / "pids.json", "oom_worker"), SLOT)
        assert result.outcome is Outcome.OOM, (result.outcome, result.reason)
        assert "OOM killer killed 1 process" in str(result.reason) and "oom_kill" in str(result.reason)
    finally:
        runner.close()


def test_a_dead_fork_server_is_named_as_the_cause(tmp_path: Path) -> None:
    from tuner.runner.subprocess import SubprocessRunner

    runner = SubprocessRunner("fork")
    try:
        spawner = write_spawner(tmp_path)
        thread, results = _run_in_thread(
            runner, spawner_request(tmp_path / "trial", spawner, tmp_path / "pids.json", "hang")
        )
        pids = wait_for_pids(tmp_path / "pids.json")
        tree = processes(list(pids.values()))  # handles now: a pid reused later is not mistaken for the trial's
        server = psutil.Process(pids["worker"]).ppid()
        os.kill(server, signal.SIGKILL)
        thread.join(60)
        result = results[0]
        assert result.outcome is Outcome.CRASH
        assert "the fork server died while the trial ran (killed by signal SIGKILL)" in str(result.reason), (
            result.reason
        )
        # SIGKILLed when run() returns; on a loaded host the kernel may still be tearing one down
        survivors = wait_all_dead(tree)
        assert not survivors, f"outlived the trial: {describe(survivors)}"
        again = runner.run(spawner_request(tmp_path / "next", spawner, tmp_path / "pids2.json", "leave"), SLOT)
        assert again.outcome is Outcome.OK, "the next trial starts a new fork server"
    finally:
        runner.close()
