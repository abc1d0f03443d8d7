"""WarmRunner: one long-lived worker process per slot that keeps the loaded model across trials.

The model is loaded once per slot (by the workload's ``setup``; the python
adapter reloads only when its ``reload_on`` parameters change), so trials pay
only for their own runs. The trade: trials on a slot share a process. To keep
results honest:

* a trial past ``timeout_s`` gets its worker's whole process tree SIGKILLed
  (``TIMEOUT``); a worker that dies (signal, exit) is classified like the
  subprocess runner's (:func:`~tuner.runner.subprocess.classify_worker_exit`);
* what a trial starts after its workload's ``setup`` is killed when the trial
  ends, by the warm worker itself (:class:`~tuner.runner.worker.TrialProcesses`);
  what ``setup`` starts stays with the kept workload. Each worker's processes are
  tagged ``<runner>/w<n>`` (:mod:`tuner.runner.reaper`): stopping a worker kills
  all of them, and a reaper sidecar kills the runner's when the coordinator dies;
* :meth:`WarmRunner.close` gives idle workers two seconds to tear their
  workloads down, then kills every process of the runner; in-flight trials are
  killed at once and return ``CRASH`` ("the runner was closed");
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

import itertools
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path

from tuner.host import oom_kill_count
from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, ScratchPolicy, Slot, TrialRequest, with_trial_disk_usage
from tuner.runner.reaper import TAG_ENV, Reaper, kill_group, kill_tagged, new_tag
from tuner.runner.subprocess import CLOSED, LOG_TAIL_CHARS, classify_worker_exit, slot_environment

KEEP_WORKER_AFTER = (Outcome.OK, Outcome.INVALID)
CLOSE_GRACE_S = 2.0
"""Seconds :meth:`WarmRunner.close` gives idle workers to tear their workloads down before killing them."""


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    control: int
    log_path: Path
    slot: Slot
    tag: str
    trials: int = 0
    busy: bool = False
    stopped: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class WarmRunner(Runner):
    """Runs requests in one warm worker per slot (see the module docstring)."""

    def __init__(
        self, python: str = sys.executable, grace_s: float = 0.0, scratch: ScratchPolicy | None = None
    ) -> None:
        """``scratch``: what to do with a trial directory over its limit (:class:`~tuner.runner.base.ScratchPolicy`)."""
        self.python = python
        self.scratch = scratch or ScratchPolicy()
        self.grace_s = grace_s
        self.tag = new_tag()
        self._reaper = Reaper(self.tag, python)
        self._numbers = itertools.count(1)
        self._generation = 0
        self._workers: dict[int, _Worker] = {}
        self._lock = threading.Lock()
        self._logs = Path(tempfile.mkdtemp(prefix="tuner-warm-"))
        self._finalizer = weakref.finalize(
            self, _stop_all, self._workers, self._lock, self._logs, self.tag, self._reaper
        )

    def close(self) -> None:
        """Stop every worker (in-flight trials at once, idle ones after a short grace) and kill their trees."""
        self._generation += 1
        _stop_all(self._workers, self._lock, self._logs, self.tag, self._reaper)

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
        self._reaper.ensure_started()
        generation = self._generation
        worker = self._worker_for(slot)
        offset = worker.log_path.stat().st_size if worker.log_path.exists() else 0
        oom_kills_before = oom_kill_count()
        started = time.perf_counter()
        try:
            replied, timed_out = self._send_and_wait(
                worker, request_path, result_path, request.timeout_s + self.grace_s
            )
        except BaseException:
            self._retire(worker)
            raise
        wall_time_s = time.perf_counter() - started
        if not replied:
            self._retire(worker)
        returncode = 0 if replied else (worker.process.returncode if worker.process.returncode is not None else -9)
        tail = _copy_log_slice(worker.log_path, offset, workdir / "worker.log")
        oom_kills_after = oom_kill_count()
        oom_kills = (
            oom_kills_after - oom_kills_before if oom_kills_before is not None and oom_kills_after is not None else 0
        )
        cause = CLOSED if generation != self._generation and not replied else None
        result = classify_worker_exit(
            returncode, timed_out, result_path, tail, request.timeout_s, wall_time_s, oom_kills=oom_kills, cause=cause
        )
        worker.trials += 1
        info = {**result.info, "warm_worker_pid": worker.process.pid, "warm_worker_trial": worker.trials}
        if result.outcome not in KEEP_WORKER_AFTER and replied:
            self._retire(worker)
            info["warm_worker_restarted"] = True
        elif generation != self._generation:
            self._retire(worker)  # closed meanwhile: close() killed it, this thread releases its pipe
        worker.busy = False
        return with_trial_disk_usage(replace(result, info=info), workdir, self.scratch)

    # ----------------------------------------------------------------- internals
    def _worker_for(self, slot: Slot) -> _Worker:
        """The slot's warm worker, started when none runs; marked busy."""
        with self._lock:
            worker = self._workers.get(slot.index)
            if worker is not None and worker.process.poll() is None and worker.slot == slot:
                worker.busy = True
                return worker
            if worker is not None:
                self._workers.pop(slot.index, None)
                _stop(worker, kill=True)
            self._logs.mkdir(parents=True, exist_ok=True)
            read_end, write_end = os.pipe()
            log_path = self._logs / f"slot_{slot.index}_{time.monotonic_ns()}.log"
            tag = f"{self.tag}/w{next(self._numbers)}"
            with open(log_path, "wb") as log:
                process = subprocess.Popen(
                    [self.python, "-m", "tuner.runner.warm_worker", str(write_end)],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(write_end,),
                    env={**slot_environment(slot), TAG_ENV: tag},
                    start_new_session=True,
                )
            os.close(write_end)
            worker = _Worker(process, read_end, log_path, slot, tag, busy=True)
            self._workers[slot.index] = worker
            return worker

    def _retire(self, worker: _Worker) -> None:
        """Kill ``worker``'s whole tree and forget it."""
        with self._lock:
            if self._workers.get(worker.slot.index) is worker:
                self._workers.pop(worker.slot.index, None)
        _stop(worker, kill=True)

    @staticmethod
    def _send_and_wait(worker: _Worker, request_path: Path, result_path: Path, timeout_s: float) -> tuple[bool, bool]:
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
            ready, _, _ = select.select([worker.control], [], [], left)  # blocks: no polling while the trial runs
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


def _stop(worker: _Worker, kill: bool, wait_s: float = 30.0) -> None:
    """End a worker (idempotent): SIGKILL its tree, or close its input (it tears down and exits) and wait.

    Either way every process tagged with the worker's tag is killed at the end.
    """
    with worker.lock:
        if worker.stopped:
            return
        worker.stopped = True
        if kill:
            _kill_tree(worker)
        try:
            if worker.process.stdin is not None:
                worker.process.stdin.close()
        except OSError:
            pass
        try:
            worker.process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            _kill_tree(worker)
            worker.process.wait(timeout=10)
        kill_tagged(worker.tag)
        try:
            os.close(worker.control)
        except OSError:
            pass


def _kill_tree(worker: _Worker) -> None:
    kill_group(worker.process.pid, leader_alive=worker.process.poll() is None)
    kill_tagged(worker.tag)


def _stop_all(workers: dict[int, _Worker], lock: threading.Lock, logs: Path, tag: str, reaper: Reaper) -> None:
    """Stop every worker: busy ones killed at once (their ``run`` cleans up), idle ones after a grace."""
    with lock:
        current = list(workers.values())
        workers.clear()
    idle = [worker for worker in current if not worker.busy]
    for worker in current:
        if worker.busy:
            _kill_tree(worker)  # its run() sees the worker die, reports CRASH and closes the pipe
    for worker in idle:
        try:
            if worker.process.stdin is not None:
                worker.process.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + CLOSE_GRACE_S
    for worker in idle:
        _stop(worker, kill=False, wait_s=max(0.0, deadline - time.monotonic()))
    kill_tagged(tag)
    reaper.close()
    shutil.rmtree(logs, ignore_errors=True)
