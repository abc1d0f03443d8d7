"""Real processes, real signals: SIGINT / SIGTERM to ``tuner run`` and its whole process group.

A terminal's Ctrl-C sends SIGINT to the foreground process group: the coordinator and any child
left in its group (the fork server was, and printed ``KeyboardInterrupt`` with its stack). A
service manager or ``kill`` sends SIGTERM, to the group or to the coordinator alone. In every case
the study stops like after Ctrl-C: no new trials, trials in flight recorded INTERRUPTED and queued
again, the same words, one line naming ``tuner resume``, exit status 130, no traceback from any
process, and no process of the tuner left behind. A second Ctrl-C exits at once (130), leaving the
trials in flight for ``tuner resume`` to re-run.

The search trials wait at the FakeWorkload's gate (``$TUNER_FAKE_GATE_DIR``), which the test never
opens while the study runs: each signal comes while a trial is inside its workload, and that trial
cannot finish before the coordinator's grace ends — the outcome is one, by construction.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import optuna
import pytest
from test_study_faults import trials_of, wait_for

from tuner.workloads.fake import GATE_DIR_ENV

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
  sleep_s: {{type: categorical, choices: [0.05]}}
  noise: {{type: int, low: 0, high: 40, step: 5}}
derived:
  gate: "noise > 0"
objectives:
  - {{metric: latency_p50_s, direction: minimize}}
  - {{metric: psnr_db, direction: maximize}}
reference: {{sleep_s: 0.05, noise: 0}}
measurement: {{warmup: 0, min_repeats: 3, max_repeats: 3}}
budget: {{trials: 12}}
"""
# Every search run is gated (noise > 0; noise 0 is the reference's setting, copied, never run): a trial in
# flight waits for the test, so it outlasts the coordinator's grace after an interrupt, is killed, and must
# be recorded INTERRUPTED and queued again.

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


def _gate(tmp_path: Path, mark: str) -> Path:
    """The gate of the tuner started with ``mark`` (one per start: each waits for its own arrivals)."""
    return tmp_path / f"gate-{mark}"


def _start(tmp_path: Path, worker: str, mark: str, *command: str) -> subprocess.Popen[str]:
    """``tuner run`` (or ``tuner COMMAND...``) in a new session: its own process group, as a shell job's."""
    spec = tmp_path / "signals.yaml"
    spec.write_text(SPEC.format(worker=worker))
    _gate(tmp_path, mark).mkdir()
    args = command or ("run", str(spec), "--study-name", "s", "--workers", "2", "--no-mlflow")
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200", MARK: mark, GATE_DIR_ENV: str(_gate(tmp_path, mark))},
    )


def _search_in_flight(tmp_path: Path, mark: str) -> bool:
    """A search trial is inside its workload, held at the gate (it cannot finish until the gate opens)."""
    return any(_gate(tmp_path, mark).glob("arrived.*"))


def _stop_and_check(
    tmp_path: Path, process: subprocess.Popen[str], mark: str, send: str, signum: int
) -> list[optuna.trial.FrozenTrial]:
    """Send ``signum`` (to the group or the main pid) once a search trial runs; check the contract."""
    try:
        assert wait_for(lambda: _search_in_flight(tmp_path, mark), 240), "no search trial started"
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
    assert not any(
        t.state.name == "COMPLETE" and t.user_attrs.get("measured") and t.params.get("noise") for t in trials
    ), "no gated trial finished: the gate never opened"
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
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "resume",
            "s",
            "--no-mlflow",
            "--trials",
            str(sum(1 for t in trials if t.user_attrs.get("measured")) + 1),
        ],  # no gate: free
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rerun = {
        tuple(sorted(t.params.items()))
        for t in trials_of(tmp_path, "s")
        if t.state.name == "COMPLETE" and t.user_attrs.get("measured")
    }
    assert queued & rerun, "an interrupted setting ran again on resume"


@pytest.mark.slow
def test_a_fleet_worker_stops_on_sigterm_to_its_group_like_ctrl_c(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    _stop_and_check(tmp_path, _start(tmp_path, "fresh", mark), mark, "group", signal.SIGINT)
    mark = uuid.uuid4().hex
    before = {t.number for t in trials_of(tmp_path, "s") if t.user_attrs.get("outcome") == "INTERRUPTED"}
    trials = _stop_and_check(
        tmp_path, _start(tmp_path, "fresh", mark, "worker", "s", "--no-mlflow"), mark, "group", signal.SIGTERM
    )
    assert any(t.number not in before and t.user_attrs.get("outcome") == "INTERRUPTED" for t in trials), (
        "the worker's own trial in flight was recorded INTERRUPTED"
    )


class _Collected:
    """Reads a process's stdout and stderr as they come (threads), so the test can wait for a line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.parts: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.threads = [
            threading.Thread(target=self._read, args=(stream, self.parts[name]), daemon=True)
            for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))
        ]
        for thread in self.threads:
            thread.start()

    @staticmethod
    def _read(stream: object, into: list[str]) -> None:
        for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
            into.append(line)

    def said(self) -> str:
        return " ".join("".join(self.parts["stdout"] + self.parts["stderr"]).split())

    def join(self) -> tuple[str, str]:
        for thread in self.threads:
            thread.join(30)
        return "".join(self.parts["stdout"]), "".join(self.parts["stderr"])


@pytest.mark.slow
def test_a_second_ctrl_c_exits_at_once_and_resume_reruns_the_trials_in_flight(tmp_path: Path) -> None:
    """The first Ctrl-C says "stopping" and gives the trials in flight a grace; the second, within it, exits
    at once with 130 ("exiting now"): nothing more is recorded (the trials in flight stay RUNNING, their
    workers die with the coordinator), and ``tuner resume`` takes them over and runs them again."""
    mark = uuid.uuid4().hex
    process = _start(tmp_path, "fresh", mark)
    output = _Collected(process)
    try:
        assert wait_for(lambda: _search_in_flight(tmp_path, mark), 240), "no search trial started"
        os.killpg(process.pid, signal.SIGINT)
        # the second press only once the first was handled (two pending SIGINTs would be one); the trials
        # in flight are held at the gate, so the coordinator is still inside its grace when it comes
        assert wait_for(lambda: "stopping: no new trials" in output.said(), 60), output.said()[-2000:]
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    stdout, stderr = output.join()
    said = " ".join((stdout + stderr).split())
    assert process.returncode == 130, f"status {process.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    assert "exiting now: 'tuner resume' re-runs the trials that were in flight" in said, said[-2000:]
    for word in ("Traceback", "KeyboardInterrupt"):
        assert word not in stdout + stderr, f"{word} printed:\n{stderr[-4000:]}"
    assert wait_for(lambda: not _marked_pids(mark), 30), f"processes left: {_marked_pids(mark)}"

    trials = trials_of(tmp_path, "s")  # the storage opens and reads: the exit broke nothing
    table = [(t.number, t.state.name, t.user_attrs.get("outcome")) for t in trials]
    in_flight = [t for t in trials if t.state.name == "RUNNING"]
    assert in_flight and all(t.params.get("noise") for t in in_flight), table
    assert not any(t.user_attrs.get("outcome") == "INTERRUPTED" for t in trials), (
        f"the exit did not wait for the grace: nothing was recorded after the first Ctrl-C {table}"
    )
    assert any(t.state.name == "COMPLETE" and t.user_attrs.get("role") == "reference" for t in trials), table

    measured = sum(1 for t in trials if t.state.name == "COMPLETE" and t.user_attrs.get("measured"))
    resumed = subprocess.run(  # no gate: the resumed trials run free
        [sys.executable, "-m", "tuner", "resume", "s", "--no-mlflow", "--trials", str(measured + len(in_flight))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = {t.number: t for t in trials_of(tmp_path, "s")}
    for trial in in_flight:
        assert after[trial.number].user_attrs.get("outcome") == "INTERRUPTED", "resume took the trial over"
        rerun = [t for t in after.values() if t.user_attrs.get("rerun_of") == trial.number]
        assert [t.state.name for t in rerun] == ["COMPLETE"] and rerun[0].params == trial.params, [
            (t.number, t.state.name, t.params) for t in rerun
        ]
