"""The warm worker process: serves trial after trial, keeping loaded workloads between them.

Entry point (started by :class:`~tuner.runner.warm.WarmRunner`, one per slot)::

    python -m tuner.runner.warm_worker CONTROL_FD

It reads one line per trial from stdin, ``REQUEST.json<TAB>RESULT.json``, runs the
request with :func:`tuner.runner.worker.execute` and a cache of workloads (so a
workload's ``setup`` finds its model already loaded: the python adapter reloads
only when its ``reload_on`` values change), writes the result file, then writes
``done\\n`` to ``CONTROL_FD``. Before it answers, it SIGKILLs what the trial
left running (:class:`tuner.runner.worker.TrialProcesses`: programs started after
the workload's ``setup``, tagged ``<worker tag>/<k>`` for the k-th trial, wherever
they re-parented or whatever session they started). It exits on end of input
(tearing its workloads down), and by itself within a second when its parent
dies, killing everything tagged with its own tag first. It runs in its own session (a Ctrl-C on
the coordinator's terminal does not reach it: the coordinator decides); SIGINT sent to it
alone ends it with one line in its log and status 130, never a traceback.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tuner.runner.base import TrialRequest
from tuner.runner.reaper import TAG_ENV, kill_tagged
from tuner.runner.worker import TrialProcesses, execute, write_result


def _exit_when_orphaned(parent: int) -> None:
    """A daemon thread: leave as soon as the runner that started us is gone (no orphans)."""
    tag = os.environ.get(TAG_ENV)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                if tag:
                    kill_tagged(tag)
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=watch, name="warm-worker-orphan-watch", daemon=True).start()


def serve(control_fd: int) -> None:
    """Serve requests from stdin until it closes (see module docs)."""
    kept: dict[str, Any] = {}
    own_tag = os.environ.get(TAG_ENV)
    for number, line in enumerate(sys.stdin, start=1):
        request_path, _, result_path = line.rstrip("\n").partition("\t")
        request = TrialRequest.from_json(Path(request_path).read_text())
        processes = TrialProcesses(f"{own_tag}/{number}" if own_tag else None)
        result = execute(request, keep=kept, processes=processes)
        killed = processes.kill_leftovers()
        if killed:
            print(f"warm worker: killed {killed} process(es) the trial left running", file=sys.stderr)
        write_result(result, Path(result_path))
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(control_fd, b"done\n")
    for workload in kept.values():
        try:
            workload.teardown()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tuner.runner.warm_worker CONTROL_FD", file=sys.stderr)
        return 2
    _exit_when_orphaned(os.getppid())
    try:
        serve(int(args[0]))
    except KeyboardInterrupt:  # SIGINT sent to this worker: one line in its log, never a traceback
        print("warm worker: interrupted (SIGINT); the trial in flight has no result", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
