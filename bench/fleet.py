"""Fleet throughput: trials per second with 1, 2, 4, 8 ``tuner worker`` processes on one study.

Measured in one run, on this machine, for PostgreSQL (a throwaway cluster,
:mod:`tuner.testing.postgres`) and for a shared SQLite file:

1. throughput: N real ``tuner worker`` processes (``--gpus i`` each, one slot,
   no MLflow) join one study of the no-op workload (``NoOpWorkload``: the trial
   is the tuner's own overhead: ask, claim, a forked worker process, tell); the
   clock runs from the first trial's start to the last trial's end, as the storage
   recorded them (the workers' own start-up is left out); the ratio to ideal
   scaling is ``rate(N) / (N * rate(1))`` (goal >= 0.9 on PostgreSQL up to 8 —
   on a host with at least N free cores; on fewer cores the workers share them
   and the ratio says so);
2. storage round-trips per trial: one coordinator in this process runs the same
   study while a SQLAlchemy event counts the statements it sends.

Usage: ``python bench/fleet.py [--trials 32] [--workers 1,2,4,8] [--storages postgres,sqlite]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from tuner.testing.noop_spec import noop_spec

ROOT = Path(__file__).resolve().parents[1]
SPEC = noop_spec("fleet_noop", trials=32, timeout_s=120)


def _study(url: str, name: str, trials: int, directory: Path) -> None:
    import tuner

    spec = directory / "fleet_noop.yaml"
    spec.write_text(SPEC)
    tuner.create_study(spec, study_name=name, storage=url, home=directory / "creator", trials=trials)


def throughput(url: str, workers: int, trials: int, directory: Path) -> float:
    """Measured trials per second of ``workers`` worker processes sharing one new study."""
    name = f"noop_{workers}_{int(time.time() * 1000) % 10**8}"
    _study(url, name, trials, directory)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    processes = [subprocess.Popen([sys.executable, "-m", "tuner", "worker", name, "--storage", url,
                                   "--gpus", str(i), "--no-mlflow", "--home", str(directory / f"w{i}")],
                                  env={**env, "TUNER_HOST": f"bench{i}"}, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, cwd=directory)
                 for i in range(workers)]
    codes = [p.wait() for p in processes]
    if any(codes):
        raise SystemExit(f"a worker failed: exit codes {codes}")
    import optuna

    done = [t for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
            if t.user_attrs.get("measured") and t.datetime_complete is not None]
    first = min(t.datetime_start for t in done if t.datetime_start is not None)
    last = max(t.datetime_complete for t in done if t.datetime_complete is not None)
    return len(done) / max((last - first).total_seconds(), 1e-9)


def round_trips(url: str, trials: int, directory: Path) -> float:
    """SQL statements one coordinator sends per measured trial (counted by a SQLAlchemy event)."""
    from sqlalchemy import event

    from tuner.runner.base import plan_slots
    from tuner.runner.subprocess import SubprocessRunner
    from tuner.study.coordinator import Coordinator
    from tuner.study.objectives import plan_constraints
    from tuner.study.studies import load_study

    name = f"trips_{int(time.time() * 1000) % 10**8}"
    _study(url, name, trials, directory)
    opened = load_study(url, name)
    backend = getattr(opened.study._storage, "_backend", opened.study._storage)
    count = [0]

    def counted(*_: Any) -> None:
        count[0] += 1

    event.listen(backend.engine, "before_cursor_execute", counted)
    runner = SubprocessRunner()
    try:
        Coordinator(opened=opened, runner=runner, slots=plan_slots(1, "cpu", []), home=directory / "trips",
                    device="cpu", plan=plan_constraints(opened.spec, {}), budget_trials=trials,
                    wall_time_s=None).run()
    finally:
        runner.close()
    return count[0] / trials


def _storages(names: list[str], directory: Path) -> Iterator[tuple[str, str]]:
    for name in names:
        if name == "sqlite":
            yield name, f"sqlite:///{directory / 'fleet.db'}"
        elif name == "postgres":
            from tuner.testing.postgres import running_postgres

            with running_postgres(directory / "pg") as cluster:
                yield name, cluster.create_database("fleet_bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--storages", default="postgres,sqlite")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    print(f"host: {os.cpu_count()} cores; {args.trials} no-op trials per study")
    with tempfile.TemporaryDirectory(prefix="tuner-fleet-bench-") as tmp:
        for storage, url in _storages(args.storages.split(","), Path(tmp)):
            rates = {n: throughput(url, n, args.trials, Path(tmp)) for n in counts}
            base = rates[counts[0]] / counts[0]
            for n in counts:
                print(f"{storage:8s} workers {n}: {rates[n]:6.2f} trials/s, ratio to ideal {rates[n] / (n * base):.2f}")
            print(f"{storage:8s} storage round-trips per trial (one coordinator): "
                  f"{round_trips(url, min(args.trials, 16), Path(tmp)):.0f}")


if __name__ == "__main__":
    main()
