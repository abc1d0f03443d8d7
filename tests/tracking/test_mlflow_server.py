"""MLflow views of a study on a real ``mlflow server`` (localhost), read back with MlflowClient.

A study logged live; the same study rebuilt by ``tuner sync-mlflow`` into another
store shows the same views; a study whose MLflow server is stopped mid-study
completes, and ``tuner sync-mlflow`` afterwards makes its views whole. There the search trials wait
at the FakeWorkload's gate (``$TUNER_FAKE_GATE_DIR``) until the test has seen what it needs and
stopped the server: the outage comes mid-study by construction, not by a race with the clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.testing.mlflow_server import MlflowServer, running_mlflow_server, start_mlflow_server
from tuner.workloads.fake import GATE_DIR_ENV

SPECS = Path(__file__).parents[1] / "specs"
ENV = {
    **os.environ,
    "MLFLOW_TRACKING_URI": "",
    "TUNER_STORAGE": "",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
ENV.pop("TUNER_MLFLOW_REFRESH_S", None)
EXPERIMENT = "fake_demo @ cpu"
FRONT_ARTIFACTS = {
    "front.png",
    "front.csv",
    "front.json",
    "trials.json",
    "trials.csv",
    "front.html",
    "hypervolume.png",
    "hypervolume.csv",
    "latency_throughput.png",
    "latency_throughput.csv",
    "latency_throughput.txt",
    "search_space.json",
    "pareto/latency_p50_s_vs_psnr_db.png",
}
pytestmark = pytest.mark.slow


def tuner(*args: str, cwd: Path, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV
    )


def client_for(uri: str) -> Any:
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def artifact_paths(client: Any, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        found |= artifact_paths(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def read_artifact(client: Any, run_id: str, path: str, folder: Path) -> str:
    return Path(client.download_artifacts(run_id, path, str(folder))).read_text()


def study_runs(client: Any, study: str) -> tuple[Any, list[Any]]:
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None, "one experiment per (workload family, GPU type)"
    runs = client.search_runs([experiment.experiment_id], f"tags.`tuner.study` = '{study}'", max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.data.tags for r in parents]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return parents[0], children


def views(client: Any, study: str, folder: Path) -> dict[str, Any]:
    """Everything a user sees of a study, without what differs between stores (run ids, the parent's start);
    the trial runs' start and end are the trials' own, so they are compared too."""
    parent, children = study_runs(client, study)
    volatile = (
        "mlflow.user",
        "mlflow.source.name",
        "mlflow.source.type",
        "mlflow.source.git.commit",
        "mlflow.parentRunId",
    )

    def tags(run: Any) -> dict[str, str]:
        return {k: v for k, v in run.data.tags.items() if k not in volatile}

    pid = parent.info.run_id
    paths = artifact_paths(client, pid)
    texts = {
        name: read_artifact(client, pid, name, folder / name.replace("/", "_"))
        for name in sorted(paths)
        if name.endswith((".csv", ".json", ".txt"))
    }
    return {
        "parent": {
            "tags": tags(parent),
            "params": parent.data.params,
            "metrics": parent.data.metrics,
            "status": parent.info.status,
            "artifacts": paths,
            "texts": texts,
            "end": parent.info.end_time,
        },
        "children": {
            int(r.data.tags["tuner.trial_number"]): {
                "name": r.info.run_name,
                "tags": tags(r),
                "params": r.data.params,
                "metrics": r.data.metrics,
                "status": r.info.status,
                "artifacts": artifact_paths(client, r.info.run_id),
                "start": r.info.start_time,
                "end": r.info.end_time,
            }
            for r in children
        },
    }


def write_slow_spec(folder: Path) -> Path:
    spec = folder / "slow.yaml"
    spec.write_text(
        (SPECS / "fake_ok.yaml")
        .read_text()
        .replace(
            "sleep_s: {type: float, low: 0.001, high: 0.02, step: 0.001}",
            "sleep_s: {type: float, low: 0.3, high: 0.5, step: 0.05}",
        )
        .replace("sleep_s: 0.02", "sleep_s: 0.5")
    )
    return spec


def write_gated_spec(folder: Path) -> Path:
    """The slow spec whose search runs wait at the gate until the test opens it (the reference and the
    baseline, sleep_s 0.5 with noise 0 / 5, run free); a fixed timeout far above any wait of the test."""
    spec = write_slow_spec(folder)
    spec.write_text(
        spec.read_text()
        .replace("  timeout_s: 20\n", "  timeout_s: 600\n  timeout_mode: fixed\n")
        .replace(
            '  total_frames: "4 * batch_size"\n',
            '  total_frames: "4 * batch_size"\n  gate: "not (noise <= 5 and batch_size == 1 and sleep_s >= 0.5)"\n',
        )
    )
    assert "timeout_mode: fixed" in spec.read_text() and "gate:" in spec.read_text()
    return spec


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    with running_mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as running:
        yield running


@pytest.fixture(scope="module")
def live_study(server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study of 8 trials logged live to the server; returns its working directory."""
    cwd = tmp_path_factory.mktemp("live")
    done = tuner(
        "run", str(SPECS / "fake_ok.yaml"), "--study-name", "live", "--trials", "8", "--mlflow-uri", server.url, cwd=cwd
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "MLflow logging" not in done.stderr and "failed" not in done.stderr, done.stderr[-2000:]
    return cwd


def test_live_study_runs_tags_metrics_and_artifacts(server: MlflowServer, live_study: Path, tmp_path: Path) -> None:
    from tuner.pareto import front_trials

    client = client_for(server.url)
    study = optuna.load_study(study_name="live", storage=f"sqlite:///{live_study / 'studies' / 'studies.db'}")
    parent, children = study_runs(client, "live")
    tags = parent.data.tags
    assert tags["tuner.spec_hash"] == study.user_attrs["spec_hash"] and tags["tuner.sampler"] == "tpe"
    assert tags["tuner.storage"].startswith("sqlite:///") and tags["tuner.gpu_type"] == "cpu"
    for key in (
        "host.gpu_name",
        "host.gpu_memory_gb",
        "host.driver_version",
        "host.cuda_driver_version",
        "host.torch_version",
        "host.hostname",
    ):
        assert tags[key], key
    assert json.loads(parent.data.params["space.noise"])["type"] == "int"
    assert parent.data.params["objective.psnr_db"] == "maximize"
    assert parent.info.status == "FINISHED"

    assert sorted(int(c.data.tags["tuner.trial_number"]) for c in children) == [t.number for t in study.trials]
    front = {t.number for t in front_trials(study.trials, ["minimize", "maximize"])}
    for child in children:
        number = int(child.data.tags["tuner.trial_number"])
        trial = study.trials[number]
        assert child.data.tags["tuner.outcome"] == trial.user_attrs["outcome"]
        assert child.data.tags["tuner.on_front"] == str(number in front).lower()
        assert child.data.metrics["on_front"] == float(number in front)
        assert child.info.run_name.startswith(f"t{number} · ") and child.info.run_name.endswith(" · front") == (
            number in front
        ), child.info.run_name
        assert abs(child.info.start_time - trial.datetime_start.timestamp() * 1000) <= 1000
        assert abs(child.info.end_time - trial.datetime_complete.timestamp() * 1000) <= 1000, "the trial's duration"
        if trial.user_attrs.get("duplicate_of") is None and trial.user_attrs["outcome"] == "OK":
            assert child.data.metrics["latency_p50_s"] == trial.user_attrs["metrics"]["latency_p50_s"]["value"]
            assert child.data.metrics["psnr_db"] == trial.user_attrs["metrics"]["psnr_db"]["value"]
            assert child.data.params["noise"] == str(trial.params["noise"])
            assert f" · PSNR {trial.values[1]:.3g} dB" in child.info.run_name, child.info.run_name
            assert "constraint.outcome" in child.data.metrics
            assert "unavailable.peak_vram_gb" in child.data.tags, "unavailable metrics say why, not a number"
            assert {"sample/contact_sheet.png", "sample/sample.gif"} <= artifact_paths(client, child.info.run_id)
        if number in front:
            assert child.data.metrics["pareto_rank"] == 0.0

    artifacts = artifact_paths(client, parent.info.run_id)
    assert artifacts >= FRONT_ARTIFACTS, FRONT_ARTIFACTS - artifacts
    table = json.loads(read_artifact(client, parent.info.run_id, "front.json", tmp_path))
    assert sorted(row[table["columns"].index("trial")] for row in table["data"]) == sorted(front)
    assert json.loads(tags["mlflow.loggedArtifacts"]) == [
        {"path": "front.json", "type": "table"},
        {"path": "trials.json", "type": "table"},
    ]
    trials = json.loads(read_artifact(client, parent.info.run_id, "trials.json", tmp_path / "trials"))
    assert trials["columns"][:7] == [
        "trial",
        "run",
        "outcome",
        "on front",
        "Pareto rank",
        "latency p50 [s]",
        "PSNR [dB]",
    ]
    assert sorted(row[0] for row in trials["data"]) == [t.number for t in study.trials]
    assert "Compare all trials" in tags["mlflow.note.content"], "the description links the comparison view"
    view = json.loads(client.get_experiment(parent.info.experiment_id).tags["mlflow.sharedViewState.tuner-live"])
    assert view["selectedColumns"][:2] == ["metrics.`latency_p50_s`", "metrics.`psnr_db`"]
    page = read_artifact(client, parent.info.run_id, "front.html", tmp_path / "html")
    assert "plotly" in page and "cdn.plot.ly" not in page.split("<body>")[0]
    hover = page.replace("\\u003c", "<").replace("\\u003e", ">").replace("\\u002f", "/")
    assert f"<b>trial {min(front)}</b> (" in hover and "<br>sleep_s = " in hover, "hover shows the params"
    assert parent.data.metrics["hypervolume"] > 0 and parent.data.metrics["front_size"] == len(front)


def test_tuner_ui_on_a_server_prints_the_study_run_and_its_comparison_view(
    server: MlflowServer, live_study: Path
) -> None:
    parent, _ = study_runs(client_for(server.url), "live")
    shown = tuner("ui", "live", "--mlflow-uri", server.url, cwd=live_study)
    assert shown.returncode == 0, shown.stderr
    experiment = f"{server.url.rstrip('/')}/#/experiments/{parent.info.experiment_id}"
    assert shown.stdout.split() == [
        f"{experiment}/runs/{parent.info.run_id}",
        f"{experiment}/runs?viewStateShareKey=tuner-live",
    ]


def test_sync_rebuilds_the_same_views_as_live_logging(server: MlflowServer, live_study: Path, tmp_path: Path) -> None:
    rebuilt = f"sqlite:///{tmp_path / 'rebuilt' / 'mlflow.db'}"
    (tmp_path / "rebuilt").mkdir()
    done = tuner("sync-mlflow", "live", "--mlflow-uri", rebuilt, cwd=live_study)
    assert done.returncode == 0, done.stderr[-2000:]
    study = optuna.load_study(study_name="live", storage=f"sqlite:///{live_study / 'studies' / 'studies.db'}")
    recorded = len(study.trials)  # 8 measured, and the proposals skipped as predicted dominated (each a run too)
    assert recorded >= 8 and f"{recorded} trial runs logged" in " ".join(done.stdout.split())
    live = views(client_for(server.url), "live", tmp_path / "a")
    synced = views(client_for(rebuilt), "live", tmp_path / "b")
    assert live == synced
    again = tuner("sync-mlflow", "live", "--mlflow-uri", rebuilt, cwd=live_study)
    assert again.returncode == 0 and f"0 trial runs logged, 0 replaced, {recorded} kept" in " ".join(
        again.stdout.split()
    ), again.stdout
    assert views(client_for(rebuilt), "live", tmp_path / "c") == synced


def test_mlflow_stopped_mid_study_then_sync_makes_the_views_whole(tmp_path: Path) -> None:
    store = tmp_path / "store"
    gate = tmp_path / "gate"
    gate.mkdir()
    first = start_mlflow_server(store)
    process = None
    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tuner",
                "run",
                str(write_gated_spec(tmp_path)),
                "--study-name",
                "outage",
                "--trials",
                "8",
                "--mlflow-uri",
                first.url,
            ],
            cwd=tmp_path,
            env={**ENV, "TUNER_MLFLOW_REFRESH_S": "0", GATE_DIR_ENV: str(gate)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        client = client_for(first.url)
        deadline = time.monotonic() + 300  # a bound on a stuck study, not a race: the search waits at the gate
        logged, refreshed = 0, False
        while time.monotonic() < deadline and process.poll() is None and not (logged >= 2 and refreshed):
            time.sleep(0.5)
            try:
                parent, children = study_runs(client, "outage")
                logged = len(children)
                refreshed = "front.png" in artifact_paths(client, parent.info.run_id)
            except Exception:  # noqa: BLE001 - the parent run is not there yet
                continue
        assert process.poll() is None, "the study waits at the gate: the outage comes while it runs"
        assert logged >= 2, "the reference and the baseline are logged before the outage"
        assert refreshed, "the front artifacts are refreshed while the study runs"
    except BaseException:
        if process is not None:
            process.kill()
            process.communicate(timeout=30)
        raise
    finally:
        first.stop()
        (gate / "open").touch()  # the outage is on: the search trials go on
    assert process is not None
    stdout, stderr = process.communicate(timeout=400)
    assert process.returncode == 0, stdout[-2000:] + stderr[-2000:]
    assert "tuner sync-mlflow outage" in " ".join((stdout + stderr).split()), stdout + stderr
    study = optuna.load_study(study_name="outage", storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    assert sum(1 for t in study.trials if t.user_attrs.get("measured")) == 8, "the study completed"

    with running_mlflow_server(store) as second:
        client = client_for(second.url)
        before = len(study_runs(client, "outage")[1])
        assert before < len(study.trials), "the outage left views missing"
        done = tuner("sync-mlflow", "outage", "--mlflow-uri", second.url, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        rebuilt = views(client, "outage", tmp_path / "after")
    fresh = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    (tmp_path / "fresh").mkdir()
    assert tuner("sync-mlflow", "outage", "--mlflow-uri", fresh, cwd=tmp_path).returncode == 0
    reference = views(client_for(fresh), "outage", tmp_path / "fresh-views")
    assert sorted(rebuilt["children"]) == [t.number for t in study.trials]
    assert FRONT_ARTIFACTS - {"latency_throughput.png", "latency_throughput.csv"} <= rebuilt["parent"]["artifacts"]
    assert rebuilt == reference, "after the outage, sync gives exactly what a complete log shows"


def test_a_hung_mlflow_server_delays_the_end_of_a_study_only_briefly(tmp_path: Path) -> None:
    """The server is frozen (SIGSTOP: connections hang, nothing refuses) mid-study: the study still ends
    soon after its last trial, prints the sync hint, and loses nothing (the storage is the truth)."""
    import signal

    from tuner.cli.session import MLFLOW_CLOSE_TIMEOUT_S

    server = start_mlflow_server(tmp_path / "store")
    gate = tmp_path / "gate"
    gate.mkdir()
    frozen = False
    process = None
    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tuner",
                "run",
                str(write_gated_spec(tmp_path)),
                "--study-name",
                "hung",
                "--trials",
                "8",
                "--mlflow-uri",
                server.url,
            ],
            cwd=tmp_path,
            # the user's own HTTP settings: a long request timeout, so a frozen server holds each call
            env={
                **ENV,
                "TUNER_MLFLOW_REFRESH_S": "0",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "120",
                "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                GATE_DIR_ENV: str(gate),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        client = client_for(server.url)
        deadline = time.monotonic() + 300  # a bound on a stuck study, not a race: the search waits at the gate
        logged = 0
        while time.monotonic() < deadline and process.poll() is None and logged < 2:
            time.sleep(0.5)
            try:
                logged = len(study_runs(client, "hung")[1])
            except Exception:  # noqa: BLE001 - the parent run is not there yet
                continue
        assert process.poll() is None and logged >= 2, "the study waits at the gate: the freeze comes while it runs"
        os.killpg(server.process.pid, signal.SIGSTOP)
        frozen = True
        (gate / "open").touch()  # the server is frozen: the search trials go on
        stdout, stderr = process.communicate(timeout=600)
        ended = time.time()
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
        if frozen:
            os.killpg(server.process.pid, signal.SIGCONT)
        server.stop()
    assert process.returncode == 0, stdout[-2000:] + stderr[-2000:]
    assert "tuner sync-mlflow hung" in " ".join((stdout + stderr).split()), stdout + stderr
    study = optuna.load_study(study_name="hung", storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    assert sum(1 for t in study.trials if t.user_attrs.get("measured")) == 8, "the study completed"
    last = max(t.datetime_complete for t in study.trials if t.datetime_complete).timestamp()
    # before: the exit waited for the frozen server's 120 s request timeout (up to 180 s); now at most
    # MLFLOW_CLOSE_TIMEOUT_S, plus the export and the exit
    assert ended - last < MLFLOW_CLOSE_TIMEOUT_S + 30, f"{ended - last:.0f} s from the last trial to the exit"
