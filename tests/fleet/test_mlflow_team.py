"""MLflow for teams: one ``mlflow server`` on PostgreSQL with proxied artifacts, used by every host.

The recipe of docs/mlflow.md ("MLflow for teams"), for real: a throwaway PostgreSQL cluster
holds both the Optuna storage and MLflow's backend store; ``mlflow server
--backend-store-uri postgresql+psycopg://... --artifacts-destination DIR`` serves the
artifacts. One study is run by two "hosts" — two ``tuner`` processes with their own homes
(no shared file system: host A's reference output is deleted before host B starts) and
their own host names (``TUNER_HOST``) — against the same storage and server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.storage.records import TrialRecord
from tuner.study.reference import sha256_file
from tuner.testing.mlflow_server import running_mlflow_server
from tuner.testing.postgres import PostgresCluster
from tuner.tracking.run_info import StudyRunInfo
from tuner.tracking.views import child_payload

SPEC = Path(__file__).parents[1] / "specs" / "fake_ok.yaml"
EXPERIMENT = "fake_demo @ cpu"  # <spec name> @ <gpu type>
PASSWORD = "team-tracking-pw-9c1"  # the tracking server's password: never in a tag, a param, an attribute or a log
ENV = {
    **os.environ,
    "MLFLOW_TRACKING_URI": "",
    "TUNER_STORAGE": "",
    "TUNER_HOME": "",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}


def tuner(
    *args: str, home: Path, host: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args, "--home", str(home)],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=400,
        env={**ENV, "TUNER_HOST": host, **(extra_env or {})},
    )


def everything_logged(client: Any, experiment_id: str) -> str:
    """Every tag and param of every run of the experiment, as one text."""
    runs = client.search_runs([experiment_id], max_results=1000)
    return json.dumps([[r.info.run_name, r.data.tags, r.data.params] for r in runs])


@pytest.mark.postgres
@pytest.mark.slow
def test_two_hosts_log_one_study_to_one_team_server(
    postgres_cluster: PostgresCluster, postgres_url: str, tmp_path: Path
) -> None:
    from mlflow.artifacts import download_artifacts
    from mlflow.tracking import MlflowClient

    storage = postgres_cluster.create_database(f"optuna_{uuid.uuid4().hex[:12]}")
    with running_mlflow_server(tmp_path / "mlflow", backend_uri=postgres_url) as server:
        with_password = server.url.replace("http://", f"http://alice:{PASSWORD}@")
        host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
        first = tuner(
            "run",
            str(SPEC),
            "--study-name",
            "team",
            "--trials",
            "3",
            "--storage",
            storage,
            "--mlflow-uri",
            with_password,
            home=host_a,
            host="host-a",
        )
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        (host_a / "team" / "reference_output.npz").unlink()  # no shared file system between the hosts
        second = tuner(
            "resume",
            "team",
            "--trials",
            "6",
            "--storage",
            storage,
            "--mlflow-uri",
            server.url,
            home=host_b,
            host="host-b",
            extra_env={"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": PASSWORD},
        )
        assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
        outputs = {"host A's output": first.stdout + first.stderr, "host B's output": second.stdout + second.stderr}
        for done in (first, second):
            said = " ".join((done.stdout + done.stderr).split())
            assert "not reachable" not in said and "MLflow at" not in said, said[-2000:]
            assert "View run" not in said, "MLflow's own prints (the tracking URI) stay off the output"
            if "tuner sync-mlflow team" in said:  # a loaded machine: logging outlived the exit's wait; as documented
                synced = tuner(
                    "sync-mlflow",
                    "team",
                    "--storage",
                    storage,
                    "--mlflow-uri",
                    with_password,
                    home=host_b,
                    host="host-b",
                )
                assert synced.returncode == 0, synced.stderr[-2000:]
                outputs["sync-mlflow's output"] = synced.stdout + synced.stderr

        study = optuna.load_study(study_name="team", storage=storage)
        trials = [t for t in study.get_trials(deepcopy=False) if t.state.name != "RUNNING"]
        assert {t.user_attrs.get("host") for t in trials if t.user_attrs.get("measured")} == {"host-a", "host-b"}

        client = MlflowClient(server.url)
        experiments = [e.name for e in client.search_experiments() if e.name != "Default"]
        assert experiments == [EXPERIMENT], "runs from every host land in one experiment per (spec, GPU type)"
        experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
        runs = client.search_runs([experiment_id], "tags.`tuner.study` = 'team'", max_results=1000)
        parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        assert len(parents) == 1, "one study run for both hosts"
        children = {
            int(r.data.tags["tuner.trial_number"]): r
            for r in runs
            if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id
        }
        assert sorted(children) == [t.number for t in trials]
        for trial in trials:
            tags = children[trial.number].data.tags
            if trial.user_attrs.get("host"):
                assert tags["tuner.host"] == trial.user_attrs["host"], (trial.number, tags)
                assert tags["host.hostname"] == trial.user_attrs["host"]
                assert tags["tuner.worker"] == trial.user_attrs["worker"]

        reference = next(
            t for t in trials if t.user_attrs.get("role") == "reference" and t.user_attrs.get("outcome") == "OK"
        )
        expected = reference.user_attrs["reference_output_sha256"]
        uri = reference.user_attrs["reference_output_uri"]
        assert uri.startswith("mlflow-artifacts:/"), uri
        stored = list(server.artifacts.rglob("reference_output.npz"))
        assert [sha256_file(p) for p in stored] == [expected], "the reference output is in the artifacts destination"
        fetched = download_artifacts(artifact_uri=uri, dst_path=str(tmp_path / "download"), tracking_uri=server.url)
        assert sha256_file(Path(fetched)) == expected, "downloadable through the server"
        on_b = host_b / "team" / "reference_output.npz"
        assert sha256_file(on_b) == expected, "host B fetched the reference output and verified it"
        for trial in trials:
            if (
                trial.user_attrs.get("host") == "host-b"
                and trial.user_attrs.get("outcome") == "OK"
                and trial.user_attrs.get("duplicate_of") is None
            ):
                assert trial.user_attrs["metrics"]["psnr_db"]["value"] is not None, trial.user_attrs["metrics"]
                assert "fingerprint_note" not in trial.user_attrs, "same GPU type, driver and torch: no note"

        logged = everything_logged(client, experiment_id)
        stored_attrs = json.dumps([study.user_attrs] + [t.user_attrs for t in trials], default=str)
        texts = {
            "tags and params": logged,
            "storage attributes": stored_attrs,
            **outputs,
            "the server's log": server.log.read_text(errors="replace"),
        }
        for where, text in texts.items():
            assert PASSWORD not in text, f"the tracking password shows in {where}"
            assert postgres_cluster.password not in text or where == "the server's log", (
                f"the storage password shows in {where}"
            )


def test_each_trial_run_carries_the_host_it_ran_on() -> None:
    """The child run's host tags: the trial's own host, never another machine's facts."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class FleetRecord(TrialRecord):
        host: str | None = None
        worker: str | None = None
        fingerprint_note: str | None = None

    info = StudyRunInfo(
        "s",
        EXPERIMENT,
        {
            "tuner.device": "cpu",
            "tuner.gpu_type": "cpu",
            "host.hostname": "a",
            "host.gpu_name": "none",
            "host.torch_version": "2.14.1",
        },
        {},
    )
    base = dict(
        number=1,
        state="COMPLETE",
        role="search",
        outcome="OK",
        reason=None,
        params={},
        derived={},
        values=(1.0,),
        constraints={},
        metrics={},
        placeholder=False,
        duplicate_of=None,
        slot=None,
        wall_time_s=None,
        eval_time_s=None,
        datetime_start=None,
        datetime_complete=None,
    )
    old = child_payload(FleetRecord(**base), info, "p").tags  # type: ignore[arg-type]
    assert old["host.hostname"] == "a" and "tuner.host" not in old, "trials from before the fleet keep the study's"
    same = child_payload(FleetRecord(**base, host="a", worker="a:12"), info, "p").tags  # type: ignore[arg-type]
    assert same["tuner.host"] == "a" and same["tuner.worker"] == "a:12" and same["host.torch_version"] == "2.14.1"
    note = "this host differs from the reference's: torch 2.14.1 vs 2.13.0"
    moved = FleetRecord(**base, host="b", worker="b:7", fingerprint_note=note)  # type: ignore[arg-type]
    other = child_payload(moved, info, "p").tags
    assert other["tuner.host"] == "b" and other["host.hostname"] == "b" and other["tuner.fingerprint_note"] == note
    assert "host.torch_version" not in other and "host.gpu_name" not in other, "another machine's facts are left out"
    assert other["tuner.gpu_type"] == "cpu"
