"""The harness of the service tests: ``tuner serve``'s app in a real uvicorn server on a free port of
127.0.0.1, over a real SQLite storage, talked to over real HTTP (``http.client``)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_SPEC = ROOT / "tests" / "specs" / "fake_ok.yaml"
TOKEN = "fleet-test-token-0123456789abcdef"
SECRET = "s3cr3tPW-fleet-storage"  # the storage password: never in an answer, a log line or an export
_DEFAULT = object()
_FAKE_WORKLOAD = "workload:\n  class: tuner.workloads.fake:FakeWorkload\n  timeout_s: 20\n"


def spec_text(workload: str | None = None) -> str:
    """The fake CPU spec of the tests, with another ``workload:`` block when given."""
    text = FAKE_SPEC.read_text()
    assert _FAKE_WORKLOAD in text
    return text if workload is None else text.replace(_FAKE_WORKLOAD, workload)


COMMAND_SPEC = spec_text(
    "workload:\n  command:\n    argv: [prog, --noise, '{noise}']\n  timeout_s: 20\n  device: cpu\n"
)
PYTHON_SPEC = spec_text(
    "workload:\n  python:\n    factory: subprocess:run\n    kwargs: {args: ['true']}\n  timeout_s: 20\n  device: cpu\n"
)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


@dataclass(frozen=True)
class Service:
    """A running service: its base URL, token and the storage URL it serves."""

    url: str
    token: str | None
    storage_url: str

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: Any = _DEFAULT,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Answer:
        """One HTTP request (the path sent as given, not normalised); the token is the service's by default."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        sent = dict(headers or {})
        chosen = self.token if token is _DEFAULT else token
        if chosen is not None:
            sent["Authorization"] = f"Bearer {chosen}"
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            return Answer(
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                response.read().decode("utf-8", "replace"),
            )
        finally:
            connection.close()

    def submit(self, name: str | None, spec: str | None = None, **fields: Any) -> Answer:
        return self.request(
            "POST",
            "/api/studies",
            {"spec_yaml": spec or spec_text(), "name": name, "gpu_type": fields.pop("gpu_type", "cpu"), **fields},
        )


@contextmanager
def running_service(
    storage_url: str,
    token: str | None = TOKEN,
    allow_command_workloads: bool = False,
    max_body_bytes: int | None = None,
) -> Iterator[Service]:
    """``create_app`` served by a real uvicorn server in a thread, on a free port of 127.0.0.1."""
    import uvicorn

    from tuner.fleet.service import MAX_BODY_BYTES, create_app, listening_socket, service_url

    app = create_app(storage_url, token, allow_command_workloads, max_body_bytes or MAX_BODY_BYTES)
    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
        time.sleep(0.02)
    try:
        yield Service(service_url(sock), token, storage_url)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture
def storage_url(tmp_path: Path) -> str:
    """A SQLite storage in tmp_path whose URL carries a password (SQLite ignores it; redaction must not)."""
    return f"sqlite:///{tmp_path / 'studies.db'}?password={SECRET}"


@pytest.fixture
def service(storage_url: str) -> Iterator[Service]:
    with running_service(storage_url) as running:
        yield running
