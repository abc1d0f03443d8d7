"""run and status show noisy trials (latency CV above the threshold), as front and export do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SPECS = Path(__file__).parents[1] / "specs"


def test_run_and_status_mark_noisy_trials(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "250", "TUNER_FAKE_LATENCY_CV": "0.6"}  # simulated jitter on every run
    done = subprocess.run([sys.executable, "-m", "tuner", "run", str(SPECS / "fake_ok.yaml"), "--study-name", "n",
                           "--trials", "4", "--no-mlflow"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "noisy: latency cv" in done.stderr, "the live display marks noisy trials"
    assert "NOISY (cv" in done.stdout, "the front printed at the end marks them"
    status = subprocess.run([sys.executable, "-m", "tuner", "status", "n"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env=env)
    assert status.returncode == 0 and "NOISY (latency cv" in status.stdout, status.stdout
