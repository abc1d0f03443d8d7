"""run, status and show mark trials whose latency is not to be taken at face value: noisy ones (latency CV
above the threshold, as front and export do) and ones the time limit cut short."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SPECS = Path(__file__).parents[1] / "specs"


def test_run_and_status_mark_noisy_trials(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "COLUMNS": "250",
        "TUNER_FAKE_LATENCY_CV": "0.6",  # simulated jitter on every run,
        "TUNER_FAKE_NOISE_SEED": "20240611",
    }  # drawn from a seed: the same draws every time
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "run",
            str(SPECS / "fake_ok.yaml"),
            "--study-name",
            "n",
            "--trials",
            "4",
            "--no-mlflow",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "noisy: latency cv" in done.stderr, "the live display marks noisy trials"
    assert "NOISY" in done.stdout.split("Pareto front (", 1)[1], "the front printed at the end marks them"
    status = subprocess.run(
        [sys.executable, "-m", "tuner", "status", "n"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert status.returncode == 0 and "NOISY (latency cv" in status.stdout, status.stdout


SLOW_BASELINE_SPEC = """
name: slow_baseline
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 20, timeout_mode: fixed}
parameters:
  sleep_s: {type: categorical, choices: [0.01, 6.0]}
objectives:
  - {metric: latency_p50_s, direction: minimize}
reference: {sleep_s: 0.01}
baseline: {sleep_s: 6.0}
measurement: {warmup: 1, min_repeats: 3, max_repeats: 5}
budget: {trials: 2}
"""


def test_run_status_and_show_say_when_the_time_limit_cut_a_measurement_short(tmp_path: Path) -> None:
    # the baseline's 6 s calls: warmup and one repeat end ~12 s into its 20 s limit; a second repeat
    # would end past 70 % of it (14 s), so it is measured once and recorded OK, not killed at 20 s
    spec = tmp_path / "slow.yaml"
    spec.write_text(SLOW_BASELINE_SPEC)
    env = {**os.environ, "COLUMNS": "250"}
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(spec), "--study-name", "s", "--trials", "2", "--no-mlflow"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "trial 1 baseline OK" in done.stderr and "cut short: 1 of 3-5 repeats" in done.stderr, done.stderr
    status = subprocess.run(
        [sys.executable, "-m", "tuner", "status", "s"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert status.returncode == 0 and "cut short: 1 of 3-5 repeats" in status.stdout, status.stdout
    show = subprocess.run(
        [sys.executable, "-m", "tuner", "show", "s", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert show.returncode == 0, show.stderr
    assert (
        "measurement cut short by the time limit: 1 of 3-5 repeats and 1/1 warmup fit in 70% of the 20 s limit"
        in show.stdout
    ), show.stdout
