"""WarmRunner: one long-lived worker process per slot that keeps the loaded model across trials.

The model is loaded once per slot (by the workload's ``setup``; the python
adapter reloads only when its ``reload_on`` parameters change), so trials pay
only for their own runs. The trade: trials on a slot share a process. To keep
results honest:

* a trial past ``timeout_s`` gets its worker's whole process group SIGKILLed
  (``TIMEOUT``); a worker that dies (signal, exit) is classified like the
  subprocess runner's (:func:`~tuner.runner.subprocess.classify_worker_exit`);
* after any outcome other than ``OK`` or ``INVALID`` the worker is stopped and a
  fresh one starts with the next trial (an OOM may leave a fragmented allocator,
  a crash an unknown state);
* each trial's slice of the worker's log is copied to ``<trial>/worker.log`` and
  its tail reported.

Peak memory is the worker's process tree during the trial's runs (the sampler
and allocator peaks are reset per trial); host RSS of a warm worker includes the
model loaded earlier, as in production serving.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.runner.subprocess import LOG_TAIL_CHARS, classify_worker_exit, slot_environment

KEEP_WORKER_AFTER = (Outcome.OK, Outcome.INVALID)


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    control: int
    log_path: Path
    slot: Slot
    trials: int = 0


class WarmRunner(Runner):
    """Runs requests in one warm worker per slot (see the module docstring)."""

    def __init__(self, python: str = sys.executable, grace_s: float = 0.0) -> None:
        self.python = python
        self.grace_s = grace_s
        self._workers: dict[int, _Worker] = {}
        self._lock = threading.Lock()
        self._logs = Path(tempfile.mkdtemp(prefix="tuner-warm-"))
        self._finalizer = weakref.finalize(self, _stop_all, self._workers, self._logs)

    def close(self) -> None:
        self._finalizer()

    def worker_pid(self, slot: Slot) -> int | None:
        """The pid of the slot's warm worker (None when none runs)."""
        worker = self._workers.get(slot.index)
        return worker.process.pid if worker is not None and worker.process.poll() is None else None

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        workdir = Path(request.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        request_path, result_path = workdir / "request.json", workdir / "result.json"
        request_path.write_text(request.to_json())
        result_path.unlink(missing_ok=True)
        worker = self._worker_for(slot)
        offset = worker.log_path.stat().st_size if worker.log_path.exists() else 0
        started = time.perf_counter()
        replied, timed_out = self._send_and_wait(worker, request_path, result_path,
                                                 request.timeout_s + self.grace_s)
        wall_time_s = time.perf_counter() - started
        if not replied:
            _stop(worker, kill=True)
            self._workers.pop(slot.index, None)
        returncode = 0 if replied else (worker.process.returncode if worker.process.returncode is not None else -9)
        tail = _copy_log_slice(worker.log_path, offset, workdir / "worker.log")
        result = classify_worker_exit(returncode, timed_out, result_path, tail, request.timeout_s, wall_time_s)
        worker.trials += 1
        info = {**result.info, "warm_worker_pid": worker.process.pid, "warm_worker_trial": worker.trials}
        if result.outcome not in KEEP_WORKER_AFTER and replied:
            _stop(worker, kill=True)
            self._workers.pop(slot.index, None)
            info["warm_worker_restarted"] = True
        return replace(result, info=info)

    # ----------------------------------------------------------------- internals
    def _worker_for(self, slot: Slot) -> _Worker:
        with self._lock:
            worker = self._workers.get(slot.index)
            if worker is not None and worker.process.poll() is None and worker.slot == slot:
                return worker
            if worker is not None:
                _stop(worker, kill=True)
            read_end, write_end = os.pipe()
            log_path = self._logs / f"slot_{slot.index}_{time.monotonic_ns()}.log"
            with open(log_path, "wb") as log:
                process = subprocess.Popen(
                    [self.python, "-m", "tuner.runner.warm_worker", str(write_end)],
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_end,),
                    env=slot_environment(slot), start_new_session=True)
            os.close(write_end)
            worker = _Worker(process, read_end, log_path, slot)
            self._workers[slot.index] = worker
            return worker

    @staticmethod
    def _send_and_wait(worker: _Worker, request_path: Path, result_path: Path,
                       timeout_s: float) -> tuple[bool, bool]:
        """(replied, timed_out) for one request sent to ``worker``."""
        assert worker.process.stdin is not None
        try:
            worker.process.stdin.write(f"{request_path}\t{result_path}\n".encode())
            worker.process.stdin.flush()
        except (BrokenPipeError, OSError):
            worker.process.wait(timeout=10)
            return False, False
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False, True
            ready, _, _ = select.select([worker.control], [], [], min(left, 1.0))
            if ready:
                data = os.read(worker.control, 64)
                if data:
                    return True, False
                worker.process.wait(timeout=10)  # EOF: the worker died
                return False, False


def _copy_log_slice(log_path: Path, offset: int, target: Path) -> str:
    """Copy the log written since ``offset`` to ``target``; return its tail."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
    except OSError:
        text = ""
    target.write_text(text)
    return text[-LOG_TAIL_CHARS:]


def _stop(worker: _Worker, kill: bool) -> None:
    """End a worker: close its input (it tears down and exits) or SIGKILL its process group."""
    if kill:
        try:
            os.killpg(worker.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        if worker.process.stdin is not None:
            worker.process.stdin.close()
    except OSError:
        pass
    try:
        worker.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait(timeout=10)
    try:
        os.close(worker.control)
    except OSError:
        pass


def _stop_all(workers: dict[int, _Worker], logs: Path) -> None:
    for worker in list(workers.values()):
        _stop(worker, kill=False)
    workers.clear()
    shutil.rmtree(logs, ignore_errors=True)
