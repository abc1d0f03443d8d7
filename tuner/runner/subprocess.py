"""SubprocessRunner: every trial in a fresh worker process, watched from outside.

The worker runs in its own process group (so a timeout kills the whole tree),
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
from pathlib import Path

from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest

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


class SubprocessRunner(Runner):
    """Runs each request as ``python -m tuner.runner.worker`` in a new process."""

    def __init__(self, python: str = sys.executable, grace_s: float = 0.0) -> None:
        self.python = python
        self.grace_s = grace_s

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        workdir = Path(request.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        request_path, result_path, log_path = (workdir / n for n in ("request.json", "result.json", "worker.log"))
        request_path.write_text(request.to_json())
        result_path.unlink(missing_ok=True)
        started = time.perf_counter()
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
                _kill_group(process)
            except BaseException:
                _kill_group(process)
                raise
        wall_time_s = time.perf_counter() - started
        _kill_group(process)  # leftovers of a finished worker (children it spawned)
        return self._classify(process.returncode, timed_out, result_path, log_path, request, wall_time_s)

    def _classify(self, returncode: int, timed_out: bool, result_path: Path, log_path: Path,
                  request: TrialRequest, wall_time_s: float) -> TrialResult:
        tail = read_log_tail(log_path)
        if timed_out:
            return TrialResult(Outcome.TIMEOUT, reason=f"no result after {request.timeout_s:g} s: killed",
                               log_tail=tail, wall_time_s=wall_time_s)
        if returncode == 0 and result_path.exists():
            result = TrialResult.from_json(result_path.read_text())
            log_tail = result.log_tail + ("\n--- worker log ---\n" + tail if tail.strip() else "")
            return TrialResult(
                outcome=result.outcome, metrics=result.metrics, reason=result.reason,
                log_tail=log_tail[-LOG_TAIL_CHARS:], wall_time_s=wall_time_s,
                eval_time_s=result.eval_time_s, output_path=result.output_path, info=result.info)
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


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
