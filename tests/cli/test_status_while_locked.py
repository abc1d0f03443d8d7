"""Reading commands answer while another process holds the SQLite study file's write lock.

A long write transaction (``BEGIN IMMEDIATE`` held for up to 75 s, as a stuck or slow writer does) must
not make ``tuner status`` / ``tuner front`` / ``tuner list``-style reads wait: they open the storage
read-only (plain read transactions, which WAL mode serves beside a writer) and answer within seconds.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = """name: locked_fake
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 60
parameters:
  sleep_s: {type: float, low: 0.01, high: 0.05, step: 0.01}
objectives:
  - {metric: latency_p50_s, direction: minimize}
measurement: {warmup: 0, min_repeats: 1, max_repeats: 1}
budget: {trials: 3}
"""


def _tuner(args: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout_s
    )


@pytest.mark.slow
def test_reading_commands_answer_while_a_writer_holds_the_lock(tmp_path: Path) -> None:
    spec = tmp_path / "locked.yaml"
    spec.write_text(SPEC)
    home = tmp_path / "home"
    done = _tuner(["run", str(spec), "--study-name", "locked", "--home", str(home), "--no-mlflow"], tmp_path, 300)
    assert done.returncode == 0, done.stderr[-2000:]
    holder = sqlite3.connect(home / "studies.db", isolation_level=None, timeout=5)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held until released below
    holder.execute("UPDATE studies SET study_name = study_name")
    released = threading.Event()
    timer = threading.Timer(75, lambda: (holder.execute("ROLLBACK"), released.set()))
    timer.start()
    try:
        for args in (["status", "locked"], ["status"], ["front", "locked"]):
            started = time.monotonic()
            shown = _tuner([*args, "--home", str(home)], tmp_path, 60)
            took = time.monotonic() - started
            assert not released.is_set(), "the lock was still held while the command answered"
            assert shown.returncode == 0, (args, shown.stderr[-2000:])
            # status names the study; front lists its trials (the closing front's layout, no study name)
            assert ("locked" if args[0] == "status" else "on the front of") in shown.stdout, (
                args,
                shown.stdout[-2000:],
            )
            assert took < 30, (args, took)  # generous: a blocked reader waits the 60 s busy timeout or more
    finally:
        timer.cancel()
        if not released.is_set():
            holder.execute("ROLLBACK")
        holder.close()
