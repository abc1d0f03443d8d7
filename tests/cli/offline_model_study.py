"""Shared by the real-model study tests (Wan through diffusers, the Qwen2.5-Omni thinker): the tuner CLI run
offline in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MLFLOW_TRACKING_URI": "",
    "TUNER_STORAGE": "",
    "OMP_NUM_THREADS": "1",
}
"""The hub offline (nothing downloads), no MLflow server or shared storage from the caller's environment."""


def run_tuner(*args: str, cwd: Path, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m tuner ARGS`` in ``cwd`` with :data:`OFFLINE_ENV`; asserts exit 0 (output tails on failure)."""
    done = subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **OFFLINE_ENV},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


RUN_EXPORTED = Path(__file__).resolve().parents[2] / "docs" / "examples" / "run_exported.py"


def run_exported(config: Path, output: Path, cwd: Path, threads: str) -> None:
    """``docs/examples/run_exported.py CONFIG OUTPUT`` in a fresh process, offline, with the export's
    ``OMP_NUM_THREADS`` (``threads``); asserts exit 0. The output lands in ``output`` (.npz)."""
    done = subprocess.run(
        [sys.executable, str(RUN_EXPORTED), str(config), str(output)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **OFFLINE_ENV, "OMP_NUM_THREADS": threads},
    )
    assert done.returncode == 0, done.stderr[-3000:]
