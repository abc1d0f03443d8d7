"""The coordinator's side of the fork server (:mod:`tuner.runner.forkserver`).

:class:`ForkServerClient` starts the server, sends launch requests from any
thread, and hands each caller its child's pid and exit status. If the server
dies, waiting callers get ``None`` as a status and ``server_exit`` says how the
server ended ("killed by signal SIGKILL", "exit status 1"); the runner records a
CRASH saying the fork server died. The next launch starts a new server.

The server runs in its own session: SIGINT or SIGTERM sent to the coordinator's process group
(a terminal's Ctrl-C, ``kill -- -PGID``) reaches the coordinator only, which decides what
happens to the trials in flight (:meth:`tuner.study.coordinator.Coordinator.interrupt`). The
server still dies with the coordinator (its stdin closes; ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import IO, Any

from tuner.secrets import child_environment


@dataclass
class _Launch:
    started: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    pid: int | None = None
    status: int | None = None
    server_exit: str | None = None  # set when the server died before reporting this launch's status
    server_pid: int = 0


class ForkServerClient:
    """A running fork server with ``preload`` modules imported; thread-safe."""

    def __init__(self, preload: list[str], python: str = sys.executable, env: dict[str, str] | None = None) -> None:
        """``env``: variables added to the server's environment (its children inherit them); the
        rest is the coordinator's without the tuner's secrets (:func:`tuner.secrets.child_environment`)."""
        self.preload = preload
        self.python = python
        self.env = dict(env or {})
        self._lock = threading.Lock()
        self._next_id = 0
        self._launches: dict[int, _Launch] = {}
        self._process: subprocess.Popen[bytes] | None = None

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [self.python, "-m", "tuner.runner.forkserver", *self.preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
                env={**child_environment(), **self.env},
                start_new_session=True,
            )  # a Ctrl-C or a signal to the coordinator's group never reaches it
            assert self._process.stdout is not None
            threading.Thread(
                target=self._read,
                args=(self._process, self._process.stdout),
                daemon=True,
                name="tuner-forkserver-reader",
            ).start()
        return self._process

    def _read(self, process: subprocess.Popen[bytes], stream: IO[bytes]) -> None:
        for line in stream:
            try:
                message: dict[str, Any] = json.loads(line)
            except ValueError:  # something the preloaded modules printed: not ours
                continue
            if not isinstance(message, dict) or "id" not in message:
                continue
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
        try:
            code: int | None = process.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        how = _describe_exit(code)
        with self._lock:  # the server is gone: release every waiter of this server
            orphans = [launch for launch in self._launches.values() if launch.server_pid == process.pid]
            self._launches = {k: v for k, v in self._launches.items() if v.server_pid != process.pid}
        for launch in orphans:
            launch.server_exit = how
            launch.started.set()
            launch.finished.set()

    def launch(self, request: str, result: str, log: str, env: dict[str, str]) -> _Launch:
        """Fork a worker for these files; returns once its pid is known (pid None: server died)."""
        with self._lock:
            process = self._ensure_started()
            self._next_id += 1
            ident = self._next_id
            launch = _Launch(server_pid=process.pid)
            self._launches[ident] = launch
            assert process.stdin is not None
            try:
                process.stdin.write(
                    (
                        json.dumps({"id": ident, "request": request, "result": result, "log": log, "env": env}) + "\n"
                    ).encode()
                )
                process.stdin.flush()
            except OSError:
                self._launches.pop(ident, None)
                launch.server_exit = _describe_exit(process.poll())
                launch.started.set()
                launch.finished.set()
                return launch
        launch.started.wait(60)
        return launch

    def close(self) -> None:
        """Stop the server (closing its stdin); running children die with it."""
        with self._lock:
            if self._process is not None:
                assert self._process.stdin is not None
                try:
                    self._process.stdin.close()
                except OSError:
                    pass
                try:
                    self._process.wait(10)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(10)
            self._process = None


def _describe_exit(code: int | None) -> str:
    """How a process ended, in words ("killed by signal SIGKILL", "exit status 1", "status unknown")."""
    if code is None:
        return "status unknown"
    if code < 0:
        number = -code
        name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
        return f"killed by signal {name}"
    return f"exit status {code}"
