"""Real processes and signals: a failing reference exits non-zero, one coordinator per study, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

SPECS = Path(__file__).parents[1] / "specs"
ENV = {**os.environ, "COLUMNS": "200"}


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=ENV
    )


def slow_spec(tmp_path: Path, reference_behaviour: str = "ok") -> Path:
    spec = tmp_path / "slow.yaml"
    spec.write_text(
        (SPECS / "fake_ok.yaml")
        .read_text()
        .replace(
            "  batch_size: {type: categorical, choices: [1, 2]}\n",
            "  batch_size: {type: categorical, choices: [1, 2]}\n  behaviour: {type: categorical, choices: [ok]}\n",
        )
        .replace(
            "sleep_s: {type: float, low: 0.001, high: 0.02, step: 0.001}",
            "sleep_s: {type: float, low: 1.0, high: 1.5, step: 0.1}",
        )
        .replace(
            "reference: {sleep_s: 0.02, noise: 0, batch_size: 1}",
            f"reference: {{sleep_s: 1.0, noise: 0, batch_size: 1, behaviour: {reference_behaviour}}}",
        )
        .replace(
            "baseline: {sleep_s: 0.02, noise: 5, batch_size: 1}",
            "baseline: {sleep_s: 1.0, noise: 5, batch_size: 1, behaviour: ok}",
        )
        .replace("choices: [ok]", "choices: [ok, device_oom]" if reference_behaviour != "ok" else "choices: [ok]")
    )
    return spec


def study_exists(tmp_path: Path, name: str) -> bool:
    """Whether the coordinator has created study ``name``: read-only SQL, so the test never races the
    coordinator while it creates the storage's tables."""
    import sqlite3

    db = tmp_path / "studies" / "studies.db"
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60) as connection:
            return connection.execute("SELECT 1 FROM studies WHERE study_name = ?", (name,)).fetchone() is not None
    except sqlite3.OperationalError:  # no tables yet
        return False


def trials_of(tmp_path: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    """The study's trials; none before the coordinator has created it. Reads wait up to 60 s for a
    busy database (a loaded machine), as the tuner's own connections do."""
    if not study_exists(tmp_path, name):
        return []
    storage = optuna.storages.RDBStorage(
        f"sqlite:///{tmp_path / 'studies' / 'studies.db'}", engine_kwargs={"connect_args": {"timeout": 60}}
    )
    try:
        return optuna.load_study(study_name=name, storage=storage).trials
    finally:
        storage.engine.dispose()


def wait_for(condition, timeout_s: float = 120.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_a_reference_oom_stops_the_study_with_a_nonzero_exit(tmp_path: Path) -> None:
    done = tuner("run", str(slow_spec(tmp_path, "device_oom")), "--study-name", "r", "--no-mlflow", cwd=tmp_path)
    said = " ".join(done.stderr.split())
    assert done.returncode == 3, done.stderr[-2000:]
    assert "study stopped: the reference setting failed (OOM" in said and "Fix:" in said
    assert "Traceback" not in done.stderr
    assert sum(1 for t in trials_of(tmp_path, "r") if t.user_attrs.get("measured")) == 1


@pytest.mark.slow
def test_a_second_coordinator_is_refused_and_a_dead_ones_lock_is_taken_over(tmp_path: Path) -> None:
    first = subprocess.Popen(
        [sys.executable, "-m", "tuner", "run", str(slow_spec(tmp_path)), "--study-name", "l", "--no-mlflow"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
    )
    try:
        assert wait_for(
            lambda: (
                (tmp_path / "studies" / "studies.db").exists()
                and any(t.state.name == "RUNNING" for t in trials_of(tmp_path, "l"))
            )
        )
        second = tuner("resume", "l", "--no-mlflow", cwd=tmp_path)
        assert second.returncode == 2 and "being run by another coordinator" in " ".join(second.stderr.split())
        assert first.poll() is None, "the first coordinator goes on"
        assert not any(t.user_attrs.get("outcome") == "INTERRUPTED" for t in trials_of(tmp_path, "l")), (
            "the refused coordinator touched no trial"
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    resumed = tuner("resume", "l", "--no-mlflow", "--trials", "4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert sum(1 for t in trials_of(tmp_path, "l") if t.user_attrs.get("measured")) == 4


def gated_spec(tmp_path: Path) -> Path:
    """fake_ok.yaml whose search runs wait at the FakeWorkload's gate (``$TUNER_FAKE_GATE_DIR``) until the
    test opens it; the reference and the baseline run free. A long fixed timeout: a held trial ends only
    by the test (or a Ctrl-C), never by the clock."""
    spec = tmp_path / "gated.yaml"
    text = (SPECS / "fake_ok.yaml").read_text()
    spec.write_text(
        text.replace("  timeout_s: 20\n", "  timeout_s: 600\n  timeout_mode: fixed\n").replace(
            '  total_frames: "4 * batch_size"\n',
            '  total_frames: "4 * batch_size"\n  gate: "not (noise <= 5 and batch_size == 1 and sleep_s >= 0.02)"\n',
        )
    )
    assert "timeout_mode: fixed" in spec.read_text() and "gate:" in spec.read_text()
    return spec


def gate_env(gate: Path) -> dict[str, str]:
    """The environment of a ``tuner`` whose gated runs wait at ``gate`` (a fresh directory)."""
    from tuner.workloads.fake import GATE_DIR_ENV

    gate.mkdir(parents=True, exist_ok=True)
    return {**ENV, GATE_DIR_ENV: str(gate)}


def arrived(gate: Path) -> bool:
    """Whether a gated run is in flight: inside its workload, waiting for the test."""
    return any(gate.glob("arrived.*"))


@pytest.mark.slow
def test_ctrl_c_stops_within_seconds_records_interrupted_and_prints_the_resume_command(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    process = subprocess.Popen(
        [sys.executable, "-m", "tuner", "run", str(gated_spec(tmp_path)), "--study-name", "c", "--no-mlflow"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=gate_env(gate),
    )
    try:
        assert wait_for(lambda: arrived(gate), 240), "a search trial reached its workload"
        process.send_signal(signal.SIGINT)  # the gate stays shut: the trial in flight cannot finish
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
    assert process.returncode == 130, stderr[-2000:]
    said = " ".join((stdout + stderr).split())
    assert "tuner resume c" in said and "Traceback" not in stderr
    trials = trials_of(tmp_path, "c")
    assert not any(t.state.name == "RUNNING" for t in trials)
    table = [(t.number, t.state.name, t.user_attrs.get("role"), t.user_attrs.get("outcome")) for t in trials]
    measured = [t for t in trials if t.state.name == "COMPLETE" and t.user_attrs.get("measured")]
    assert sorted(t.user_attrs.get("role") for t in measured) == ["baseline", "reference"], table
    interrupted = [t for t in trials if t.user_attrs.get("outcome") == "INTERRUPTED"]
    assert len(interrupted) == 1 and interrupted[0].state.name == "FAIL", table
    queued = [t for t in trials if t.state.name == "WAITING"]
    assert [t.user_attrs.get("rerun_of") for t in queued] == [interrupted[0].number], table
    assert queued[0].system_attrs.get("fixed_params") == interrupted[0].params, (
        "the setting in flight is queued again for resume"
    )


@pytest.mark.slow
def test_a_storage_locked_past_the_busy_timeout_stops_with_one_line(tmp_path: Path) -> None:
    """Another process holds the SQLite file locked: one line naming the cause, no traceback, resume works."""
    import sqlite3

    env = {**ENV, "TUNER_SQLITE_BUSY_TIMEOUT_S": "5"}  # short, yet above the brief waits of a loaded host
    process = subprocess.Popen(
        [sys.executable, "-m", "tuner", "run", str(slow_spec(tmp_path)), "--study-name", "db", "--no-mlflow"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    db = tmp_path / "studies" / "studies.db"
    assert wait_for(
        lambda: db.exists() and sum(1 for t in trials_of(tmp_path, "db") if t.state.name == "COMPLETE") >= 1
    )
    holder = sqlite3.connect(db, timeout=30, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        stdout, stderr = process.communicate(timeout=120)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    said = " ".join(stderr.split())
    assert process.returncode == 2, stderr[-2000:]
    assert "storage error, the study stopped: OperationalError: database is locked" in said, said[-1500:]
    assert "Traceback" not in stderr
    completed = {t.number for t in trials_of(tmp_path, "db") if t.state.name == "COMPLETE"}
    resumed = tuner("resume", "db", "--no-mlflow", "--trials", "3", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = trials_of(tmp_path, "db")
    assert completed <= {t.number for t in after if t.state.name == "COMPLETE"}, "nothing stored was lost"


def test_a_reference_timeout_stops_the_study_and_names_the_resume_timeout(tmp_path: Path) -> None:
    spec = tmp_path / "hang.yaml"
    spec.write_text(
        slow_spec(tmp_path)
        .read_text()
        .replace("choices: [ok]", "choices: [ok, hang]")
        .replace("behaviour: ok}", "behaviour: ok}", 1)
        .replace("batch_size: 1, behaviour: ok}\nbaseline", "batch_size: 1, behaviour: hang}\nbaseline")
        .replace("timeout_s: 20", "timeout_s: 1")
    )
    assert "behaviour: hang}" in spec.read_text()
    done = tuner("run", str(spec), "--study-name", "t", "--no-mlflow", cwd=tmp_path)
    said = " ".join(done.stderr.split())
    assert done.returncode == 3, done.stderr[-2000:]
    assert "the reference setting failed (TIMEOUT" in said and "tuner resume t --timeout S" in said
    assert sum(1 for t in trials_of(tmp_path, "t") if t.user_attrs.get("measured")) == 1


def test_resume_overrides_measurement_and_records_the_event(tmp_path: Path) -> None:
    spec = tmp_path / "quick.yaml"
    # nothing stops repeats early (a ceiling, a settled place): every trial shows the override in full
    spec.write_text((SPECS / "fake_ok.yaml").read_text() + "sampler: {name: tpe, skip_dominated: null}\n")
    first = tuner("run", str(spec), "--study-name", "m", "--no-mlflow", "--trials", "3", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    refused = tuner("resume", "m", "--no-mlflow", "--min-repeats", "5", "--max-repeats", "4", cwd=tmp_path)
    assert (
        refused.returncode == 2
        and "measurement overrides: min_repeats must be <= max_repeats" in " ".join(refused.stderr.split())
        and "Traceback" not in refused.stderr
    )
    resumed = tuner(
        "resume",
        "m",
        "--no-mlflow",
        "--trials",
        "5",
        "--warmup",
        "0",
        "--min-repeats",
        "5",
        "--max-repeats",
        "5",
        "--timeout",
        "50",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    study = optuna.load_study(study_name="m", storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    measured = [t for t in study.trials if t.user_attrs.get("measured")]
    assert [t.user_attrs["metrics"]["repeats"]["value"] for t in measured[3:]] == [5.0, 5.0]
    assert all(t.user_attrs["metrics"]["repeats"]["value"] <= 3 for t in measured[:3]), "earlier trials as they were"
    events = study.user_attrs["events"]
    assert [e["event"] for e in events] == ["run", "resume"], events
    assert events[1]["overrides"]["timeout_s_override"] == 50
    assert events[1]["overrides"]["measurement_overrides"] == {"warmup": 0, "min_repeats": 5, "max_repeats": 5}
