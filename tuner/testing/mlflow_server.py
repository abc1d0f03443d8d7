"""A real ``mlflow server`` on a free localhost port, for tests (SQLite or a given backend store,
proxied artifacts in a local folder).

Not simulated: it is MLflow's own server process, started with the same
helpers ``tuner ui`` uses, in its own process group, and always stopped.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tuner.host import free_port
from tuner.tracking.ui import stop_server, wait_healthy


@dataclass
class MlflowServer:
    """A running server: its URL, backend store, artifact folder, process and log."""

    url: str
    backend_uri: str
    artifacts: Path
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        stop_server(self.process)


def start_mlflow_server(
    folder: Path, port: int | None = None, timeout_s: float = 240.0, backend_uri: str | None = None
) -> MlflowServer:
    """Start a server whose store is ``backend_uri`` (default ``sqlite:///folder/mlflow.db``; e.g. a
    ``postgresql+psycopg://`` URL) and whose artifacts are proxied into ``folder/artifacts``
    (``--artifacts-destination``: clients upload and download through the server)."""
    from tuner.secrets import redact_text

    folder.mkdir(parents=True, exist_ok=True)
    backend = backend_uri or f"sqlite:///{folder / 'mlflow.db'}"
    artifacts = folder / "artifacts"
    port = port or free_port()
    log = folder / f"server-{port}.log"
    with open(log, "ab") as handle:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                backend,
                "--artifacts-destination",
                str(artifacts),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = MlflowServer(f"http://127.0.0.1:{port}", backend, artifacts, process, log)
    try:
        wait_healthy(server.url, timeout_s, process)
    except Exception:
        server.stop()
        raise RuntimeError(f"mlflow server did not start: {redact_text(log.read_text()[-2000:])}") from None
    return server


@contextmanager
def running_mlflow_server(
    folder: Path, port: int | None = None, backend_uri: str | None = None
) -> Iterator[MlflowServer]:
    """:func:`start_mlflow_server`, stopped on exit."""
    server = start_mlflow_server(folder, port, backend_uri=backend_uri)
    try:
        yield server
    finally:
        server.stop()
