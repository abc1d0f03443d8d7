"""A coordinator killed while it logs a trial to MLflow: resume and ``tuner sync-mlflow`` make the views whole.

Real processes on a real SQLite MLflow store: a study is run, then resumed under a gate
(``gated_tuner.py``) that stops the tracker in the middle of one trial's run — before the run is
terminated, or after it but before its last write — and the coordinator is killed there
(SIGKILL, no clean-up). What is left is a partial trial run. A second resume, and
``tuner sync-mlflow`` on a store that also holds a duplicate complete run (what an older tuner
left), must leave exactly one complete run per finished trial: terminated with the trial's
status, tagged ``tuner.logged``, and holding what a rebuild into a fresh store holds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

SPEC = Path(__file__).parents[1] / "specs" / "fake_ok.yaml"
GATED = Path(__file__).with_name("gated_tuner.py")
EXPERIMENT = "fake_demo @ cpu"
ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": "", "TUNER_HOME": "", "TUNER_MLFLOW_REFRESH_S": "0"}
pytestmark = pytest.mark.slow


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=ENV
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def load(cwd: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{cwd / 'studies' / 'studies.db'}")


def client_for(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def trial_runs(client: Any) -> list[Any]:
    """The active runs under the study's (one) parent run."""
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id], "tags.`tuner.study` = 's'", max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.data.tags for r in parents]
    return [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]


def killed_while_logging(cwd: Path, uri: str, point: str, *command: str) -> int:
    """Run ``tuner COMMAND`` under the gate at ``point`` for the first trial it records, SIGKILL it there;
    the number of the half-logged trial."""
    gate = cwd / f"gate-{point}"
    gate.mkdir()
    first = len(load(cwd).trials) if (cwd / "studies" / "studies.db").exists() else 0
    process = subprocess.Popen(
        [
            sys.executable,
            str(GATED),
            str(gate),
            point,
            str(first),
            *command,
            "--trials",
            str(first + 4),
            "--mlflow-uri",
            uri,
        ],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300  # a bound on a stuck run, not a race: the tracker waits at the gate
        while not (gate / "arrived").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (gate / "arrived").exists(), process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=60)
    return int((gate / "arrived").read_text())


def shape(runs: list[Any], client: Any) -> dict[int, dict[str, Any]]:
    """What a user sees of each trial run, without what differs between stores (ids, rank steps)."""

    def artifacts(run_id: str, path: str | None = None) -> set[str]:
        found: set[str] = set()
        for item in client.list_artifacts(run_id, path):
            found |= artifacts(run_id, item.path) if item.is_dir else {item.path}
        return found

    return {
        int(r.data.tags["tuner.trial_number"]): {
            "params": r.data.params,
            "metrics": sorted(r.data.metrics),
            "status": r.info.status,
            "start": r.info.start_time,
            "end": r.info.end_time,
            "artifacts": artifacts(r.info.run_id),
            "samples_missing": r.data.tags.get("tuner.samples_missing"),
        }
        for r in runs
    }


def assert_whole(cwd: Path, uri: str, fresh: str | None = None) -> None:
    """Exactly one complete run per finished trial; with ``fresh``, each holding what a rebuild there holds."""
    study = load(cwd)
    finished = {t.number: t for t in study.trials if t.state.name != "RUNNING"}
    client = client_for(uri)
    runs = trial_runs(client)
    numbers = sorted(int(r.data.tags["tuner.trial_number"]) for r in runs)
    assert numbers == sorted(finished), "one run per finished trial, no duplicate, none missing"
    for run in runs:
        trial = finished[int(run.data.tags["tuner.trial_number"])]
        assert run.data.tags.get("tuner.logged") == "1", (trial.number, run.data.tags)
        expected = "FINISHED" if trial.user_attrs.get("outcome") == "OK" else "FAILED"
        assert run.info.status == expected, (trial.number, run.info.status, trial.user_attrs.get("outcome"))
    if fresh is not None:
        tuner("sync-mlflow", "s", "--mlflow-uri", fresh, cwd=cwd)
        rebuilt = client_for(fresh)
        assert shape(runs, client) == shape(trial_runs(rebuilt), rebuilt), "each run is complete"


def test_a_coordinator_killed_while_logging_a_trial_leaves_one_complete_run_per_trial(tmp_path: Path) -> None:
    (tmp_path / "mlflow").mkdir()
    uri = f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}"

    # killed before the trial's run is terminated: params and metrics logged, status RUNNING
    half = killed_while_logging(tmp_path, uri, "terminate", "run", str(SPEC), "--study-name", "s")
    partial = [r for r in trial_runs(client_for(uri)) if r.data.tags["tuner.trial_number"] == str(half)]
    assert [(r.info.status, r.data.tags.get("tuner.logged")) for r in partial] == [("RUNNING", None)]
    resumed = tuner("resume", "s", "--trials", "5", "--mlflow-uri", uri, cwd=tmp_path)
    said = resumed.stdout + resumed.stderr
    assert "failed" not in said and "incomplete" not in said, said[-3000:]
    assert_whole(tmp_path, uri)

    # killed after the run is terminated, before its last write; and a second complete run of another trial
    half = killed_while_logging(tmp_path, uri, "tag", "resume", "s")
    client = client_for(uri)
    partial = [r for r in trial_runs(client) if r.data.tags["tuner.trial_number"] == str(half)]
    outcome = next(t for t in load(tmp_path).trials if t.number == half).user_attrs.get("outcome")
    terminated = "FINISHED" if outcome == "OK" else "FAILED"  # a proposal the front surely beats: skipped, FAILED
    assert [(r.info.status, r.data.tags.get("tuner.logged")) for r in partial] == [(terminated, None)], outcome
    _log_a_second_complete_run(client, tmp_path, number=1)
    synced = tuner("sync-mlflow", "s", "--mlflow-uri", uri, cwd=tmp_path)
    said = " ".join(synced.stdout.split())
    assert "1 replaced" in said and "1 removed beside a kept one" in said, said
    assert_whole(tmp_path, uri, f"sqlite:///{tmp_path / 'fresh.db'}")


def _log_a_second_complete_run(client: Any, cwd: Path, number: int) -> None:
    """A second complete run of trial ``number``, as a tuner without the repair left one (10 runs for 9 trials),
    written by the tuner's own writer."""
    from tuner.storage.records import TrialRecord
    from tuner.study.studies import load_study
    from tuner.tracking.run_info import study_run_info
    from tuner.tracking.views import child_payload, rank_payload, ranks_of
    from tuner.tracking.writer import log_child

    opened = load_study(f"sqlite:///{cwd / 'studies' / 'studies.db'}", "s", read_only=True)
    info = study_run_info(opened.study, opened.spec, opened.storage_url)
    records = [TrialRecord.from_trial(t) for t in opened.study.trials]
    ranks = ranks_of(records, info.directions)
    runs = trial_runs(client)
    log_child(
        client,
        runs[0].info.experiment_id,
        child_payload(records[number], info, runs[0].data.tags["mlflow.parentRunId"], ranks),
        *rank_payload(number, ranks),
        len(records),
    )
    assert sum(r.data.tags["tuner.trial_number"] == str(number) for r in trial_runs(client)) == 2
