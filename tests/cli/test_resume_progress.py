"""What ``tuner run`` / ``tuner resume`` print of their progress: real numbers, never ``?`` (issue 24).

A study without a trial budget (``budget: {wall_time_s: ...}``) has no total to count
towards; its progress lines said ``[9/?]`` and ``ETA -``. They now say how many trials
are measured. A study resumed with ``--trials N`` counts towards N.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from rich.console import Console

from tuner.cli.progress import ProgressDisplay

SPEC = Path(__file__).resolve().parents[1] / "specs" / "fake_ok.yaml"


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args, "--no-mlflow"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": "", "COLUMNS": "200"},
    )


def progress_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("[", "study "))]


def test_without_a_trial_budget_the_lines_count_measured_trials() -> None:
    buffer = io.StringIO()
    display = ProgressDisplay(Console(file=buffer, width=200), live=False)
    study = optuna.create_study(directions=["minimize", "maximize"])
    trial = study.ask()
    trial.set_user_attr("outcome", "OK")
    trial.set_user_attr("role", "search")
    display.on_start("demo", 8, None)
    display.on_trial(study.tell(trial, [0.25, 31.5]), 9, None, 1, 5.0)
    text = buffer.getvalue()
    assert "?" not in text, text
    assert "study demo: 8 trials measured so far (no trial budget)" in text, text
    assert "[9 measured] trial 0 search OK 0.25, 31.5 | front 1 | elapsed 5s" in text, text
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(display._render())
    assert "?" not in rendered.getvalue() and "9 measured" in rendered.getvalue(), rendered.getvalue()


@pytest.mark.slow
def test_resume_shows_real_numbers(tmp_path: Path) -> None:
    counted = tmp_path / "counted.yaml"
    counted.write_text(SPEC.read_text().replace("budget: {trials: 8}", "budget: {trials: 2}"))
    first = tuner("run", str(counted), "--study-name", "c", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    resumed = tuner("resume", "c", "--trials", "4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    lines = progress_lines(resumed.stderr)
    assert "study c: 2/4 trials measured" in lines, lines
    assert any(line.startswith("[4/4] trial 3 ") for line in lines), lines
    assert re.search(r"study c: 4 measured \(2 this run\)", resumed.stdout), resumed.stdout

    timed = tmp_path / "timed.yaml"
    timed.write_text(SPEC.read_text().replace("budget: {trials: 8}", "budget: {wall_time_s: 1}"))
    first = tuner("run", str(timed), "--study-name", "t", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    resumed = tuner("resume", "t", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    lines = progress_lines(resumed.stderr)
    assert lines and not [line for line in lines if "?" in line], lines
    assert re.match(r"study t: \d+ trials measured so far \(no trial budget\)", lines[0]), lines
    assert all(re.match(r"\[\d+ measured\] trial \d+ ", line) for line in lines[1:]), lines
    assert re.search(r"study t: \d+ measured \(\d+ this run\)", resumed.stdout), resumed.stdout
