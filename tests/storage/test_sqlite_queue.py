"""Coordinators sharing one SQLite file never pop the same queued trial (a real file, real processes).

Python's sqlite3 driver used to start a transaction only at the first write, so Optuna's
"read a WAITING trial, then set it RUNNING" ran its read outside any transaction: two processes
could both take one queued trial, and the second to tell it crashed ("Cannot tell a COMPLETE
trial"). tuner.storage.opening opens SQLite with BEGIN IMMEDIATE transactions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna

from tuner.storage.opening import open_storage

QUEUED = 60
PROCESSES = 6
ASKER = """
import json, sys, optuna
from tuner.storage.opening import open_storage
study = optuna.load_study(study_name="q", storage=open_storage(sys.argv[1], create=False))
sys.stdin.readline()  # every process starts asking at once
taken = []
for _ in range(int(sys.argv[2])):
    trial = study.ask()
    taken.append(trial.number)
print(json.dumps(taken))
"""


def test_each_queued_trial_is_popped_by_exactly_one_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    study = optuna.create_study(study_name="q", storage=open_storage(url))
    for index in range(QUEUED):
        study.enqueue_trial({"x": float(index)})
    askers = [
        subprocess.Popen(
            [sys.executable, "-c", ASKER, url, str(QUEUED // PROCESSES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    for asker in askers:
        assert asker.stdin is not None
        asker.stdin.write("go\n")
        asker.stdin.flush()
    taken: list[int] = []
    for asker in askers:
        out, _ = asker.communicate(timeout=300)
        assert asker.returncode == 0
        taken += json.loads(out)
    assert len(taken) == QUEUED
    assert sorted(taken) == list(range(QUEUED)), "every queued trial taken once, none twice, none created"
    states = {t.state.name for t in optuna.load_study(study_name="q", storage=url).trials}
    assert states == {"RUNNING"}
