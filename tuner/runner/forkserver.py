"""A fork server for trial workers: imports once, forks a fresh process per trial.

Started by :class:`~tuner.runner.subprocess.SubprocessRunner` as
``python -m tuner.runner.forkserver MODULE[:FUNCTION]...``. It imports the worker's
modules and the workload's module (so torch is imported here, once, but CUDA
is never initialised: that happens only in a forked child; the server sets
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` so that ``torch.cuda.is_available()`` in a
preloaded module does not initialise it, and if a preloaded module or warm-up
initialises CUDA all the same, every trial it would fork is recorded as a CRASH
naming that entry instead of failing inside CUDA), calls the warm-up
functions named as ``module:function`` (e.g. building an evaluator's network on
the CPU, so children inherit it instead of rebuilding it) — a ``module:Class`` entry is
only looked up, which imports what a package loads lazily for it —, then serves
requests line by line on stdin::

    -> {"id": 7, "request": ".../request.json", "result": ".../result.json",
        "log": ".../worker.log", "env": {...}}
    <- {"id": 7, "pid": 12345}
    <- {"id": 7, "status": 0}          # exit code, or -signal number

Each child starts a new session (its pid is its process group, so the parent
can kill its whole tree), dies with the server (``PR_SET_PDEATHSIG``), gets
the slot's environment and the log file as stdout and stderr, and runs
:func:`tuner.runner.worker.main`. The server dies with the coordinator: its
stdin closes, and it also carries ``PR_SET_PDEATHSIG``. Its environment holds the
runner's process tag (:mod:`tuner.runner.reaper`), so the runner's reaper finds
the server and every child it forked; each child's own programs carry the
trial's tag from the ``env`` of its request.

Signals: the client starts the server in its own session, so a terminal's Ctrl-C or a
signal to the coordinator's process group never reaches it or its children; the
coordinator decides (it gives trials in flight a grace, then closes the runner, which kills
them). The server also ignores SIGINT sent to it alone. Each child gets the default
SIGINT and SIGTERM handling back (so do the programs it starts); a child interrupted by
SIGINT writes one line to its log, never a traceback.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

CUDA_CHECK_VARIABLE = "PYTORCH_NVML_BASED_CUDA_CHECK"
"""Set to 1 in the server: ``torch.cuda.is_available()`` in a preloaded module then asks NVML
instead of initialising the CUDA driver (after which no forked child could use CUDA)."""


def _refuse(message: dict[str, Any], reason: str) -> int:
    """Record the trial as a CRASH saying ``reason`` instead of running it; the exit code."""
    from pathlib import Path

    from tuner.results import Outcome, TrialResult
    from tuner.runner.worker import write_result

    print(f"forkserver: {reason}", file=sys.stderr)
    write_result(TrialResult(Outcome.CRASH, reason=reason), Path(message["result"]))
    return 0


def _child(message: dict[str, Any], cuda_problem: str | None = None) -> None:
    """Runs in the forked child; never returns. ``cuda_problem``: the server initialised CUDA
    (the child records the trial as a CRASH with that reason instead of failing inside CUDA)."""
    code = 1
    try:
        os.setsid()
        from tuner.runner.worker import die_with_parent, main

        die_with_parent()
        log = os.open(message["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the trial's standard streams, for its whole life
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the server ignores it; the trial must not
        signal.set_wakeup_fd(-1)
        os.environ.clear()
        os.environ.update(message["env"])
        code = (
            _refuse(message, cuda_problem)
            if cuda_problem is not None
            else main([message["request"], message["result"]])
        )
    except KeyboardInterrupt:
        print("worker: interrupted (SIGINT) before a result was written", file=sys.stderr)
        code = 130
    except BaseException:  # noqa: BLE001 - report anything, then exit
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _status(wait_status: int) -> int:
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def _preload(preload: list[str]) -> str | None:
    """Import each ``MODULE[:NAME]`` entry of ``preload`` on one thread, calling ``NAME`` when it is a
    warm-up function, and warm the provenance cache for the workload's modules.

    An entry that fails is reported on stderr and skipped (the trial's child will crash on it). Returns
    why no forked child can use CUDA (the server initialised it while preloading an entry), else None."""
    # No thread pools may exist when we fork (OpenMP's is not fork-safe): the server computes
    # on one thread; each child sets its slot's thread count before its first parallel op.
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[variable] = "1"
    os.environ[CUDA_CHECK_VARIABLE] = "1"
    from tuner.evaluators.cuda_api import cuda_initialised_here

    cuda_problem: str | None = None
    for entry in preload:
        module, _, function = entry.partition(":")
        try:
            loaded = importlib.import_module(module)
            torch = sys.modules.get("torch")
            if torch is not None:
                torch.set_num_threads(1)
            if function:
                named = getattr(loaded, function)  # a lazily imported class resolves here, with its imports
                if not isinstance(named, type):
                    named()  # a warm-up: build a model every child inherits
        except Exception as error:  # noqa: BLE001 - the child will report it as the trial's crash
            print(f"forkserver: cannot preload {entry}: {type(error).__name__}: {error}", file=sys.stderr)
        if cuda_problem is None and cuda_initialised_here():
            cuda_problem = (
                f"the fork server initialised CUDA while preloading {entry!r}: a forked worker cannot "
                f"use CUDA then; keep CUDA out of that module's import and warm-up (initialise it in "
                f"the workload's setup), or use the exec launcher"
            )
    from tuner.runner.provenance import warm_cache

    # children inherit the git and package facts of the workload's module (a ``module:Name`` entry: the only
    # module a trial's provenance names); the worker's own modules are left out — mapping PIL to its
    # distribution alone scans every installed one (~0.5 s)
    warm_cache([entry.partition(":")[0] for entry in preload if ":" in entry])
    return cuda_problem


def _drain(fd: int) -> None:
    """Read the non-blocking ``fd`` (the signal wake-up pipe) until it is empty."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap(ids: dict[int, int], reply: Callable[[dict[str, Any]], None]) -> None:
    """Reply ``{"id", "status"}`` for every child in ``ids`` (pid → request id) that has exited, without
    blocking, and forget it; ``status`` is the exit code, or minus the signal number."""
    while ids:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if pid in ids:
            reply({"id": ids.pop(pid), "status": _status(wait_status)})


def serve(preload: list[str]) -> None:
    """Preload ``preload`` modules, then fork a child per request until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator decides (see the module docstring)
    from tuner.runner.worker import die_with_parent

    die_with_parent()
    cuda_problem = _preload(preload)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    os.set_blocking(wake_read, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    ids: dict[int, int] = {}
    buffer = b""
    out = sys.stdout

    def reply(payload: dict[str, Any]) -> None:
        out.write(json.dumps(payload) + "\n")
        out.flush()

    while True:
        for key, _ in selector.select():
            if key.data == "child":
                _drain(wake_read)
            else:
                chunk = os.read(sys.stdin.fileno(), 65536)
                if not chunk:
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        selector.close()
                        _child(message, cuda_problem)
                    ids[pid] = message["id"]
                    reply({"id": message["id"], "pid": pid})
        _reap(ids, reply)


if __name__ == "__main__":
    serve(sys.argv[1:])
