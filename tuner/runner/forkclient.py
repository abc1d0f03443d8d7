"""The coordinator's side of the fork server (:mod:`tuner.runner.forkserver`).

:class:`ForkServerClient` starts the server, sends launch requests from any
thread, and hands each caller its child's pid and exit status. If the server
dies, waiting callers get ``None`` as a status (the runner records a CRASH)
and the next launch starts a new server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import IO, Any


@dataclass
class _Launch:
    started: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    pid: int | None = None
    status: int | None = None


class ForkServerClient:
    """A running fork server with ``preload`` modules imported; thread-safe."""

    def __init__(self, preload: list[str], python: str = sys.executable) -> None:
        self.preload = preload
        self.python = python
        self._lock = threading.Lock()
        self._next_id = 0
        self._launches: dict[int, _Launch] = {}
        self._process: subprocess.Popen[bytes] | None = None

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [self.python, "-m", "tuner.runner.forkserver", *self.preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
            assert self._process.stdout is not None
            threading.Thread(target=self._read, args=(self._process.stdout,), daemon=True,
                             name="tuner-forkserver-reader").start()
        return self._process

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            message: dict[str, Any] = json.loads(line)
            with self._lock:
                launch = self._launches.get(message["id"])
            if launch is None:
                continue
            if "pid" in message:
                launch.pid = message["pid"]
                launch.started.set()
            if "status" in message:
                launch.status = message["status"]
                with self._lock:
                    self._launches.pop(message["id"], None)
                launch.finished.set()
        with self._lock:  # the server is gone: release every waiter
            orphans, self._launches = list(self._launches.values()), {}
        for launch in orphans:
            launch.started.set()
            launch.finished.set()

    def launch(self, request: str, result: str, log: str, env: dict[str, str]) -> _Launch:
        """Fork a worker for these files; returns once its pid is known (pid None: server died)."""
        with self._lock:
            process = self._ensure_started()
            self._next_id += 1
            ident = self._next_id
            launch = _Launch()
            self._launches[ident] = launch
            assert process.stdin is not None
            try:
                process.stdin.write((json.dumps({"id": ident, "request": request, "result": result,
                                                 "log": log, "env": env}) + "\n").encode())
                process.stdin.flush()
            except OSError:
                self._launches.pop(ident, None)
                launch.started.set()
                launch.finished.set()
                return launch
        launch.started.wait(60)
        return launch

    def close(self) -> None:
        """Stop the server (closing its stdin); running children die with it."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                assert self._process.stdin is not None
                self._process.stdin.close()
                try:
                    self._process.wait(10)
                except subprocess.TimeoutExpired:
                    self._process.kill()
            self._process = None
