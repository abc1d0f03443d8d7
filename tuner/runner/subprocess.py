"""SubprocessRunner: every trial in a fresh worker process, watched from outside.

Two ways to start the worker, both one new process per trial:

* ``launcher="fork"`` (default): forked from a fork server
  (:mod:`tuner.runner.forkserver`) that has already imported the worker's
  modules and the workload's module (torch included, CUDA never
  initialised), so a trial starts in milliseconds instead of paying
  interpreter start-up and imports each time;
* ``launcher="exec"``: a new interpreter, ``python -m tuner.runner.worker``.

The worker runs in its own session / process group (so a timeout kills the whole tree),
pinned to its slot through ``CUDA_VISIBLE_DEVICES`` and thread-count variables,
with stdout and stderr in ``<workdir>/worker.log``. How a death is classified:

* result file written: the worker's own verdict (OK / OOM / INVALID / CRASH);
* past ``timeout_s``: process group SIGKILLed, ``TIMEOUT``;
* killed by SIGKILL not sent by us: the kernel OOM killer, ``OOM``;
* any other signal or exit without a result: ``CRASH`` (``OOM`` when the log
  shows an out-of-memory message).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Literal

from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.runner.forkclient import ForkServerClient

LOG_TAIL_CHARS = 4000
_OOM_LOG_MARKERS = ("out of memory", "OutOfMemoryError", "MemoryError", "CUBLAS_STATUS_ALLOC_FAILED")
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TUNER_TORCH_THREADS")


def read_log_tail(path: Path, limit: int = LOG_TAIL_CHARS) -> str:
    """The last ``limit`` characters of a log file ('' when missing)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def slot_environment(slot: Slot, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a worker on ``slot``: GPU pinning and thread counts."""
    env = dict(os.environ if base is None else base)
    if slot.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.cuda_visible_devices
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    for name in _THREAD_VARIABLES:
        env[name] = str(slot.threads)
    env["PYTHONUNBUFFERED"] = "1"
    return env


Launcher = Literal["fork", "exec"]
WORKER_MODULES = ["tuner.runner.worker", "evaluators.latency", "evaluators.memory", "evaluators.registry",
                  "evaluators.video", "tuner.workloads.base", "numpy", "psutil"]


class SubprocessRunner(Runner):
    """Runs each request in a new worker process (see the module docstring)."""

    def __init__(self, launcher: Launcher = "fork", python: str = sys.executable, grace_s: float = 0.0,
                 preload: list[str] | None = None) -> None:
        """``preload``: extra modules the fork server imports once (the workload's module)."""
        if launcher not in ("fork", "exec"):
            raise ValueError(f"launcher must be 'fork' or 'exec', not {launcher!r}")
        self.launcher = launcher
        self.python = python
        self.grace_s = grace_s
        self._forks = ForkServerClient(WORKER_MODULES + list(preload or []), python) if launcher == "fork" else None
        if self._forks is not None:
            weakref.finalize(self, self._forks.close)  # a forgotten runner still stops its server

    def close(self) -> None:
        if self._forks is not None:
            self._forks.close()

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        workdir = Path(request.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        request_path, result_path, log_path = (workdir / n for n in ("request.json", "result.json", "worker.log"))
        request_path.write_text(request.to_json())
        result_path.unlink(missing_ok=True)
        started = time.perf_counter()
        if self.launcher == "fork":
            returncode, timed_out = self._run_forked(request, slot, request_path, result_path, log_path)
        else:
            returncode, timed_out = self._run_exec(request, slot, request_path, result_path, log_path)
        wall_time_s = time.perf_counter() - started
        return self._classify(returncode, timed_out, result_path, log_path, request, wall_time_s)

    def _run_exec(self, request: TrialRequest, slot: Slot, request_path: Path, result_path: Path,
                  log_path: Path) -> tuple[int, bool]:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [self.python, "-m", "tuner.runner.worker", str(request_path), str(result_path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=slot_environment(slot), start_new_session=True)
            timed_out = False
            try:
                process.wait(timeout=request.timeout_s + self.grace_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(process.pid, leader_alive=process.poll() is None)
                process.wait(timeout=10)
        return process.returncode, timed_out

    def _run_forked(self, request: TrialRequest, slot: Slot, request_path: Path, result_path: Path,
                    log_path: Path) -> tuple[int, bool]:
        assert self._forks is not None
        launch = self._forks.launch(str(request_path), str(result_path), str(log_path), slot_environment(slot))
        if launch.pid is None:
            return _SERVER_DIED, False
        finished = launch.finished.wait(request.timeout_s + self.grace_s)
        _kill_group(launch.pid, leader_alive=not finished)
        if not finished:
            launch.finished.wait(10)
            return -signal.SIGKILL, True
        return (launch.status if launch.status is not None else _SERVER_DIED), False

    def _classify(self, returncode: int, timed_out: bool, result_path: Path, log_path: Path,
                  request: TrialRequest, wall_time_s: float) -> TrialResult:
        return classify_worker_exit(returncode, timed_out, result_path, read_log_tail(log_path),
                                    request.timeout_s, wall_time_s)


def classify_worker_exit(returncode: int, timed_out: bool, result_path: Path, tail: str, timeout_s: float,
                         wall_time_s: float) -> TrialResult:
    """The result of a worker that ended (see the module docstring for the rules).

    ``tail`` is the end of the worker's log for this trial; ``wall_time_s`` the
    time seen from outside, which replaces the worker's own figure.
    """
    if timed_out:
        return TrialResult(Outcome.TIMEOUT, reason=f"no result after {timeout_s:g} s: killed",
                           log_tail=tail, wall_time_s=wall_time_s)
    if returncode == 0 and result_path.exists():
        result = TrialResult.from_json(result_path.read_text())
        log_tail = result.log_tail + ("\n--- worker log ---\n" + tail if tail.strip() else "")
        return replace(result, log_tail=log_tail[-LOG_TAIL_CHARS:], wall_time_s=wall_time_s)
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        if -returncode == signal.SIGKILL:
            return TrialResult(Outcome.OOM, reason="worker killed by SIGKILL (the kernel's OOM killer)",
                               log_tail=tail, wall_time_s=wall_time_s)
        outcome = Outcome.OOM if any(m in tail for m in _OOM_LOG_MARKERS) else Outcome.CRASH
        return TrialResult(outcome, reason=f"worker died of signal {name}", log_tail=tail,
                           wall_time_s=wall_time_s)
    outcome = Outcome.OOM if any(m in tail for m in _OOM_LOG_MARKERS) else Outcome.CRASH
    return TrialResult(outcome, reason=f"worker exited with status {returncode} without a result",
                       log_tail=tail, wall_time_s=wall_time_s)


_SERVER_DIED = 254


def _kill_group(pid: int, leader_alive: bool) -> None:
    """SIGKILL the worker's process group (the worker and anything it started).

    The group id stays reserved while any member lives, so this never hits a
    stranger; the worker's own pid is signalled only while it is known alive
    (it may not have reached ``setsid`` yet).
    """
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if leader_alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
