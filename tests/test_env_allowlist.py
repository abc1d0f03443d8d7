"""Secrets stay home: a study run with a CI's secrets in its environment records none of them (issue 36).

A real small study (``tuner run``, fake workload, three trials, MLflow at a local SQLite URI) runs as a
subprocess with the variables a user reported leaking and a realistic CI's secrets in its environment.
Neither their values nor their names reach the Optuna storage (every table of the SQLite file, the side
table ``tuner_trial_records`` included, and every file of the study directory), ``tuner show``, MLflow
(its database and artifact files) or the export (``best.yaml``), whose ``env`` lists only allow-listed
names (:mod:`tuner.runner.recorded_env`) and the spec's ``record_env``. A trial recorded with the whole
environment (as an older tuner did) is filtered the same way when exported, shown or synced.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

from tuner.runner.recorded_env import is_recorded
from tuner.secrets import MASK

SPECS = Path(__file__).parent / "specs"
RECORD_ENV = ["MYAPP_*"]

LEAKED = {  # the variables the issue reports passing unmasked, and a CI's usual secrets
    "GH_PAT": "ghp_patR3portedLeak0000000000000000000001",
    "SENTRY_DSN": "https://5entryPublicKey77@o450.ingest.sentry.io/4501",
    "DOCKER_AUTH_CONFIG": '{"auths": {"registry.example.com": {"auth": "ZG9ja2VyOmRvY2tlclB3MQ=="}}}',
    "SESSION_COOKIE": "sessionid=c00kieSecretValue42",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0A1/B0B2/slackH00kSecret",
    "CI_JOB_JWT": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJqb2IifQ.jwtSignatur3Secret",
    "NETRC": "machine github.com login ci password n3trcSecretPw",
    "GITHUB_TOKEN": "ghp_githubT0kenCI00000000000000000000002",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEYID0042",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/awsS3cretKey",
    "DATABASE_URL": "postgresql://u:dbPassw0rdSecret@db.example:5432/app",
    "DEPLOY_WEBHOOK": "https://deploy.example.com/hooks/d3ployWebhookSecret",
    "TUNER_TOKEN": "tunerBearerT0kenSecret",
}
UNRELATED = {"SSL_CERT_FILE": "/etc/ssl/certs/unrelatedBundle.pem", "CONTAINER_NAME": "ci-runner-unrelated-7"}
ALLOWED_WITH_SECRETS = {  # allow-listed names whose values still pass the masks
    "NVIDIA_API_KEY": "nvapi-nvidiaS3cretKey",
    "TUNER_NOTIFY_URL": "https://bot:n0tifyPassword@hooks.example.com/tuner",
    "MYAPP_API_TOKEN": "myappT0kenSecret",
}
RECORDED = {"NCCL_DEBUG": "WARN", "MYAPP_MODE": "fast"}  # not OMP_NUM_THREADS: the slot sets it from the idle cores

SECRET_VALUES = [
    *LEAKED.values(),
    "ZG9ja2VyOmRvY2tlclB3MQ==",
    "5entryPublicKey77",
    "slackH00kSecret",
    "dbPassw0rdSecret",
    "d3ployWebhookSecret",
    "jwtSignatur3Secret",
    "n3trcSecretPw",
    "nvapi-nvidiaS3cretKey",
    "n0tifyPassword",
    "myappT0kenSecret",
    *UNRELATED.values(),
]
FORBIDDEN_NAMES = [name for name in [*LEAKED, *UNRELATED] if name != "TUNER_TOKEN"]
# TUNER_TOKEN is allow-listed (the tuner's own) and masked, but never reaches a worker (child_environment)


def tuner(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, f"tuner {' '.join(args)}: {done.stderr[-2000:]}"
    return done


def ci_environment() -> dict[str, str]:
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": "",
        "TUNER_STORAGE": "",
        **LEAKED,
        **UNRELATED,
        **ALLOWED_WITH_SECRETS,
        **RECORDED,
    }


def leaks(text: str, names: Iterable[str] = FORBIDDEN_NAMES) -> list[str]:
    """The secret values and forbidden names found in ``text``."""
    return [value for value in SECRET_VALUES if value in text] + [name for name in names if name in text]


def files_text(root: Path) -> str:
    """Every file under ``root``, as text (bytes that are not UTF-8 replaced): SQLite stores strings as written."""
    return "\n".join(path.read_bytes().decode("utf-8", "replace") for path in sorted(root.rglob("*")) if path.is_file())


def database_dump(db: Path) -> str:
    with sqlite3.connect(db) as connection:
        return "\n".join(connection.iterdump())


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory where ``tuner run`` ran a 3-trial fake study ``demo`` with :func:`ci_environment`."""
    root = tmp_path_factory.mktemp("env_allowlist")
    spec = yaml.safe_load((SPECS / "fake_ok.yaml").read_text())
    spec["budget"] = {"trials": 3}
    spec["record_env"] = RECORD_ENV
    (root / "spec.yaml").write_text(yaml.safe_dump(spec))
    tuner("run", str(root / "spec.yaml"), "--study-name", "demo", cwd=root, env=ci_environment())
    return root


def mlflow_runs(db: Path) -> int:
    with sqlite3.connect(db) as connection:
        return int(connection.execute("SELECT count(*) FROM runs").fetchone()[0])


def side_table_envs(db: Path) -> list[dict[str, str]]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT value_json FROM tuner_trial_records WHERE name = 'env'").fetchall()
    return [json.loads(value) for (value,) in rows]


def test_no_secret_reaches_the_storage_show_mlflow_or_the_export(home: Path) -> None:
    db = home / "studies" / "studies.db"
    envs = side_table_envs(db)
    assert len(envs) == 3, "every measured trial recorded its environment in the side table"
    for env in envs:
        assert all(is_recorded(name, RECORD_ENV) for name in env), sorted(env)
        assert env["NCCL_DEBUG"] == "WARN" and env["MYAPP_MODE"] == "fast", "allow-listed and record_env kept"
        assert env["NVIDIA_API_KEY"] == MASK and env["MYAPP_API_TOKEN"] == MASK
        assert env["TUNER_NOTIFY_URL"] == f"https://bot:{MASK}@hooks.example.com/tuner"
    assert leaks(database_dump(db)) == [], "the Optuna storage, every table"
    assert leaks(files_text(home / "studies")) == [], "the study directory: database, trial files, best.yaml"

    exported = yaml.safe_load((home / "studies" / "demo" / "best.yaml").read_text())
    assert exported["env"] and all(is_recorded(name, RECORD_ENV) for name in exported["env"]), exported["env"]
    assert exported["env"]["MYAPP_MODE"] == "fast" and exported["env"]["NVIDIA_API_KEY"] == MASK
    assert leaks(yaml.safe_dump(exported)) == []

    trial = str(exported["provenance"]["trial"])
    for args in (("show", "demo", trial), ("show", "demo", trial, "--json")):
        assert leaks(tuner(*args, cwd=home, env=ci_environment()).stdout) == [], args

    assert mlflow_runs(home / "mlflow" / "mlflow.db") >= 4, "the study run and a child run per trial"
    assert leaks(files_text(home / "mlflow")) == [] and leaks(database_dump(home / "mlflow" / "mlflow.db")) == []


def test_a_trial_recorded_with_the_whole_environment_is_filtered_when_read(home: Path, tmp_path: Path) -> None:
    """The side records rewritten as an older tuner wrote them (the worker's whole environment, names masked
    by name only): the export, ``tuner show`` and a rebuilt MLflow view still carry no secret."""
    shutil.copytree(home / "studies", tmp_path / "studies")
    whole = {**os.environ, **LEAKED, **UNRELATED, **RECORDED, "PATH": "/usr/bin:/bin"}
    with sqlite3.connect(tmp_path / "studies" / "studies.db") as connection:
        connection.execute("UPDATE tuner_trial_records SET value_json = ? WHERE name = 'env'", (json.dumps(whole),))
    assert any(LEAKED["GH_PAT"] in str(env) for env in side_table_envs(tmp_path / "studies" / "studies.db"))

    tuner("export", "demo", "-o", str(tmp_path / "old.yaml"), cwd=tmp_path, env=ci_environment())
    exported = yaml.safe_load((tmp_path / "old.yaml").read_text())
    assert set(exported["env"]) == {name for name in whole if is_recorded(name, RECORD_ENV)}
    assert exported["env"]["MYAPP_MODE"] == "fast", "the stored spec's record_env applies to older records"
    assert "PATH" not in exported["env"] and leaks(yaml.safe_dump(exported)) == []

    trial = str(exported["provenance"]["trial"])
    assert leaks(tuner("show", "demo", trial, "--json", cwd=tmp_path, env=ci_environment()).stdout) == []
    tuner("sync-mlflow", "demo", cwd=tmp_path, env=ci_environment())
    assert mlflow_runs(tmp_path / "mlflow" / "mlflow.db") >= 4, "the views rebuilt in a new store"
    assert leaks(files_text(tmp_path / "mlflow")) == []
