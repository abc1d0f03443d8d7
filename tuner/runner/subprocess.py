"""SubprocessRunner: every trial in a fresh worker process, watched from outside.

Two ways to start the worker, both one new process per trial:

* ``launcher="fork"`` (default): forked from a fork server
  (:mod:`tuner.runner.forkserver`) that has already imported the worker's
  modules and the workload's module (torch included, CUDA never
  initialised), so a trial starts in milliseconds instead of paying
  interpreter start-up and imports each time;
* ``launcher="exec"``: a new interpreter, ``python -m tuner.runner.worker``.

The worker runs in its own session / process group, pinned to its slot through
``CUDA_VISIBLE_DEVICES`` and thread-count variables, with stdout and stderr in
``<workdir>/worker.log``. Every process of the trial carries the process tag
``<runner>/t<n>`` (:mod:`tuner.runner.reaper`); when the trial ends -- result,
timeout, death of the worker or of the fork server, :meth:`SubprocessRunner.close`
-- its process group and every tagged process are SIGKILLed, wherever they
re-parented and whatever session they started (torchrun's ranks). A reaper
sidecar kills everything tagged with the runner's tag when the coordinator dies
(SIGKILL, SIGTERM, exit) or the runner is closed.

How a death is classified (:func:`classify_worker_exit`):

* result file written: the worker's own verdict (OK / OOM / INVALID / CRASH);
* past ``timeout_s``: ``TIMEOUT``;
* the runner was closed meanwhile, or the fork server died: ``CRASH`` saying so
  ("the fork server died while the trial ran (killed by signal SIGKILL) ...");
* otherwise without a result: ``OOM`` only on evidence -- the cgroup's
  ``oom_kill`` count rose during the trial (:func:`tuner.host.oom_kill_count`)
  or the log shows an out-of-memory message; else ``CRASH``. A SIGKILL nobody
  can explain is a ``CRASH`` whose reason says it was not sent by the tuner.
"""

from __future__ import annotations

import itertools
import math
import os
import select
import signal
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from tuner.host import oom_kill_count
from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, ScratchPolicy, Slot, TrialRequest, with_trial_disk_usage
from tuner.runner.forkclient import ForkServerClient
from tuner.runner.reaper import TAG_ENV, Reaper, kill_group, kill_tagged, new_tag
from tuner.secrets import child_environment

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
    """The environment for a worker on ``slot``: ``base`` (default ``os.environ``) without the
    tuner's secrets (:func:`tuner.secrets.child_environment`), with GPU pinning and thread counts.
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: the slot's ``CUDA_VISIBLE_DEVICES`` holds NVML indices (PCI
    order); CUDA's own default order (fastest first) may number the devices differently."""
    env = child_environment(base)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the slot's indices are NVML's, which count in PCI order
    if slot.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.cuda_visible_devices
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    for name in _THREAD_VARIABLES:
        env[name] = str(slot.threads)
    env["PYTHONUNBUFFERED"] = "1"
    return env


Launcher = Literal["fork", "exec"]
WORKER_MODULES = [
    "tuner.runner.worker",
    "tuner.evaluators.latency",
    "tuner.evaluators.memory",
    "tuner.evaluators.registry",
    "tuner.evaluators.video",
    "tuner.workloads.base",
    "numpy",
    "numpy.ma",
    "psutil",  # numpy.ma: np.percentile's
    "PIL.Image",
    "PIL.PngImagePlugin",
    "PIL.GifImagePlugin",
]  # the samples (tuner.runner.measure.samples)


@dataclass(frozen=True)
class WorkerExit:
    """How a worker ended, seen from outside: exit code (``-signal``; None: unknown), timeout, known cause."""

    returncode: int | None
    timed_out: bool = False
    cause: str | None = None


CLOSED = "aborted: the runner was closed while the trial ran"


class SubprocessRunner(Runner):
    """Runs each request in a new worker process (see the module docstring)."""

    def __init__(
        self,
        launcher: Launcher = "fork",
        python: str = sys.executable,
        grace_s: float = 0.0,
        preload: list[str] | None = None,
        scratch: ScratchPolicy | None = None,
    ) -> None:
        """``preload``: extra modules the fork server imports once (the workload's module). ``scratch``:
        what to do with a trial directory over its limit (:class:`~tuner.runner.base.ScratchPolicy`)."""
        self.scratch = scratch or ScratchPolicy()
        if launcher not in ("fork", "exec"):
            raise ValueError(f"launcher must be 'fork' or 'exec', not {launcher!r}")
        self.launcher = launcher
        self.python = python
        self.grace_s = grace_s
        self.tag = new_tag()
        self._reaper = Reaper(self.tag, python)
        self._numbers = itertools.count(1)
        self._generation = 0
        self._forks = (
            ForkServerClient(WORKER_MODULES + list(preload or []), python, env={TAG_ENV: self.tag})
            if launcher == "fork"
            else None
        )
        weakref.finalize(self, _shut_down, self.tag, self._forks, self._reaper)  # a forgotten runner too

    def close(self) -> None:
        """Kill every process of this runner (in-flight trials return CRASH) and stop its helpers."""
        self._generation += 1
        _shut_down(self.tag, self._forks, self._reaper)

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        workdir = Path(request.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        request_path, result_path, log_path = (workdir / n for n in ("request.json", "result.json", "worker.log"))
        request_path.write_text(request.to_json())
        result_path.unlink(missing_ok=True)
        self._reaper.ensure_started()
        generation = self._generation
        trial_tag = f"{self.tag}/t{next(self._numbers)}"
        env = {**slot_environment(slot), TAG_ENV: trial_tag}
        oom_kills_before = oom_kill_count()
        started = time.perf_counter()
        try:
            if self.launcher == "fork":
                ended = self._run_forked(request, env, request_path, result_path, log_path)
            else:
                ended = self._run_exec(request, env, request_path, result_path, log_path)
        finally:
            kill_tagged(trial_tag)  # what the trial left anywhere: other sessions, re-parented orphans
        wall_time_s = time.perf_counter() - started
        if generation != self._generation:
            ended = replace(ended, cause=CLOSED)
        oom_kills_after = oom_kill_count()
        oom_kills = (
            oom_kills_after - oom_kills_before if oom_kills_before is not None and oom_kills_after is not None else 0
        )
        result = classify_worker_exit(
            ended.returncode,
            ended.timed_out,
            result_path,
            read_log_tail(log_path),
            request.timeout_s,
            wall_time_s,
            oom_kills=oom_kills,
            cause=ended.cause,
        )
        return with_trial_disk_usage(result, workdir, self.scratch)

    def _run_exec(
        self, request: TrialRequest, env: dict[str, str], request_path: Path, result_path: Path, log_path: Path
    ) -> WorkerExit:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [self.python, "-m", "tuner.runner.worker", str(request_path), str(result_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            timed_out = False
            try:
                timed_out = not wait_exit(process, request.timeout_s + self.grace_s)
            finally:
                kill_group(process.pid, leader_alive=process.poll() is None)
                process.wait(timeout=10)
        return WorkerExit(process.returncode, timed_out)

    def _run_forked(
        self, request: TrialRequest, env: dict[str, str], request_path: Path, result_path: Path, log_path: Path
    ) -> WorkerExit:
        assert self._forks is not None
        launch = self._forks.launch(str(request_path), str(result_path), str(log_path), env)
        if launch.pid is None:
            return WorkerExit(
                None, cause=f"the fork server died before the worker started ({launch.server_exit or 'status unknown'})"
            )
        finished = launch.finished.wait(request.timeout_s + self.grace_s)
        kill_group(launch.pid, leader_alive=not finished or launch.status is None)
        if not finished:
            launch.finished.wait(10)
            return WorkerExit(-signal.SIGKILL, timed_out=True)
        if launch.status is None:
            return WorkerExit(
                None,
                cause=f"the fork server died while the trial ran "
                f"({launch.server_exit or 'status unknown'}); the worker died with it",
            )
        return WorkerExit(launch.status)


def wait_exit(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Block until ``process`` exits (True, reaped) or ``timeout_s`` seconds pass (False).

    Without polling where Linux offers a pidfd (``os.pidfd_open``, Linux 5.3+): one ``poll`` on it.
    ``Popen.wait(timeout)`` instead wakes every 50 ms to ask (~0.2 % of a core for a long trial);
    it is the fallback.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None and process.returncode is None:
        try:
            pidfd = pidfd_open(process.pid)
        except OSError:  # already reaped, or pidfds unavailable (old kernel, seccomp)
            pidfd = None
        if pidfd is not None:
            try:
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                if not poller.poll(min(max(0, math.ceil(timeout_s * 1000)), 2**31 - 1)):
                    return False
            finally:
                os.close(pidfd)
            process.wait()  # it has exited: reaps at once
            return True
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _shut_down(tag: str, forks: ForkServerClient | None, reaper: Reaper) -> None:
    """Kill every process tagged ``tag`` (workers, their trees, the fork server), then stop the helpers."""
    kill_tagged(tag)
    if forks is not None:
        forks.close()
    reaper.close()


def classify_worker_exit(
    returncode: int | None,
    timed_out: bool,
    result_path: Path,
    tail: str,
    timeout_s: float,
    wall_time_s: float,
    oom_kills: int = 0,
    cause: str | None = None,
) -> TrialResult:
    """The result of a worker that ended (see the module docstring for the rules).

    ``returncode``: exit status or ``-signal`` (None: unknown). ``tail`` is the end
    of the worker's log for this trial; ``wall_time_s`` the time seen from
    outside, which replaces the worker's own figure. ``oom_kills``: how much the
    cgroup's ``oom_kill`` count rose during the trial. ``cause``: a known reason
    the worker ended (the runner was closed, the fork server died).
    """
    if timed_out:
        return TrialResult(
            Outcome.TIMEOUT, reason=f"no result after {timeout_s:g} s: killed", log_tail=tail, wall_time_s=wall_time_s
        )
    if returncode == 0 and result_path.exists():
        result = TrialResult.from_json(result_path.read_text())
        log_tail = result.log_tail + ("\n--- worker log ---\n" + tail if tail.strip() else "")
        return replace(result, log_tail=log_tail[-LOG_TAIL_CHARS:], wall_time_s=wall_time_s)
    if cause is not None:
        return TrialResult(Outcome.CRASH, reason=cause, log_tail=tail, wall_time_s=wall_time_s)
    evidence = _oom_evidence(tail, oom_kills)
    if returncode is None:
        how = "worker ended without a result (status unknown)"
    elif returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        how = f"worker died of signal {name}"
        if -returncode == signal.SIGKILL and evidence is None:
            return TrialResult(
                Outcome.CRASH,
                log_tail=tail,
                wall_time_s=wall_time_s,
                reason=(
                    "worker killed by SIGKILL, not sent by the tuner; no sign of out-of-memory (the cgroup's "
                    "oom_kill count did not rise, no out-of-memory message in the log)"
                ),
            )
    else:
        how = f"worker exited with status {returncode} without a result"
    if evidence is not None:
        return TrialResult(Outcome.OOM, reason=f"{how}: {evidence}", log_tail=tail, wall_time_s=wall_time_s)
    return TrialResult(Outcome.CRASH, reason=how, log_tail=tail, wall_time_s=wall_time_s)


def _oom_evidence(tail: str, oom_kills: int) -> str | None:
    """Why a death without a result looks like out-of-memory, or None."""
    if oom_kills > 0:
        return (
            f"the kernel's OOM killer killed {oom_kills} process(es) of this cgroup during the trial "
            f"(memory.events oom_kill)"
        )
    marker = next((m for m in _OOM_LOG_MARKERS if m in tail), None)
    return f"the log shows {marker!r}" if marker is not None else None
