"""Process tags and the reaper: every process a trial starts dies with the trial and with the coordinator.

Why tags. A trial's processes do not stay in one process group or under one
parent: torchrun starts its ranks in new sessions, a program may daemonise a
helper, and the children of a killed worker are re-parented to init. So neither
``killpg`` nor the parent chain finds them all, and ``PR_SET_PDEATHSIG`` reaches
only the worker. Instead every process a runner starts carries the environment
variable :data:`TAG_ENV`, which every descendant inherits (``execve`` passes the
environment on; Linux shows the one a process was started with in
``/proc/<pid>/environ``). :func:`kill_tagged` SIGKILLs every process whose tag is
a given prefix or lies under it (``prefix/...``), scanning ``/proc`` again until a
scan finds none, so children forked while it kills are caught too.

Tags (``R`` is a random hex string per runner):

* ``R`` -- the runner's fork server (so the workers it forks show it too);
* ``R/t<n>`` -- a fresh trial's worker and everything it starts;
* ``R/w<n>`` -- a warm worker and what its workloads start in ``setup`` (kept with
  the loaded workload); ``R/w<n>/<k>`` -- what the warm worker's k-th trial starts
  after ``setup`` (killed when that trial ends).

The reaper (``python -m tuner.runner.reaper TAG``) is a sidecar each runner starts
in its own session (a Ctrl-C on the terminal or a ``kill`` of the coordinator's
process group does not reach it). It reads a pipe whose only writer is the
coordinator; when the pipe closes -- the coordinator exited, was SIGKILLed or
SIGTERMed, or the runner was closed -- it kills every process tagged ``TAG`` and
exits. It imports only the standard library.

Limits: a process started with a cleared environment (``env -i``) loses its tag
(it still dies with the worker's process group if it stays in it); on systems
without ``/proc`` the scan finds nothing.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection

from tuner.secrets import child_environment

TAG_ENV = "TUNER_PROCESS_TAG"
"""The environment variable that tags a runner's processes (see the module docstring)."""


def new_tag() -> str:
    """A fresh runner tag (16 hex digits)."""
    return secrets.token_hex(8)


def tagged_pids(prefix: str, exclude: Collection[int] = ()) -> list[int]:
    """Pids of the processes tagged ``prefix`` or ``prefix/...`` (never this process or ``exclude``)."""
    needle = f"{TAG_ENV}={prefix}".encode()
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    found: list[int] = []
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me or pid in exclude:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                data = handle.read()
        except OSError:  # gone, another user's, or not readable
            continue
        if needle not in data:
            continue
        if any(item == needle or item.startswith(needle + b"/") for item in data.split(b"\0")):
            found.append(pid)
    return found


def kill_tagged(prefix: str, exclude: Collection[int] = (), timeout_s: float = 5.0) -> int:
    """SIGKILL every process tagged ``prefix`` (or under it) until a scan finds none.

    Returns how many distinct processes were signalled. A killed process stops
    matching once it has exited (a zombie shows no environment); scanning stops
    after ``timeout_s`` seconds even if one is still dying (uninterruptible sleep).
    """
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while True:
        pids = tagged_pids(prefix, exclude)
        if not pids:
            return len(killed)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed.update(pids)
        if time.monotonic() > deadline:
            return len(killed)
        time.sleep(0.005)


def kill_group(pgid: int, leader_alive: bool = False) -> None:
    """SIGKILL the process group ``pgid`` (and its leader's pid when it is known alive).

    The group id stays reserved while any member lives, so this never hits a
    stranger; the leader's own pid is signalled only while it is known alive
    (it may not have reached ``setsid`` yet).
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if leader_alive:
        try:
            os.kill(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Reaper:
    """The coordinator's end of a reaper sidecar for one runner tag; thread-safe.

    :meth:`ensure_started` starts the sidecar once (again after :meth:`close`);
    :meth:`close` closes its pipe (it kills what is still tagged, then exits) and
    waits for it briefly.
    """

    def __init__(self, tag: str, python: str = sys.executable) -> None:
        self.tag = tag
        self.python = python
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def ensure_started(self) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            env = {k: v for k, v in child_environment().items() if k != TAG_ENV}
            self._process = subprocess.Popen(
                [self.python, "-m", "tuner.runner.reaper", self.tag],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def close(self, wait_s: float = 3.0) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        try:
            assert process.stdin is not None
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def serve(tag: str) -> None:
    """Wait for end of input on stdin (or SIGTERM / SIGHUP), then kill everything tagged ``tag``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGHUP, leave)
    try:
        while os.read(0, 4096):
            pass
    finally:
        kill_tagged(tag)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tuner.runner.reaper TAG", file=sys.stderr)
        return 2
    serve(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
