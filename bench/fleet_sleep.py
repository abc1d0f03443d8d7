"""The sleep-bound fleet of ``bench/fleet.py --sleep S`` (issue 27): N host-like ``tuner worker`` processes on
one PostgreSQL study whose trials hold their slot S seconds with the CPU idle, as a GPU trial does.

Imported by ``bench/fleet.py`` (its ladder, its raw results) and ``bench/fleet_grpc.py`` (the shared
measuring helpers: :class:`Sampler`, :func:`measured_window`, :func:`row_of`, :func:`wait_for_logs`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tuner.testing.noop_spec import sleep_spec

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def loadavg() -> float:
    """The 1-minute load average (runnable processes, all users)."""
    return os.getloadavg()[0]


class Sampler:
    """CPU seconds of process trees (each root and its descendants, reaped ones included through the
    ``children_*`` times) from construction to :meth:`percent_of_core`."""

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self.roots = [psutil.Process(pid) for pid in pids]
        self.started = time.monotonic()
        self.before = [self._tree_s(root) for root in self.roots]
        self.after: list[tuple[float, float] | None] = [None] * len(self.roots)

    @staticmethod
    def _tree_s(root: Any) -> float:
        total = 0.0
        for process in [root, *root.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except Exception:  # noqa: BLE001 - gone between the listing and the read
                continue
            total += times.user + times.system + times.children_user + times.children_system
        return total

    def sample(self, index: int) -> None:
        """Record tree ``index``'s CPU and the clock now (call it just before that root is stopped)."""
        try:
            self.after[index] = (self._tree_s(self.roots[index]), time.monotonic())
        except Exception:  # noqa: BLE001 - the root ended already: its last sample stands
            pass

    def shares(self) -> list[float]:
        """Per tree: CPU seconds / wall seconds from construction to its sample, in % of one core
        (unsampled trees are sampled now)."""
        for index, value in enumerate(self.after):
            if value is None:
                self.sample(index)
        return [100.0 * (a[0] - b) / max(a[1] - self.started, 1e-9) for a, b in zip(self.after, self.before) if a]

    def percent_of_core(self) -> float:
        """The mean of :meth:`shares`, in % of one core."""
        shares = self.shares()
        return sum(shares) / max(len(shares), 1)


def make_study(url: str, name: str, trials: int, directory: Path, text: str) -> None:
    import tuner

    spec = directory / f"{name}.yaml"
    spec.write_text(text)
    tuner.create_study(spec, study_name=name, storage=url, home=directory / "creator", trials=trials)


def measured_window(url: str, name: str, measured: bool = True) -> tuple[int, float, list[Any]]:
    """(finished trials, seconds from the first start to the last end, those trials) from the storage;
    ``measured``: only trials the tuner marked measured."""
    import optuna

    done = [
        t
        for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
        if (t.user_attrs.get("measured") or not measured) and t.datetime_complete is not None
    ]
    first = min(t.datetime_start for t in done if t.datetime_start is not None)
    last = max(t.datetime_complete for t in done if t.datetime_complete is not None)
    return len(done), max((last - first).total_seconds(), 1e-9), done


def sleep_fleet(url: str, workers: int, per_worker: int, sleep_s: float, directory: Path) -> dict[str, Any]:
    """One sleep-bound fleet run: ``workers`` host-like ``tuner worker`` processes wait (started without
    a study), then one study of ``workers * per_worker`` trials is created and they run it; each is
    stopped once its log says the study is spent. Returns the row (rates per second, CPU in % of a core)."""
    home = directory / f"n{workers}"
    logs = [home / f"w{i}.log" for i in range(workers)]
    home.mkdir(parents=True)
    from tuner.storage.opening import open_storage

    watch = open_storage(url)  # the tables made once, before the workers start; the bench's one storage
    processes = []
    for i, log in enumerate(logs):
        with open(log, "w") as sink:
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tuner",
                        "worker",
                        "--storage",
                        url,
                        "--gpus",
                        "0",
                        "--no-mlflow",
                        "--poll",
                        "1",
                        "--home",
                        str(home / f"h{i}"),
                    ],
                    env={**ENV, "TUNER_HOST": f"host{i}"},
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    cwd=home,
                )
            )
    try:
        wait_for_logs(logs, processes, "waiting", timeout_s=600)
        sampler, load_before = Sampler([p.pid for p in processes]), loadavg()
        name = f"sleep_{workers}"
        make_study(url, name, workers * per_worker, home, sleep_spec("fleet_sleep", sleep_s, workers * per_worker))
        _enqueue_distinct(watch, name, workers * per_worker)
        connections = _Connections(watch)
        _stop_when_done(
            logs,
            processes,
            sampler,
            lambda: connections.look() and _spent(watch, name, workers * per_worker),
            timeout_s=120 + 4 * per_worker * sleep_s * 3,
        )
        cpu = sampler.percent_of_core()
        load_after = loadavg()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    _, window_s, done = measured_window(url, name)
    row = row_of(workers, done, window_s, cpu, load_before, load_after)
    row["peak_connections"] = connections.peak  # the database's, all workers (and the bench's one)
    watch.engine.dispose()
    return row


class _Connections:
    """The most connections the database of ``storage`` had open at any :meth:`look` (PostgreSQL's
    ``pg_stat_activity``, this database only): what a fleet of N workers asks of ``max_connections``."""

    def __init__(self, storage: Any) -> None:
        self.engine, self.peak = storage.engine, 0

    def look(self) -> bool:
        """Count now; always True (so it chains before the spent check). The bench's own storages that
        are done with (study creation, the queue) are collected first: only its ``storage`` counts."""
        import gc

        from sqlalchemy import text

        gc.collect()
        with self.engine.connect() as connection:
            count = connection.execute(
                text("select count(*) from pg_stat_activity where datname = current_database()")
            ).scalar_one()
        self.peak = max(self.peak, int(count))
        return True


def _enqueue_distinct(storage: Any, name: str, count: int) -> None:
    """Queue ``count`` distinct settings (x = 0, 1, ...), popped before any proposal: every run measures
    the same settings, and none is a copy of another (each worker seeds its own sampler since issue 27;
    before, workers loading the study at once proposed the same settings)."""
    import optuna

    study = optuna.load_study(study_name=name, storage=storage)
    for x in range(count):
        study.enqueue_trial({"x": x})


def row_of(
    workers: int, done: list[Any], window_s: float, cpu: float, load_before: float, load_after: float
) -> dict[str, Any]:
    """A result row from the finished trials (``FrozenTrial``) of one run; seconds, % of a core.

    ``cycle_s``: the median time from one trial's start to the next trial's start on the same worker (the
    trial's ``worker`` attribute; bare Optuna trials have none: None), each worker's first trial left out
    — the steady state, without each worker's join and first trial (imports, its fork server starting):
    a worker needs at least 3 trials to give one cycle."""
    import statistics

    starts = sorted(t.datetime_start for t in done)
    durations = [(t.datetime_complete - t.datetime_start).total_seconds() for t in done]
    by_worker: dict[str, list[Any]] = {}
    for trial in done:
        if trial.user_attrs.get("worker"):
            by_worker.setdefault(str(trial.user_attrs["worker"]), []).append(trial.datetime_start)
    cycles = [
        (b - a).total_seconds()
        for times in by_worker.values()
        for a, b in list(zip(sorted(times), sorted(times)[1:]))[1:]
    ]  # the first trial's start-up left out
    return {
        "workers": workers,
        "trials": len(done),
        "window_s": round(window_s, 3),
        "copies": sum(1 for t in done if t.user_attrs.get("duplicate_of") is not None),
        "trials_per_s": len(done) / window_s,
        "mean_trial_s": sum(durations) / len(durations),
        "cycle_s": statistics.median(cycles) if cycles else None,
        "cycles": len(cycles),
        "join_spread_s": (starts[min(workers, len(starts)) - 1] - starts[0]).total_seconds(),
        "worker_cpu_pct_of_core": cpu,
        "load_before": load_before,
        "load_after": load_after,
    }


def wait_for_logs(logs: list[Path], processes: list[subprocess.Popen], marker: str, timeout_s: float) -> None:
    """Wait until every log holds ``marker``; SystemExit naming the log when a worker ends or time runs out."""
    deadline = time.monotonic() + timeout_s
    pending = set(range(len(logs)))
    while pending:
        for i in list(pending):
            if marker in logs[i].read_text(errors="replace"):
                pending.discard(i)
            elif processes[i].poll() is not None:
                raise SystemExit(f"worker {i} ended ({processes[i].returncode}): {logs[i].read_text()[-800:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(pending)} workers not ready after {timeout_s:.0f} s")
        time.sleep(0.2)


def _spent(storage: Any, name: str, budget: int) -> bool:
    """Whether study ``name`` has ``budget`` measured trials and none running (one read of its trials)."""
    import optuna

    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    running = any(t.state == optuna.trial.TrialState.RUNNING for t in trials)
    return not running and sum(1 for t in trials if t.user_attrs.get("measured")) >= budget


def _stop_when_done(
    logs: list[Path], processes: list[subprocess.Popen], sampler: Sampler, spent: Any, timeout_s: float
) -> None:
    """SIGTERM each worker as soon as its log says it waits again (its study spent) or ``spent()``
    (checked each second) says the study is, its CPU sampled just before; SystemExit when some still
    run after ``timeout_s``."""
    deadline, checked = time.monotonic() + timeout_s, time.monotonic()
    seen = [log.read_text(errors="replace").count("waiting") for log in logs]
    running = set(range(len(logs)))
    while running and time.monotonic() < deadline:
        done = False
        if time.monotonic() - checked > 1.0:
            done, checked = spent(), time.monotonic()
        for i in list(running):
            if (
                done
                or logs[i].read_text(errors="replace").count("waiting") > seen[i]
                or processes[i].poll() is not None
            ):
                sampler.sample(i)
                processes[i].terminate()
                running.discard(i)
        time.sleep(0.2)
    if running:
        tail = logs[min(running)].read_text(errors="replace")[-1500:]
        raise SystemExit(
            f"{len(running)} workers still running after {timeout_s:.0f} s; worker {min(running)}'s log ends:\n{tail}"
        )
