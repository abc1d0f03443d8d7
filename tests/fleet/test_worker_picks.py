"""``tuner worker`` without a study: it takes the open studies for this host's GPU type, oldest first,
skips cancelled ones and those for other GPUs, and with ``--once`` exits when none is left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna

from tuner.testing.noop_spec import noop_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = noop_spec("picks", trials=3)


def worker_once(url: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tuner worker --once`` on the storage at ``url`` with its files under ``home``; it must exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "worker", "--storage", url, "--once", "--no-mlflow", "--home", str(home)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_a_worker_runs_the_open_studies_for_its_gpu_type_then_exits_once(tmp_path: Path) -> None:
    import tuner
    from tuner.fleet.worker import open_studies

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    spec = tmp_path / "picks.yaml"
    spec.write_text(SPEC)
    for name in ("first", "second", "for_h200", "cancelled"):
        tuner.create_study(spec, study_name=name, storage=url, home=tmp_path / "creator")
    storage = optuna.storages.RDBStorage(url)
    optuna.load_study(study_name="for_h200", storage=storage).set_user_attr("gpu_type", "NVIDIA H200")
    optuna.load_study(study_name="cancelled", storage=storage).set_user_attr("cancelled", True)
    assert [s.name for s in open_studies(url, "cpu")] == ["first", "second"]

    done = worker_once(url, tmp_path / "host", tmp_path)
    assert "no open study for this host: done (--once)" in done.stdout

    def measured(name: str) -> int:
        trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        return sum(1 for t in trials if t.user_attrs.get("measured"))

    assert (measured("first"), measured("second")) == (3, 3)
    assert (measured("for_h200"), measured("cancelled")) == (0, 0), "other GPUs' and cancelled studies untouched"
    first = optuna.load_study(study_name="first", storage=storage).get_trials(deepcopy=False)
    second = optuna.load_study(study_name="second", storage=storage).get_trials(deepcopy=False)
    assert max(t.datetime_complete for t in first if t.datetime_complete) <= min(
        t.datetime_start for t in second if t.datetime_start
    ), "the oldest study first"
    assert open_studies(url, "cpu") == []
    assert not (tmp_path / "host" / "dashboard.db").exists(), (
        "a worker builds no dashboard view: O(study) per session per host (tuner dashboard builds one on demand)"
    )


def test_a_cancelled_study_stops_its_workers_after_the_trials_in_flight(tmp_path: Path) -> None:
    import time

    import tuner

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    spec = tmp_path / "picks.yaml"
    spec.write_text(noop_spec("picks", trials=200))
    tuner.create_study(spec, study_name="long", storage=url, home=tmp_path / "creator")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuner",
            "worker",
            "long",
            "--storage",
            url,
            "--no-mlflow",
            "--home",
            str(tmp_path / "host"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    storage = optuna.storages.RDBStorage(url)
    study = optuna.load_study(study_name="long", storage=storage)
    deadline = time.monotonic() + 300
    while sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get("measured")) < 2:
        assert time.monotonic() < deadline and worker.poll() is None
        time.sleep(0.3)
    study.set_user_attr("cancelled", True)
    output, _ = worker.communicate(timeout=300)
    assert worker.returncode == 0, output[-2000:]
    assert "stopped: cancelled" in " ".join(output.split()), output[-2000:]
    trials = study.get_trials(deepcopy=False)
    assert sum(1 for t in trials if t.user_attrs.get("measured")) < 200
    assert not any(t.state.name == "RUNNING" for t in trials), "the trial in flight finished; nothing left running"


def test_a_study_whose_device_hours_are_spent_is_not_joined(tmp_path: Path) -> None:
    """A worker without a study name skips a study whose runs already hold its device-hour budget: the
    budget is the study's, whichever hosts spent it."""
    import tuner
    from tuner.fleet.worker import open_studies

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    spec = tmp_path / "picks.yaml"
    spec.write_text(noop_spec("picks", trials=50))
    tuner.create_study(spec, study_name="spent", storage=url, home=tmp_path / "creator", device_hours=0.001)
    tuner.create_study(spec, study_name="open", storage=url, home=tmp_path / "creator", device_hours=1.0)
    for name in ("spent", "open"):  # one run of 3.6 device-seconds each, as another host recorded it
        study = optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(url))
        trial = study.ask()
        trial.set_user_attr("measured", True)
        trial.set_user_attr("cost", {"device_s": 3.6, "wall_s": 3.6, "devices": 1, "phases_device_s": {}})
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert [s.name for s in open_studies(url, "cpu")] == ["open"]


def test_a_worker_keeps_its_warm_workers_for_the_next_study_of_the_same_workload(tmp_path: Path) -> None:
    """Study after study of one workload, a ``tuner worker`` keeps its warm workers (tuner.runner.choice.
    KeptRunner): the second study's trials run in the first's worker process; a study of another workload
    (another timeout in its workload block) gets a new one."""
    import tuner
    from tuner.storage.records import trial_records

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    warm = SPEC.replace("timeout_s: 60}", "timeout_s: 60, worker: warm}")
    assert warm != SPEC
    for name, text in (("first", warm), ("second", warm), ("other", warm.replace("timeout_s: 60", "timeout_s: 61"))):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(text)
        tuner.create_study(spec, study_name=name, storage=url, home=tmp_path / "creator")
    worker_once(url, tmp_path, tmp_path)
    storage = optuna.storages.RDBStorage(url)

    def worker_pids(name: str) -> set[int]:
        study = optuna.load_study(study_name=name, storage=storage)
        trials = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("measured")]
        assert len(trials) == 3
        return {side["worker_info"]["warm_worker_pid"] for side in trial_records(study, trials).values()}

    first, second, other = worker_pids("first"), worker_pids("second"), worker_pids("other")
    assert len(first) == 1 and second == first, "the second study found the first one's warm worker"
    assert other.isdisjoint(first), "another workload block: another worker"
