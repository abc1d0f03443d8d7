"""Fixtures of the adapter tests: the stand-in OpenAI-compatible service, started for real; one torch thread
and the diffusers factory's tiny Wan model (seeded random weights, fp32, on the CPU)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from adapter_helpers import ROOT, STANDINS


@pytest.fixture
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One torch thread, offline hub: light on a shared CI machine, and no network."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny() -> Any:
    """The diffusers factory's tiny Wan model, loaded in fp32 (one per test module)."""
    from tuner.adapters.factories.diffusers_video import make_video_pipeline

    model = make_video_pipeline(weights="random", architecture="tiny", device="cpu", seed=0)
    model.load({"precision": "fp32"})
    return model


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
