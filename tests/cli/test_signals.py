"""Real processes, real signals: SIGINT / SIGTERM to ``tuner run`` and its whole process group.

A terminal's Ctrl-C sends SIGINT to the foreground process group: the coordinator and any child
left in its group (the fork server was, and printed ``KeyboardInterrupt`` with its stack). A
service manager or ``kill`` sends SIGTERM, to the group or to the coordinator alone. In every case
the study stops like after Ctrl-C: no new trials, trials in flight recorded INTERRUPTED and queued
again, the same words, one line naming ``tuner resume``, exit status 130, no traceback from any
process, and no process of the tuner left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest

from test_study_faults import trials_of, wait_for

SPEC = """\
name: signals
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 120
  timeout_mode: fixed
  worker: {worker}
inputs:
  note: simulated
parameters:
  sleep_s: {{type: float, low: 2.5, high: 3.5, step: 0.5}}
  noise: {{type: int, low: 0, high: 40, step: 5}}
objectives:
  - {{metric: latency_p50_s, direction: minimize}}
  - {{metric: psnr_db, direction: maximize}}
reference: {{sleep_s: 2.5, noise: 0}}
measurement: {{warmup: 0, min_repeats: 3, max_repeats: 3}}
budget: {{trials: 12}}
"""
# Search trials take 7.5-10.5 s (three runs of 2.5-3.5 s): longer than the coordinator's grace after an
# interrupt, so the trials in flight are killed and must be recorded INTERRUPTED and queued again.

MARK = "TUNER_SIGNAL_TEST_MARK"
"""An environment variable every process of the tuner under test inherits: how the test finds them."""


def _marked_pids(mark: str) -> list[int]:
    """Pids of living processes whose environment holds ``MARK=mark`` (zombies show none)."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _start(tmp_path: Path, worker: str, mark: str, *command: str) -> subprocess.Popen[str]:
    """``tuner run`` (or ``tuner COMMAND...``) in a new session: its own process group, as a shell job's."""
    spec = tmp_path / "signals.yaml"
    spec.write_text(SPEC.format(worker=worker))
    args = command or ("run", str(spec), "--study-name", "s", "--workers", "2", "--no-mlflow")
    return subprocess.Popen([sys.executable, "-m", "tuner", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "COLUMNS": "200", MARK: mark})


def _search_running(tmp_path: Path) -> bool:
    trials = trials_of(tmp_path, "s")
    return (any(t.state.name == "COMPLETE" and t.user_attrs.get("role") == "reference" for t in trials)
            and any(t.state.name == "RUNNING" and t.user_attrs.get("slot") for t in trials))


def _stop_and_check(tmp_path: Path, process: subprocess.Popen[str], mark: str, send: str,
                    signum: int) -> list[optuna.trial.FrozenTrial]:
    """Send ``signum`` (to the group or the main pid) once a search trial runs; check the contract."""
    try:
        assert wait_for(lambda: _search_running(tmp_path), 180), "no search trial started"
        time.sleep(0.5)  # the trials are inside their workload's runs
        if send == "group":
            os.killpg(process.pid, signum)
        else:
            os.kill(process.pid, signum)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=30)
    said = " ".join((stdout + stderr).split())
    assert process.returncode == 130, f"status {process.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    for word in ("Traceback", "KeyboardInterrupt"):
        assert word not in stdout + stderr, f"{word} printed:\n{stderr[-4000:]}"
    assert "stopping: no new trials" in said, stderr[-2000:]
    assert "tuner resume s" in said, stderr[-2000:]
    assert wait_for(lambda: not _marked_pids(mark), 30), f"processes left: {_marked_pids(mark)}"
    trials = trials_of(tmp_path, "s")
    assert not any(t.state.name == "RUNNING" for t in trials), [(t.number, t.state.name) for t in trials]
    interrupted = [t for t in trials if t.user_attrs.get("outcome") == "INTERRUPTED"]
    assert interrupted, [(t.number, t.state.name, t.user_attrs.get("outcome")) for t in trials]
    assert all(t.state.name == "FAIL" for t in interrupted)
    requeued = {t.user_attrs.get("rerun_of") for t in trials}  # a re-run may itself be interrupted
    assert all(t.number in requeued for t in interrupted), "each setting in flight is queued again for resume"
    return trials


@pytest.mark.slow
@pytest.mark.parametrize("worker", ["fresh", "warm"])
def test_sigint_to_the_process_group_stops_quietly_like_ctrl_c(tmp_path: Path, worker: str) -> None:
    mark = uuid.uuid4().hex
    _stop_and_check(tmp_path, _start(tmp_path, worker, mark), mark, "group", signal.SIGINT)


@pytest.mark.slow
def test_sigterm_to_the_process_group_stops_like_ctrl_c_and_names_resume(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    _stop_and_check(tmp_path, _start(tmp_path, "fresh", mark), mark, "group", signal.SIGTERM)


@pytest.mark.slow
def test_sigterm_to_the_coordinator_alone_stops_like_ctrl_c_and_names_resume(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    _stop_and_check(tmp_path, _start(tmp_path, "fresh", mark), mark, "pid", signal.SIGTERM)


@pytest.mark.slow
def test_the_study_resumes_after_a_sigterm_and_reruns_the_interrupted_settings(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    trials = _stop_and_check(tmp_path, _start(tmp_path, "warm", mark), mark, "group", signal.SIGTERM)
    queued = {tuple(sorted(t.params.items())) for t in trials if t.user_attrs.get("outcome") == "INTERRUPTED"}
    resumed = subprocess.run([sys.executable, "-m", "tuner", "resume", "s", "--no-mlflow", "--trials",
                              str(sum(1 for t in trials if t.user_attrs.get("measured")) + 1)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "COLUMNS": "200"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rerun = {tuple(sorted(t.params.items())) for t in trials_of(tmp_path, "s")
             if t.state.name == "COMPLETE" and t.user_attrs.get("measured")}
    assert queued & rerun, "an interrupted setting ran again on resume"


@pytest.mark.slow
def test_a_fleet_worker_stops_on_sigterm_to_its_group_like_ctrl_c(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    _stop_and_check(tmp_path, _start(tmp_path, "fresh", mark), mark, "group", signal.SIGINT)
    mark = uuid.uuid4().hex
    before = {t.number for t in trials_of(tmp_path, "s") if t.user_attrs.get("outcome") == "INTERRUPTED"}
    trials = _stop_and_check(tmp_path, _start(tmp_path, "fresh", mark, "worker", "s", "--no-mlflow"), mark,
                             "group", signal.SIGTERM)
    assert any(t.number not in before and t.user_attrs.get("outcome") == "INTERRUPTED" for t in trials), \
        "the worker's own trial in flight was recorded INTERRUPTED"
