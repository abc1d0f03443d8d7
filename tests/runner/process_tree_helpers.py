"""Shared bits of the process-tree tests: a program that spawns a tree, requests for it, liveness checks.

Run as a script it is the coordinator side a test kills::

    python tests/runner/process_tree_helpers.py KIND WORKDIR PIDFILE

runs one command trial (the spawner, ``hang`` mode) on a ``fork`` / ``exec`` /
``warm`` runner and waits for it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]

SPAWNER = r'''
"""Spawns a tree like a launcher does, writes its pids to PIDFILE, then acts out MODE."""
import json, os, signal, subprocess, sys, time

pidfile, mode = sys.argv[1], sys.argv[2]
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
in_group = subprocess.Popen(sleep)                             # stays in the worker's process group
new_session = subprocess.Popen(sleep, start_new_session=True)  # like torchrun's ranks
daemonise = ("import subprocess, sys; p = subprocess.Popen(%r, start_new_session=True, "
             "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)" % (sleep,))
orphan = int(subprocess.run([sys.executable, "-c", daemonise], capture_output=True, text=True).stdout)
pids = {"program": os.getpid(), "worker": os.getppid(), "in_group": in_group.pid,
        "new_session": new_session.pid, "orphan": orphan}
with open(pidfile + ".tmp", "w") as handle:
    json.dump(pids, handle)
os.replace(pidfile + ".tmp", pidfile)
events = os.environ.get("TUNER_MEMORY_EVENTS")
if mode == "oom_worker" and events:
    with open(events, "w") as handle:
        handle.write("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
if mode in ("kill_worker", "oom_worker"):
    os.kill(os.getppid(), signal.SIGKILL)
if mode == "leave":
    sys.exit(0)
time.sleep(600)
'''


def write_spawner(directory: Path) -> Path:
    path = directory / "spawner.py"
    path.write_text(SPAWNER)
    return path


def spawner_request(workdir: Path, spawner: Path, pidfile: Path, mode: str, timeout_s: float = 120.0) -> Any:
    """A command trial running the spawner once (no warmup, one repeat)."""
    from tuner.runner.base import TrialRequest
    from tuner.spec.adapters import CommandSpec

    block = CommandSpec(argv=[sys.executable, str(spawner), str(pidfile), mode]).model_dump(mode="json")
    return TrialRequest(
        study_name="tree",
        trial_number=0,
        workload_class="tuner.adapters.command:CommandWorkload",
        settings={},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=timeout_s,
        workdir=str(workdir),
        workload_options={"adapter": "command", **block},
    )


def make_runner(kind: str) -> Any:
    if kind == "warm":
        from tuner.runner.warm import WarmRunner

        return WarmRunner()
    from tuner.runner.subprocess import SubprocessRunner

    return SubprocessRunner(kind)  # type: ignore[arg-type]


def wait_for_pids(pidfile: Path, timeout_s: float = 120.0) -> dict[str, int]:
    """The spawner's pids, once it has written them (fails after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not pidfile.exists():
        assert time.monotonic() < deadline, f"the spawner never wrote {pidfile}"
        time.sleep(0.05)
    pids: dict[str, int] = json.loads(pidfile.read_text())
    return pids


def processes(pids: list[int]) -> list[psutil.Process]:
    """Handles on the living ones of ``pids`` (a handle knows its start time: no pid-reuse confusion)."""
    found = []
    for pid in pids:
        try:
            found.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return found


def alive(handles: list[psutil.Process]) -> list[psutil.Process]:
    """The handles whose process still runs (a zombie counts as dead)."""
    living = []
    for handle in handles:
        try:
            if handle.is_running() and handle.status() != psutil.STATUS_ZOMBIE:
                living.append(handle)
        except psutil.NoSuchProcess:
            pass
    return living


def wait_all_dead(handles: list[psutil.Process], timeout_s: float = 15.0) -> list[psutil.Process]:
    """Poll until none of ``handles`` runs; returns the survivors after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        living = alive(handles)
        if not living or time.monotonic() > deadline:
            return living
        time.sleep(0.1)


def describe(handles: list[psutil.Process]) -> list[str]:
    out = []
    for handle in handles:
        try:
            out.append(f"{handle.pid} {' '.join(handle.cmdline())[:120]}")
        except psutil.Error:
            out.append(str(handle.pid))
    return out


def main(argv: list[str]) -> int:
    kind, workdir, pidfile = argv
    from tuner.runner.base import Slot

    spawner = write_spawner(Path(workdir))
    runner = make_runner(kind)
    runner.run(spawner_request(Path(workdir) / "trial", spawner, Path(pidfile), "hang"), Slot(0, None, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
