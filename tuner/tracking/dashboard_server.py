"""The real ``optuna-dashboard`` server on a view storage (:mod:`tuner.tracking.dashboard`).

:func:`start_dashboard` runs optuna-dashboard's own entry point (``optuna_dashboard._cli``,
the target of its ``optuna-dashboard`` console script) with this interpreter, as a child
in its own process group (its output to a log file), on ``host:port`` (127.0.0.1 by
default: not reachable from other machines), with its single-process ``wsgiref`` server.
:func:`wait_ready` polls ``GET /api/meta`` until it answers 200 (or the caller is stopped). Stop it with
:func:`tuner.tracking.ui.stop_server` (SIGTERM to the group, SIGKILL after a grace).
A study's page is ``<base>/dashboard/studies/<view study id>`` (:func:`study_page`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tuner.errors import HostError
from tuner.secrets import redact_url


class DashboardError(HostError, RuntimeError):
    """optuna-dashboard could not start or did not answer; the message says why."""


def start_dashboard(view_url: str, host: str, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """Start optuna-dashboard on ``view_url`` at ``host:port``; its output goes to ``log_path``."""
    command = [
        sys.executable,
        "-m",
        "optuna_dashboard._cli",
        view_url,
        "--host",
        host,
        "--port",
        str(port),
        "--server",
        "wsgiref",
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(os.environ),
        )


def wait_ready(
    base_url: str, timeout_s: float, process: subprocess.Popen[bytes] | None = None, stop: threading.Event | None = None
) -> bool:
    """Wait until ``<base_url>/api/meta`` answers 200 (True), or until ``stop`` is set (False: the caller
    was asked to stop while the server started); :class:`DashboardError` when the process exits first or
    ``timeout_s`` seconds pass."""
    deadline = time.monotonic() + timeout_s
    stop = stop or threading.Event()
    while time.monotonic() < deadline and not stop.is_set():
        if process is not None and process.poll() is not None:
            raise DashboardError(f"optuna-dashboard exited with status {process.returncode} before it answered")
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + "/api/meta", timeout=5) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        stop.wait(0.3)
    if stop.is_set():
        return False
    raise DashboardError(f"{redact_url(base_url)} did not answer within {timeout_s:g} s")


def study_page(base_url: str, study_id: int) -> str:
    """The dashboard's page of the view study ``study_id``."""
    return f"{base_url.rstrip('/')}/dashboard/studies/{study_id}"
