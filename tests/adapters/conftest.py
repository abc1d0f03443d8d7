"""Fixtures of the adapter tests: the stand-in OpenAI-compatible service, started for real."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from adapter_helpers import ROOT, STANDINS


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path_factory.mktemp("standin_service") / "service.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [sys.executable, str(STANDINS / "openai_service_standin.py"), "--port", str(port)],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"stand-in service did not start: {log.read_text(errors='replace')}") from None
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=20)
