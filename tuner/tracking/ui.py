"""``tuner ui``: the MLflow UI on the configured tracking store, and the study run's URL.

For a local store (``sqlite:///...``) this starts ``mlflow server`` on
``host:port`` (127.0.0.1 by default: not reachable from other machines) as a
child process in its own process group, waits for its health check, and
prints the URL of the study's parent run. For an HTTP tracking server nothing
is started: the URL points into that server.

URLs follow the MLflow UI's routes:
``<base>/#/experiments/<experiment id>/runs/<run id>``; the comparison view of a study's trials
is ``<base>/#/experiments/<experiment id>/runs?viewStateShareKey=tuner-<study>``
(:func:`compare_url`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import HostError
from tuner.secrets import redact_url
from tuner.tracking.writer import artifact_root_for


class UiError(HostError, RuntimeError):
    """The UI could not start or the study has no run; the message says why."""


@dataclass(frozen=True)
class StudyLocation:
    """Where a study's views live in a tracking store."""

    experiment_id: str
    experiment_name: str
    run_id: str | None


def run_url(base_url: str, location: StudyLocation) -> str:
    """The study run's page (or its experiment's when it has no run); credentials in ``base_url``
    are masked (:func:`tuner.secrets.redact_url`): the browser asks for them."""
    base = redact_url(base_url).rstrip("/")
    if location.run_id is None:
        return f"{base}/#/experiments/{location.experiment_id}"
    return f"{base}/#/experiments/{location.experiment_id}/runs/{location.run_id}"


def compare_url(base_url: str, location: StudyLocation, study_name: str) -> str:
    """The experiment's runs table opened on the study's comparison view (trial runs only, objectives,
    front flag, outcome and key parameters as the first columns: :mod:`tuner.tracking.comparison`)."""
    from tuner.tracking.comparison import view_key

    base = redact_url(base_url).rstrip("/")
    return f"{base}/#/experiments/{location.experiment_id}/runs?viewStateShareKey={view_key(study_name)}"


def locate_study(uri: str, experiment_name: str, study_name: str) -> StudyLocation | None:
    """The experiment and parent run of ``study_name`` in the store at ``uri`` (None: no experiment)."""
    from mlflow.tracking import MlflowClient

    from tuner.tracking.writer import find_parent_run

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return None
    experiment_id = str(experiment.experiment_id)
    return StudyLocation(experiment_id, experiment_name, find_parent_run(client, experiment_id, study_name))


def wait_healthy(base_url: str, timeout_s: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until ``<base_url>/health`` answers 200; raises :class:`UiError` on timeout or exit."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise UiError(f"mlflow server exited with status {process.returncode} before it answered")
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise UiError(f"{redact_url(base_url)} did not answer its health check within {timeout_s:g} s")


def start_server(uri: str, host: str, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``mlflow server`` on a local store (own process group; output to ``log_path``)."""
    if not uri.startswith("sqlite:///"):
        raise UiError(f"tuner ui starts a server only for a local sqlite store, not {redact_url(uri)}")
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        uri,
        "--host",
        host,
        "--port",
        str(port),
    ]
    root = artifact_root_for(uri)
    if root is not None:
        command += ["--artifacts-destination", root]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "MLFLOW_LOGGING_LEVEL": "WARNING"},
        )


def stop_server(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the server's process group, SIGKILL after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)  # the whole group: uvicorn workers too
        except ProcessLookupError:
            break
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            continue
