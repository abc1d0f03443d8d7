"""Fleet throughput: trials per second of N ``tuner worker`` processes on one study, and its ratio to ideal.

Two modes, measured in one run on this machine:

* **no-op** (default): N real ``tuner worker`` processes (``--gpus i`` each, one slot, no MLflow) join
  one study of the no-op workload — the trial is the tuner's own overhead (ask, claim, a forked
  worker process, tell) — on PostgreSQL (a throwaway cluster, :mod:`tuner.testing.postgres`) and a
  shared SQLite file; plus the storage round-trips one coordinator sends per trial (a SQLAlchemy
  event counts them).
* **sleep-bound** (``--sleep S``): each trial holds its slot S seconds with the CPU idle, as a GPU
  trial does (``FakeWorkload`` with a fixed ``sleep_s``, one repeat, no warm-up). N workers stand for
  N hosts (``TUNER_HOST=hostI``, one slot each), N = 1, 4, 8, 16, 32 by default, each N on a fresh
  PostgreSQL database, ``--per-worker`` trials per worker. Start-up is left out: the workers start
  without a study (``--poll``), and the study is created once all of them wait; each worker is
  stopped (SIGTERM) as soon as its study is spent. Reported per N: trials/s, the ratio to ideal, the
  join spread ("N-th start": the N-th trial's start minus the first's), the workers' CPU
  (``fleet_sleep.Sampler``: % of one core per worker tree, from study creation to the end), the
  load average. ``--grpc`` adds the gRPC proxy figures (``bench/fleet_grpc.py``).

The clock runs from the first trial's start to the last trial's end as the storage recorded them;
the ratio to ideal is ``rate(N) / (N * rate(1))`` (sleep-bound goal: >= 0.9 up to 32 on this
2-core machine: sleeping trials use no CPU, so only the coordinators' own CPU competes).

Usage: ``python bench/fleet.py [--trials 32] [--workers 1,2,4,8] [--storages postgres,sqlite]`` (raw figures to
``bench/results/fleet_noop.json``; ``--report-noop`` prints the table from them) or
``python bench/fleet.py --sleep 3 [--workers 1,4,8,16,32] [--per-worker 4] [--grpc]``; with ``--sleep``
the raw rows go to ``bench/results/fleet_sleep.json`` and the last line is the ratio to ideal at the
largest N on PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleet_sleep import ENV, loadavg, make_study, measured_window, sleep_fleet
from raw_results import Run, load, provenance

from tuner.testing.noop_spec import noop_spec

ROOT = Path(__file__).resolve().parents[1]
SPEC = noop_spec("fleet_noop", trials=32, timeout_s=120)
RESULTS = ROOT / "bench" / "results" / "fleet_sleep.json"
NOOP_RESULTS = ROOT / "bench" / "results" / "fleet_noop.json"
NOOP_GOAL = 0.9  # ratio to ideal up to 8 workers (needs a free core per worker)


def throughput(url: str, workers: int, trials: int, directory: Path) -> float:
    """Measured trials per second of ``workers`` no-op worker processes sharing one new study."""
    name = f"noop_{workers}_{int(time.time() * 1000) % 10**8}"
    make_study(url, name, trials, directory, SPEC)
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tuner",
                "worker",
                name,
                "--storage",
                url,
                "--gpus",
                str(i),
                "--no-mlflow",
                "--home",
                str(directory / f"w{i}"),
            ],
            env={**ENV, "TUNER_HOST": f"bench{i}"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=directory,
        )
        for i in range(workers)
    ]
    codes = [p.wait() for p in processes]
    if any(codes):
        raise SystemExit(f"a worker failed: exit codes {codes}")
    count, window_s, _ = measured_window(url, name)
    return count / window_s


def round_trips(url: str, trials: int, directory: Path) -> float:
    """SQL statements one coordinator sends per measured trial (counted by a SQLAlchemy event)."""
    from sqlalchemy import event

    from tuner.runner.base import plan_slots
    from tuner.runner.subprocess import SubprocessRunner
    from tuner.search.objectives import plan_constraints
    from tuner.study.coordinator import Coordinator
    from tuner.study.studies import load_study

    name = f"trips_{int(time.time() * 1000) % 10**8}"
    make_study(url, name, trials, directory, SPEC)
    opened = load_study(url, name)
    backend = getattr(opened.study._storage, "_backend", opened.study._storage)
    count = [0]

    def counted(*_: Any) -> None:
        count[0] += 1

    event.listen(backend.engine, "before_cursor_execute", counted)
    runner = SubprocessRunner()
    try:
        Coordinator(
            study=opened.study,
            spec=opened.spec,
            runner=runner,
            slots=plan_slots(1, "cpu", []),
            home=directory / "trips",
            device="cpu",
            plan=plan_constraints(opened.spec, {}),
            budget_trials=trials,
            wall_time_s=None,
        ).run()
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


def _write(result: dict[str, Any]) -> None:
    """The raw results so far to :data:`RESULTS` (JSON)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1, default=str) + "\n")


def _print_rows(label: str, rows: list[dict[str, Any]], first: dict[str, Any]) -> None:
    """Add ``ratio_to_ideal`` (the whole run's rate against ``first``'s rate per worker) and, where the
    trials name their worker, ``steady_ratio`` (``first``'s cycle ÷ this row's: each worker's time from
    one trial's start to its next) to each row, and print them."""
    base = first["trials_per_s"] / first["workers"]
    for row in rows:
        row["ratio_to_ideal"] = row["trials_per_s"] / (row["workers"] * base)
        if row.get("cycle_s") and first.get("cycle_s"):
            row["steady_ratio"] = first["cycle_s"] / row["cycle_s"]
        print(
            f"{label:14s} N={row['workers']:2d}: {row['trials_per_s']:6.3f} trials/s, ratio to ideal "
            f"{row['ratio_to_ideal']:.2f}"
            + (
                f" (steady {row['steady_ratio']:.2f}: a worker's next trial every {row['cycle_s']:.2f} s)"
                if "steady_ratio" in row
                else ""
            )
            + f", trial {row['mean_trial_s']:.2f} s, N-th start +{row['join_spread_s']:.1f} s, worker CPU "
            f"{row['worker_cpu_pct_of_core']:.1f} % of a core each, load {row['load_before']:.1f} -> "
            f"{row['load_after']:.1f}"
            + (f", {row['peak_connections']} connections at most" if "peak_connections" in row else "")
            + (f", proxy CPU {row['proxy_cpu_pct_of_core']:.1f} % of a core" if "proxy_cpu_pct_of_core" in row else ""),
            flush=True,
        )


def sleep_main(args: argparse.Namespace, counts: list[int]) -> None:
    """The sleep-bound ladder on PostgreSQL (and through the gRPC proxy with ``--grpc``); writes RESULTS."""
    from tuner.testing.postgres import running_postgres

    if args.grpc:
        import fleet_grpc

        fleet_grpc.require_grpc()  # before the first rung: grpcio is not a tuner dependency

    print(
        f"host: {os.cpu_count()} cores, load average {loadavg():.2f}; {args.sleep:g} s sleep-bound trials, "
        f"{args.per_worker} per worker, workers {counts}",
        flush=True,
    )
    result: dict[str, Any] = {
        "command": " ".join(["python", "bench/fleet.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cores": os.cpu_count(),
        "load_at_start": os.getloadavg(),
        "sleep_s": args.sleep,
        "per_worker": args.per_worker,
    }
    with tempfile.TemporaryDirectory(prefix="tuner-fleet-sleep-") as tmp, running_postgres(Path(tmp) / "pg") as pg:
        rows: list[dict[str, Any]] = []
        result["postgres"] = rows
        for n in counts:
            rows.append(sleep_fleet(pg.create_database(f"fleet_{n}"), n, args.per_worker, args.sleep, Path(tmp)))
            _print_rows("postgres", rows[-1:], rows[0])
            _write(result)
        if args.grpc:
            for label, row in fleet_grpc.grpc_ladder(pg, counts, args.per_worker, args.sleep, Path(tmp)):
                result.setdefault(label, []).append(row)
                _print_rows(label, [row], result[label][0])
                _write(result)
    result["load_at_end"] = os.getloadavg()
    _write(result)
    last = rows[-1]
    print(
        f"ratio to ideal at N={last['workers']} (postgres, {args.sleep:g} s trials, load {last['load_after']:.1f} on "
        f"{os.cpu_count()} cores): steady {last.get('steady_ratio', float('nan')):.2f}, whole run with the joins "
        f"{last['ratio_to_ideal']:.2f}"
    )


def report(path: Path = RESULTS) -> str:
    """The markdown tables of docs/benchmarks.md ("Fleets of sleep-bound trials") from the raw results."""
    result = json.loads(path.read_text())
    lines = [
        "| N | trials/s | whole run | steady | a worker's next trial every | trial | N-th start | worker CPU "
        "(% of a core each) | CPU-s per trial | load after | peak connections |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["postgres"]:
        steady = f"{row['steady_ratio']:.2f}" if "steady_ratio" in row else "—"
        cycle = f"{row['cycle_s']:.2f} s" if row.get("cycle_s") else "—"
        lines.append(
            f"| {row['workers']} | {row['trials_per_s']:.3f} | {row['ratio_to_ideal']:.2f} | {steady} | "
            f"{cycle} | {row['mean_trial_s']:.2f} s | +{row['join_spread_s']:.1f} s | "
            f"{row['worker_cpu_pct_of_core']:.1f} | {cpu_per_trial(row):.3f} | {row['load_after']:.1f} | "
            f"{row.get('peak_connections', '—')} |"
        )
    lines += [
        "",
        "| N | direct: trials/s | ratio | worker CPU | CPU-s per trial | through the proxy: trials/s | ratio | "
        "worker CPU | proxy CPU (% of a core) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for direct, proxied in zip(result.get("optuna-postgres", []), result.get("optuna-grpc", [])):
        lines.append(
            f"| {direct['workers']} | {direct['trials_per_s']:.3f} | {direct['ratio_to_ideal']:.2f} | "
            f"{direct['worker_cpu_pct_of_core']:.1f} | {cpu_per_trial(direct):.3f} | "
            f"{proxied['trials_per_s']:.3f} | {proxied['ratio_to_ideal']:.2f} | "
            f"{proxied['worker_cpu_pct_of_core']:.1f} | {proxied.get('proxy_cpu_pct_of_core', 0.0):.1f} |"
        )
    sleep_s, largest = result["sleep_s"], result["postgres"][-1]["workers"]
    lines += [
        "",
        f"CPU-s per trial: a worker's CPU share x the run's window (first start to last end) x N / trials, "
        f"a lower bound (the share was taken from the study's creation to each worker's stop). What {largest} "
        f"workers may spend per trial at full rate on {result['cores']} cores, the database included: "
        f"{result['cores']} x {sleep_s:g} s / {largest} = {result['cores'] * sleep_s / largest:.3f} CPU-s.",
    ]
    return "\n".join(lines)


def noop_main(args: argparse.Namespace, counts: list[int]) -> None:
    """The no-op ladder on each storage; writes :data:`NOOP_RESULTS` and prints its table."""
    run = Run("fleet.py")
    print(f"host: {os.cpu_count()} cores; {args.trials} no-op trials per study", flush=True)
    storages: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tuner-fleet-bench-") as tmp:
        for storage, url in _storages(args.storages.split(","), Path(tmp)):
            rates = {}
            for n in counts:
                rates[str(n)] = throughput(url, n, args.trials, Path(tmp))
                print(f"{storage:8s} workers {n}: {rates[str(n)]:6.2f} trials/s", flush=True)
            storages[storage] = {
                "trials_per_s": rates,
                "round_trips_per_trial": round_trips(url, min(args.trials, 16), Path(tmp)),
            }
    print(noop_report(run.save(args.noop_results, {"trials": args.trials, "storages": storages})))


def noop_report(result: dict[str, Any]) -> str:
    """docs/benchmarks.md's no-op fleet table (trials/s, ratio to ideal, round-trips) from the raw results."""
    counts = list(next(iter(result["storages"].values()))["trials_per_s"])
    names = {"postgres": "PostgreSQL (throwaway cluster, local TCP)", "sqlite": "SQLite (one shared file, WAL)"}
    lines = [
        provenance(result) + f"; {result['trials']} no-op trials per study; ratio to ideal: rate(N) / "
        f"(N x rate(1)), the goal >= {NOOP_GOAL} up to 8 workers",
        "",
        "| storage | "
        + " | ".join(f"{n} worker{'s' if n != '1' else ''}" for n in counts)
        + " | round-trips per trial |",
        "| --- |" + " --- |" * (len(counts) + 1),
    ]
    for storage, figures in result["storages"].items():
        rates = figures["trials_per_s"]
        base = rates[counts[0]] / int(counts[0])
        cells = [
            f"{rates[n]:.2f} trials/s" if n == counts[0] else f"{rates[n]:.2f} (ratio {rates[n] / (int(n) * base):.2f})"
            for n in counts
        ]
        lines.append(
            f"| {names.get(storage, storage)} | " + " | ".join(cells) + f" | {figures['round_trips_per_trial']:.0f} |"
        )
    return "\n".join(lines)


def cpu_per_trial(row: dict[str, Any]) -> float:
    """The CPU seconds a fleet's workers spent per trial (lower bound, see :func:`report`)."""
    return row["worker_cpu_pct_of_core"] / 100.0 * row["window_s"] * row["workers"] / row["trials"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32, help="no-op mode: trials per study")
    parser.add_argument(
        "--workers", default=None, help="N values, e.g. 1,4,8 (at most 32; default 1,2,4,8, with --sleep 1,4,8,16,32)"
    )
    parser.add_argument("--storages", default="postgres,sqlite", help="no-op mode: storages")
    parser.add_argument("--sleep", type=float, default=None, help="seconds each trial holds its slot (CPU idle)")
    parser.add_argument(
        "--per-worker",
        type=int,
        default=4,
        help="with --sleep: trials per worker (>= 3: the steady ratio leaves each one's first out)",
    )
    parser.add_argument("--grpc", action="store_true", help="with --sleep: also through Optuna's gRPC proxy")
    parser.add_argument(
        "--report",
        action="store_true",
        help="print docs/benchmarks.md's fleet tables from bench/results/fleet_sleep.json, run nothing",
    )
    parser.add_argument(
        "--noop-results",
        type=Path,
        default=NOOP_RESULTS,
        help="no-op mode: where the raw figures go (default bench/results/fleet_noop.json)",
    )
    parser.add_argument(
        "--report-noop",
        action="store_true",
        help="print docs/benchmarks.md's no-op fleet table from --noop-results, run nothing",
    )
    args = parser.parse_args()
    if args.report:
        print(report())
        return
    if args.report_noop:
        print(noop_report(load(args.noop_results)))
        return
    counts = [int(n) for n in (args.workers or ("1,4,8,16,32" if args.sleep else "1,2,4,8")).split(",")]
    if not counts or min(counts) < 1 or max(counts) > 32:
        parser.error("--workers: between 1 and 32 workers")
    if args.sleep is not None:
        sleep_main(args, counts)
        return
    noop_main(args, counts)


if __name__ == "__main__":
    main()
