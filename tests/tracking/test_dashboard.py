"""optuna-dashboard shows tuner studies correctly: metric names, constraints, and best trials == tuner front.

A small real study (the fake workload, InlineRunner, a real SQLite storage) holds an OOM
placeholder, a predicted-OOM skip, a measured trial that misses the quality constraint and a
copy of a measured setting. Its view is written by :mod:`tuner.tracking.dashboard`, and the
real ``optuna-dashboard`` (started by ``tuner dashboard``) is asked through its HTTP API.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from optuna.trial import TrialState

from tuner.host import free_port
from tuner.pareto import Point, front_trials, is_measured_feasible, named_constraints, pareto_ranks
from tuner.runner.base import Slot
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec
from tuner.storage.records import TrialRecord
from tuner.study.coordinator import Coordinator
from tuner.study.studies import OpenStudy, create_study
from tuner.testing.inline_runner import InlineRunner
from tuner.tracking.dashboard import default_view_url, refresh_view

ROOT = Path(__file__).resolve().parents[2]
SPEC_TEXT = (
    (ROOT / "tests" / "specs" / "fake_ok.yaml")
    .read_text()
    .replace(
        "  batch_size: {type: categorical, choices: [1, 2]}",
        "  batch_size: {type: categorical, choices: [1, 2]}\n"
        "  behaviour: {type: categorical, choices: [ok, device_oom]}",
    )
    .replace("batch_size: 1}", "batch_size: 1, behaviour: ok}")
    .replace("min: 15", "min: 30")
    + "sampler: {name: tpe, skip_dominated: null}\n"  # every proposal runs: the kinds below are all made
)  # noise 40 (PSNR ~17 dB) misses it: measured, infeasible
OBJECTIVES = ["latency_p50_s", "psnr_db"]
OOM = {"sleep_s": 0.001, "noise": 5, "batch_size": 1, "behaviour": "device_oom"}
INFEASIBLE = {"sleep_s": 0.001, "noise": 40, "batch_size": 1, "behaviour": "ok"}  # fastest of all: not dominated
COPIED = {"sleep_s": 0.006, "noise": 0, "batch_size": 1, "behaviour": "ok"}  # on the front, proposed twice
SLOWER = {"sleep_s": 0.015, "noise": 10, "batch_size": 1, "behaviour": "ok"}  # the sixth run
STARTUP_TIMEOUT_S = 120.0


def run_small_study(home: Path) -> OpenStudy:
    """Reference, baseline, an OOM, an infeasible measurement, a setting and its copy, and a slower setting (6
    runs). Every run is enqueued: a sampled one could land beside the infeasible setting's 1 ms and, on a loaded
    machine, be measured faster than it."""
    spec = parse_spec(SPEC_TEXT)
    opened = create_study(spec, SPEC_TEXT, f"sqlite:///{home / 'studies.db'}", "s", "tpe", 6, {"spec_name": spec.name})
    for setting in (OOM, INFEASIBLE, COPIED, COPIED, SLOWER):
        opened.study.enqueue_trial(setting)
    plan = plan_constraints(spec, {"gpu_memory_gb": None, "host_memory_gb": 24.0})
    Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=InlineRunner(),
        slots=[Slot(0, None, 1)],
        home=home,
        device="cpu",
        plan=plan,
        budget_trials=6,
        wall_time_s=None,
    ).run()
    return opened


@pytest.fixture(scope="module")
def real_study(tmp_path_factory: pytest.TempPathFactory) -> OpenStudy:
    return run_small_study(tmp_path_factory.mktemp("dashboard"))


def by_outcome(opened: OpenStudy) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for trial in opened.study.get_trials():
        found.setdefault(trial.user_attrs.get("outcome", trial.state.name), []).append(trial)
    return found


def test_the_study_holds_every_kind_of_trial(real_study: OpenStudy) -> None:
    trials = real_study.study.get_trials()
    assert any(t.user_attrs.get("outcome") == "OOM" and t.user_attrs["placeholder_values"] for t in trials)
    copies = [t for t in trials if t.user_attrs.get("duplicate_of") is not None]
    assert copies and all(t.state == TrialState.COMPLETE for t in copies)
    infeasible = [t for t in trials if t.params == INFEASIBLE]
    assert infeasible and infeasible[0].state == TrialState.COMPLETE and not is_measured_feasible(infeasible[0])
    # what optuna-dashboard would call best on the real study: the front of every COMPLETE trial by values alone
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    naive = pareto_ranks([Point(t.number, tuple(t.values)) for t in complete], ["minimize", "maximize"])
    assert naive[infeasible[0].number] == 0 and any(naive[t.number] == 0 for t in copies)


def test_the_real_study_has_metric_names_and_only_the_per_key_constraints(real_study: OpenStudy) -> None:
    study = real_study.study
    assert study.metric_names == OBJECTIVES
    told = [t for t in study.get_trials() if named_constraints(t)]
    assert len(told) >= 6
    for trial in told:
        assert set(trial.constraints) == {"outcome", "psnr_db>=30"}
        assert "constraints" not in trial.system_attrs, "the legacy list lives in the view only (samplers read both)"
        assert TrialRecord.from_trial(trial).constraints == named_constraints(trial)


def test_the_view_maps_states_so_only_the_feasible_measured_trials_are_complete(
    real_study: OpenStudy, tmp_path: Path
) -> None:
    import optuna

    view_url = default_view_url(tmp_path)
    report = refresh_view(real_study.storage_url, "s", view_url)
    real = real_study.study.get_trials()
    view = optuna.load_study(study_name="s", storage=view_url)
    mirrored = view.get_trials()
    assert [t.number for t in mirrored] == [t.number for t in real]
    assert view.metric_names == OBJECTIVES and view.directions == real_study.study.directions
    for source, shown in zip(real, mirrored):
        assert shown.params == source.params and shown.datetime_start == source.datetime_start
        assert shown.datetime_complete == source.datetime_complete
        assert shown.user_attrs["outcome"] == source.user_attrs.get("outcome")
        if is_measured_feasible(source):
            assert shown.state == TrialState.COMPLETE and shown.values == source.values
        elif source.user_attrs.get("placeholder_values") or source.state == TrialState.FAIL:
            assert shown.state == TrialState.FAIL and shown.values is None
        else:  # measured but infeasible, or a copy
            assert shown.state == TrialState.PRUNED
            assert shown.user_attrs["values"] == dict(zip(OBJECTIVES, source.values))
        if source.user_attrs.get("duplicate_of") is not None:
            assert shown.user_attrs["copy_of"] == source.user_attrs["duplicate_of"]
        named = named_constraints(source)
        if named:
            assert shown.system_attrs["constraints"] == [named[key] for key in sorted(named)]
    front = [t.number for t in front_trials(real, ["minimize", "maximize"])]
    assert list(report.front) == front and view.user_attrs["front"] == front
    again = refresh_view(real_study.storage_url, "s", view_url)
    assert again.study_id == report.study_id and not again.rebuilt and again.added == 0 and again.updated == 0


def test_a_refresh_follows_a_running_trial_in_place(real_study: OpenStudy, tmp_path: Path) -> None:
    """A trial RUNNING at one refresh and finished at the next is updated in the same view study."""
    import optuna

    home = tmp_path / "own"
    home.mkdir()
    opened = run_small_study(home)
    view_url = default_view_url(home)
    first = refresh_view(opened.storage_url, "s", view_url)
    trial = opened.study.ask()
    trial.suggest_float("sleep_s", 0.001, 0.02, step=0.001)
    running = refresh_view(opened.storage_url, "s", view_url)
    view = optuna.load_study(study_name="s", storage=view_url)
    assert running.study_id == first.study_id and running.added == 1
    assert view.get_trials()[-1].state == TrialState.RUNNING
    trial.set_user_attr("outcome", "CRASH")
    trial.set_user_attr("reason", "simulated")
    opened.study.tell(trial, state=TrialState.FAIL)
    finished = refresh_view(opened.storage_url, "s", view_url)
    shown = view.get_trials()[-1]
    assert finished.study_id == first.study_id and finished.updated == 1 and not finished.rebuilt
    assert shown.state == TrialState.FAIL and shown.user_attrs["outcome"] == "CRASH"
    assert shown.params == {"sleep_s": trial.params["sleep_s"]}


def test_refreshes_at_the_same_time_add_each_trial_once(real_study: OpenStudy, tmp_path: Path) -> None:
    """Two processes refreshing one view at once ('tuner run' ending while 'tuner dashboard' serves)."""
    import multiprocessing

    import optuna

    view_url = f"sqlite:///{tmp_path / 'shared_view.db'}"
    first = refresh_view(real_study.storage_url, "s", view_url)
    source = optuna.load_study(study_name="s", storage=real_study.storage_url)
    expected = len(source.get_trials())
    # the view lacks the newest trials, as when the study went on after the last refresh
    optuna.delete_study(study_name="s", storage=view_url)
    view = optuna.create_study(study_name="s", storage=view_url, directions=["minimize", "maximize"])
    view.set_metric_names(OBJECTIVES)
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        reports = pool.starmap(refresh_view, [(real_study.storage_url, "s", view_url)] * 8)
    shown = optuna.load_study(study_name="s", storage=view_url).get_trials()
    assert len(shown) == expected and [t.number for t in shown] == list(range(expected))
    assert sum(r.added for r in reports) == expected or any(r.rebuilt for r in reports), [
        (r.added, r.rebuilt) for r in reports
    ]
    assert first.trials == expected


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def wait_for_api(base: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"tuner dashboard exited: {process.communicate()}"
        try:
            get_json(base + "/api/meta")
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"optuna-dashboard did not answer within {STARTUP_TIMEOUT_S} s")


def stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM ``tuner dashboard`` (it stops its server), then SIGKILL whatever of its tree is left."""
    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(45)  # a refresh in progress finishes first; the server gets 10 s to stop
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    for child in tree:
        try:
            child.wait(10)
        except psutil.TimeoutExpired:
            child.kill()


def test_optuna_dashboard_shows_the_tuner_front(tmp_path: Path) -> None:
    """The real optuna-dashboard, started by 'tuner dashboard' on the view, over HTTP."""
    opened = run_small_study(tmp_path)
    real = opened.study.get_trials()
    front = [t.number for t in front_trials(real, ["minimize", "maximize"])]
    port = free_port("127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuner",
            "dashboard",
            "s",
            "--home",
            str(tmp_path),
            "--port",
            str(port),
            "--interval",
            "1",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_for_api(base, process)
        studies = get_json(base + "/api/studies")["study_summaries"]
        assert [s["study_name"] for s in studies] == ["s"]
        study_id = studies[0]["study_id"]
        detail = get_json(f"{base}/api/studies/{study_id}?after=0")
        assert detail["objective_names"] == OBJECTIVES
        shown = {t["number"]: t for t in detail["trials"]}
        assert sorted(shown) == [t.number for t in real]
        for trial in real:
            if named_constraints(trial):
                assert shown[trial.number]["constraints"], f"trial {trial.number} shows its constraints"
        best = sorted(t["number"] for t in detail["best_trials"])
        assert best == front and front, "the dashboard's best trials are tuner's front"
        placeholders = {t.number for t in real if t.user_attrs.get("placeholder_values")}
        copies = {t.number for t in real if t.user_attrs.get("duplicate_of") is not None}
        assert placeholders and copies and not (placeholders | copies) & set(best)
        assert all(shown[n]["state"] != "Complete" for n in placeholders | copies)
        assert all(all(v <= 0 for v in shown[n]["constraints"]) for n in best)
        # while it serves, a trial the study adds appears in the same view study
        trial = opened.study.ask()
        trial.suggest_float("sleep_s", 0.001, 0.02, step=0.001)
        opened.study.tell(trial, state=TrialState.FAIL)
        deadline = time.monotonic() + 60
        while len(get_json(f"{base}/api/studies/{study_id}?after=0")["trials"]) < len(real) + 1:
            assert time.monotonic() < deadline, "the view was not refreshed while serving"
            time.sleep(0.5)
    finally:
        stop(process)
    assert process.returncode == 0, process.stderr.read() if process.stderr else ""


def test_refresh_only_writes_the_view_and_bad_input_is_one_line(real_study: OpenStudy, tmp_path: Path) -> None:
    home = str(Path(real_study.storage_url.removeprefix("sqlite:///")).parent)

    def tuner(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tuner", "dashboard", *args, "--home", home],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    done = tuner("s", "--refresh-only", "--view-storage", f"sqlite:///{tmp_path / 'v.db'}")
    front = [t.number for t in front_trials(real_study.study.get_trials(), ["minimize", "maximize"])]
    assert done.returncode == 0 and f"tuner front: {front}" in done.stdout, done.stderr
    assert (tmp_path / "v.db").exists()
    for args, expected in (
        (("nope", "--refresh-only"), "no study 'nope'"),
        (("s", "--refresh-only", "--view-storage", real_study.storage_url), "its own storage"),
        (("../x", "--refresh-only"), "is not allowed"),
    ):
        bad = tuner(*args)
        assert bad.returncode == 2 and expected in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_a_dashboard_terminated_while_its_server_starts_stops_it_at_once(real_study: OpenStudy) -> None:
    home = Path(real_study.storage_url.removeprefix("sqlite:///")).parent
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuner",
            "dashboard",
            "s",
            "--home",
            str(home),
            "--port",
            str(free_port("127.0.0.1")),
            "--view-storage",
            f"sqlite:///{home / 'startup_view.db'}",
            "--startup-timeout",
            "300",
        ],
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    try:
        printed = [process.stdout.readline() for _ in range(2)]  # the view line, then "view storage: ..."
        assert printed[1].startswith("view storage:"), printed
        deadline = time.monotonic() + 30
        while not (tree := psutil.Process(process.pid).children(recursive=True)):
            assert time.monotonic() < deadline, "no optuna-dashboard process was started"
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)  # the server has not answered yet: optuna-dashboard takes seconds
        rest, errors = process.communicate(timeout=60)
    finally:
        stop(process)
    assert process.returncode == 0, errors
    assert "optuna-dashboard: http" not in rest, "stopped during start-up, never announced as serving"
    for child in tree:
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, "its server was stopped"
