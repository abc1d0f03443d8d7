"""What a coordinator costs while it waits on a long trial (issue 27, "waiting costs nothing").

One real ``tuner run`` (the real subprocess runner with its fork server and reaper, no MLflow) runs a
study of one trial that sleeps ``--sleep`` seconds holding its slot with the CPU idle (``FakeWorkload``,
one repeat, no warm-up), on a SQLite file (default) or a throwaway PostgreSQL cluster (``--postgres``,
:mod:`tuner.testing.postgres`). Once the trial's worker process has run ``--settle`` seconds (past its
start-up: fork, imports, the workload's setup), the CPU seconds (``utime + stime`` from
``/proc/<pid>/stat``, reaped children included) of each process are read at the start and at the end
of a ``--window`` second window:

* the coordinator process itself (all its threads; its helper processes are counted apart);
* the trial's worker process tree (the fork server's child and its descendants);
* the helpers: the fork server and the reaper sidecar.

Each figure is given in % of one core (the clock's resolution is 10 ms: 0.05 % over a 20 s window); the coordinator's threads are listed one by one (``comm`` names)
so a thread that spins shows. The coordinator process counts the SQL statements it sends (a SQLAlchemy
``before_cursor_execute`` event on every engine) with their ``CLOCK_MONOTONIC`` times, which the bench
keeps for the window: only heartbeats should remain. The live progress panel a terminal shows is
measured apart, in this process (the coordinator's output here is a file, so it prints plain lines).

Usage: ``python bench/idle_coordinator.py [--sleep 30] [--window 10] [--settle 4] [--postgres]``. Raw
results go to ``bench/results/idle_coordinator.json`` (with the command and the date); the last line is
``coordinator while waiting: X % of a core (goal < 1 %)``. ``--report`` prints the same lines from the committed
raw results (docs/benchmarks.md quotes them) and runs nothing.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuner.testing.noop_spec import sleep_spec

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "idle_coordinator.json"
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ /proc
def _stat(path: str) -> list[str] | None:
    """The fields of a ``/proc/.../stat`` file after the command name (field 3 is index 0), or None."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def cpu_s(pid: int, children: bool = True) -> float:
    """CPU seconds of ``pid`` (utime + stime; with ``children``: plus its reaped children's)."""
    fields = _stat(f"/proc/{pid}/stat")
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / TICKS


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid``: ``"<tid> <comm>"`` -> seconds."""
    threads: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return threads
    for tid in tids:
        fields = _stat(f"/proc/{pid}/task/{tid}/stat")
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as handle:
                comm = handle.read().strip()
        except OSError:
            continue
        if fields is not None:
            threads[f"{tid} {comm}"] = (int(fields[11]) + int(fields[12])) / TICKS
    return threads


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (a scan of ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(f"/proc/{entry}/stat")
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry))
    return found


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children_of(current))
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def find_processes(coordinator: int) -> dict[str, int | None]:
    """The coordinator's fork server, reaper and the trial's worker (None while not there)."""
    found: dict[str, int | None] = {"forkserver": None, "reaper": None, "worker": None}
    for child in children_of(coordinator):
        line = cmdline(child)
        if "tuner.runner.forkserver" in line:
            found["forkserver"] = child
            workers = children_of(child)
            found["worker"] = workers[0] if workers else None
        elif "tuner.runner.reaper" in line:
            found["reaper"] = child
    return found


# ------------------------------------------------------------- the child
def coordinator_main(statements_path: str, argv: list[str]) -> None:
    """Run ``tuner <argv>`` in this process, recording every SQL statement (monotonic time, text)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    statements: list[tuple[float, str]] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append((time.monotonic(), " ".join(statement.split())[:160]))

    event.listen(Engine, "before_cursor_execute", count)
    atexit.register(lambda: Path(statements_path).write_text(json.dumps(statements)))
    from tuner.cli.main import main

    main(argv)


# ------------------------------------------------------------ the parent
@contextlib.contextmanager
def _storage(directory: Path, postgres: bool) -> Iterator[str]:
    if postgres:
        from tuner.testing.postgres import running_postgres

        with running_postgres(directory / "pg") as cluster:
            yield cluster.create_database("idle_bench")
    else:
        yield f"sqlite:///{directory / 'idle.db'}"


def measure(url: str, directory: Path, sleep_s: float, window_s: float, settle_s: float) -> dict[str, Any]:
    """Run the study in a child coordinator and measure the window (see the module docstring)."""
    spec = directory / "idle.yaml"
    spec.write_text(sleep_spec("idle_coordinator", sleep_s, 1))
    statements_path = directory / "statements.json"
    argv = [
        "run",
        str(spec),
        "--storage",
        url,
        "--no-mlflow",
        "--home",
        str(directory / "home"),
        "--study-name",
        "idle",
    ]
    log = directory / "coordinator.log"
    with open(log, "w") as sink:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--coordinator", str(statements_path), "--", *argv],
            env=ENV,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=directory,
        )
    try:
        deadline = time.monotonic() + 120
        found = find_processes(process.pid)
        while found["worker"] is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"no worker started; coordinator log:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
            found = find_processes(process.pid)
        worker_seen = time.monotonic()
        time.sleep(settle_s)
        found = find_processes(process.pid)
        worker = found["worker"]
        assert worker is not None
        helpers = [pid for pid in (found["forkserver"], found["reaper"]) if pid is not None]
        worker_tree = tree(worker)
        start = time.monotonic()
        before = {
            "coordinator": cpu_s(process.pid, children=False),
            "worker_tree": sum(cpu_s(pid) for pid in worker_tree),
            "helpers": sum(cpu_s(pid, children=False) for pid in helpers),
        }
        threads_before = thread_cpu_s(process.pid)
        worker_threads_before = thread_cpu_s(worker)
        time.sleep(window_s)
        worker_tree = sorted(set(worker_tree) | set(tree(worker)))
        after = {
            "coordinator": cpu_s(process.pid, children=False),
            "worker_tree": sum(cpu_s(pid) for pid in worker_tree),
            "helpers": sum(cpu_s(pid, children=False) for pid in helpers),
        }
        threads_after = thread_cpu_s(process.pid)
        worker_threads_after = thread_cpu_s(worker)
        end = time.monotonic()
        still_running = find_processes(process.pid)["worker"] == worker
        code, usage = _wait4(process, sleep_s * 4 + 120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    elapsed = end - start
    percent = {name: round(100 * (after[name] - before[name]) / elapsed, 3) for name in before}
    threads = {
        name: round(100 * (threads_after.get(name, 0.0) - seconds) / elapsed, 3)
        for name, seconds in threads_before.items()
    }
    worker_threads = {
        name: round(100 * (worker_threads_after.get(name, 0.0) - seconds) / elapsed, 3)
        for name, seconds in worker_threads_before.items()
    }
    statements = json.loads(statements_path.read_text()) if statements_path.exists() else []
    during = [text for at, text in statements if start <= at <= end]
    return {
        "percent_of_core": percent,
        "run_cpu_s": {
            "coordinator_at_window_start": round(before["coordinator"], 3),
            "whole_run_all_processes": round(usage.ru_utime + usage.ru_stime, 3),
        },
        "coordinator_threads": threads,
        "worker_threads": worker_threads,
        "window_s": round(elapsed, 3),
        "settle_s": settle_s,
        "worker_age_at_window_s": round(start - worker_seen, 3),
        "trial_still_running_at_end": still_running,
        "exit_code": code,
        "sql_statements_in_window": len(during),
        "sql_in_window": during[:40],
        "heartbeat_statements": sum(1 for text in during if "heartbeat" in text.lower()),
        "sql_statements_total": len(statements),
        "clock_tick_s": 1 / TICKS,
    }


def live_display_percent(seconds: float = 6.0) -> float:
    """% of a core the terminal's live progress panel (:class:`tuner.cli.progress.ProgressDisplay`) costs in
    this process while one trial runs and nothing else happens (its redraws, to a terminal-like buffer)."""
    import io

    from rich.console import Console

    from tuner.cli.progress import ProgressDisplay

    display = ProgressDisplay(console=Console(file=io.StringIO(), force_terminal=True, width=120), live=True)
    display.on_start("idle", 0, 10)
    display.on_trial_start(1, "search", "cpu0", 600.0)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(seconds)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    display.on_finish([], [])
    return round(100 * cpu / wall, 3)


def _wait4(process: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, Any]:
    """Wait for ``process`` to exit; (its exit code, the resource usage of it and every descendant it reaped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return process.returncode, usage
        if time.monotonic() > deadline:
            raise SystemExit("the coordinator did not finish")
        time.sleep(0.2)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--coordinator":
        coordinator_main(sys.argv[2], sys.argv[4:] if sys.argv[3] == "--" else sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleep", type=float, default=30.0, help="seconds the trial holds its slot")
    parser.add_argument("--window", type=float, default=10.0, help="seconds measured")
    parser.add_argument("--settle", type=float, default=4.0, help="seconds after the worker starts before the window")
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL cluster instead of SQLite")
    parser.add_argument(
        "--report",
        action="store_true",
        help="print docs/benchmarks.md's figures from bench/results/idle_coordinator.json, run nothing",
    )
    args = parser.parse_args()
    if args.report:
        print(report())
        return
    if args.settle + args.window + 3 > args.sleep:
        parser.error("--sleep must exceed --settle + --window by 3 s or more (the window lies inside the trial)")
    with tempfile.TemporaryDirectory(prefix="tuner-idle-") as tmp, _storage(Path(tmp), args.postgres) as url:
        row = measure(url, Path(tmp), args.sleep, args.window, args.settle)
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": {"cores": os.cpu_count(), "load_average": os.getloadavg()},
        "storage": "postgres" if args.postgres else "sqlite",
        "sleep_s": args.sleep,
        **row,
        "live_display_percent_of_core": live_display_percent(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(summary(result))


def summary(result: dict[str, Any]) -> str:
    """The lines the bench prints of a result (the raw JSON's dict); the last is the coordinator's % of a core."""
    pct = result["percent_of_core"]
    return "\n".join(
        [
            f"storage {result['storage']}, window {result['window_s']:.1f} s from {result['worker_age_at_window_s']:.1f} s "
            f"into the trial, load average {result['host']['load_average'][0]:.2f}",
            f"worker process tree: {pct['worker_tree']:.2f} % of a core; fork server + reaper: {pct['helpers']:.2f} %",
            f"CPU of the whole run (start-up, one {result['sleep_s']:g} s trial, shut-down; every process): "
            f"{result['run_cpu_s']['whole_run_all_processes']:.2f} s, the coordinator's up to the window "
            f"{result['run_cpu_s']['coordinator_at_window_start']:.2f} s",
            "coordinator threads (% of a core): "
            + ", ".join(
                f"{name} {value:.2f}"
                for name, value in sorted(result["coordinator_threads"].items(), key=lambda kv: -kv[1])
            ),
            f"live progress panel on a terminal (measured apart): {result['live_display_percent_of_core']:.2f} % of a core",
            f"SQL statements in the window: {result['sql_statements_in_window']} "
            f"({result['heartbeat_statements']} heartbeat); raw results: {RESULTS.relative_to(ROOT)}",
            f"coordinator while waiting: {result['percent_of_core']['coordinator']:.2f} % of a core (goal < 1 %)",
        ]
    )


def report(path: Path = RESULTS) -> str:
    """docs/benchmarks.md's "Waiting" figures from the committed raw results: the bench's own lines, after one
    naming the command and the date; measures nothing."""
    result = json.loads(path.read_text())
    return f"{result['command']} ({result['date']}, {result['host']['cores']} cores)\n" + summary(result)


if __name__ == "__main__":
    main()
