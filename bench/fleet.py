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
  (:class:`Sampler`: % of one core per worker tree, from study creation to the end), the
  load average. ``--grpc`` adds the gRPC proxy figures (:func:`grpc_ladder`).

The clock runs from the first trial's start to the last trial's end as the storage recorded them;
the ratio to ideal is ``rate(N) / (N * rate(1))`` (sleep-bound goal: >= 0.9 up to 32 on this
2-core machine: sleeping trials use no CPU, so only the coordinators' own CPU competes).

Usage: ``python bench/fleet.py [--trials 32] [--workers 1,2,4,8] [--storages postgres,sqlite]`` or
``python bench/fleet.py --sleep 3 [--workers 1,4,8,16,32] [--per-worker 3] [--grpc]``; with ``--sleep``
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
from pathlib import Path
from typing import Any, Iterator

from tuner.testing.noop_spec import noop_spec
from tuner.host import free_port

ROOT = Path(__file__).resolve().parents[1]
SPEC = noop_spec("fleet_noop", trials=32, timeout_s=120)
RESULTS = ROOT / "bench" / "results" / "fleet_sleep.json"
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


def sleep_spec(sleep_s: float, trials: int) -> str:
    """A spec whose every trial sleeps ``sleep_s`` seconds once (``FakeWorkload``, one repeat, no
    warm-up: the slot is held ~``sleep_s`` s, the CPU idle); one int parameter over 1e9 values so
    settings never repeat (no claim copies), the random sampler, ``trials`` trials."""
    return f"""
name: fleet_sleep
workload: {{class: "tuner.workloads.fake:FakeWorkload", timeout_s: {int(sleep_s * 4 + 60)}}}
parameters:
  x: {{type: int, low: 0, high: 1000000000}}
derived:
  sleep_s: "{float(sleep_s)}"
objectives:
  - {{metric: latency_p50_s, direction: minimize}}
measurement: {{warmup: 0, min_repeats: 1, max_repeats: 1}}
budget: {{trials: {trials}}}
sampler: {{name: random}}
"""


def _study(url: str, name: str, trials: int, directory: Path, text: str = SPEC) -> None:
    import tuner

    spec = directory / f"{name}.yaml"
    spec.write_text(text)
    tuner.create_study(spec, study_name=name, storage=url, home=directory / "creator", trials=trials)


def _measured_window(url: str, name: str, measured: bool = True) -> tuple[int, float, list[Any]]:
    """(finished trials, seconds from the first start to the last end, those trials) from the storage;
    ``measured``: only trials the tuner marked measured."""
    import optuna

    done = [t for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
            if (t.user_attrs.get("measured") or not measured) and t.datetime_complete is not None]
    first = min(t.datetime_start for t in done if t.datetime_start is not None)
    last = max(t.datetime_complete for t in done if t.datetime_complete is not None)
    return len(done), max((last - first).total_seconds(), 1e-9), done


def throughput(url: str, workers: int, trials: int, directory: Path) -> float:
    """Measured trials per second of ``workers`` no-op worker processes sharing one new study."""
    name = f"noop_{workers}_{int(time.time() * 1000) % 10**8}"
    _study(url, name, trials, directory)
    processes = [subprocess.Popen([sys.executable, "-m", "tuner", "worker", name, "--storage", url,
                                   "--gpus", str(i), "--no-mlflow", "--home", str(directory / f"w{i}")],
                                  env={**ENV, "TUNER_HOST": f"bench{i}"}, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, cwd=directory)
                 for i in range(workers)]
    codes = [p.wait() for p in processes]
    if any(codes):
        raise SystemExit(f"a worker failed: exit codes {codes}")
    count, window_s, _ = _measured_window(url, name)
    return count / window_s


def sleep_fleet(url: str, workers: int, per_worker: int, sleep_s: float, directory: Path) -> dict[str, Any]:
    """One sleep-bound fleet run: ``workers`` host-like ``tuner worker`` processes wait (started without
    a study), then one study of ``workers * per_worker`` trials is created and they run it; each is
    stopped once its log says the study is spent. Returns the row (rates per second, CPU in % of a core)."""
    home = directory / f"n{workers}"
    logs = [home / f"w{i}.log" for i in range(workers)]
    home.mkdir(parents=True)
    from tuner.study.storage import open_storage

    open_storage(url)  # Optuna's tables made once here: 32 workers creating them at once on a new database fail
    processes = []
    for i, log in enumerate(logs):
        with open(log, "w") as sink:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "tuner", "worker", "--storage", url, "--gpus", "0", "--no-mlflow",
                 "--poll", "1", "--home", str(home / f"h{i}")], env={**ENV, "TUNER_HOST": f"host{i}"},
                stdout=sink, stderr=subprocess.STDOUT, cwd=home))
    try:
        _wait_for(logs, processes, "waiting", timeout_s=600)
        sampler, load_before = Sampler([p.pid for p in processes]), loadavg()
        name = f"sleep_{workers}"
        _study(url, name, workers * per_worker, home, sleep_spec(sleep_s, workers * per_worker))
        _enqueue_distinct(url, name, workers * per_worker)
        _stop_when_done(logs, processes, sampler, lambda: _spent(url, name, workers * per_worker),
                        timeout_s=120 + 4 * per_worker * sleep_s * 3)
        cpu = sampler.percent_of_core()
        load_after = loadavg()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    _, window_s, done = _measured_window(url, name)
    return _row(workers, done, window_s, cpu, load_before, load_after)


def _enqueue_distinct(url: str, name: str, count: int) -> None:
    """Queue ``count`` distinct settings (x = 0, 1, ...): workers that load a study at the same moment get
    the same sampler seed (``spec.seed + len(trials)``) and would propose the same settings — copies,
    not sleep-bound trials; queued trials are popped first."""
    import optuna

    study = optuna.load_study(study_name=name, storage=url)
    for x in range(count):
        study.enqueue_trial({"x": x})


def _row(workers: int, done: list[Any], window_s: float, cpu: float, load_before: float,
         load_after: float) -> dict[str, Any]:
    """A result row from the finished trials (``FrozenTrial``) of one run; seconds, % of a core."""
    starts = sorted(t.datetime_start for t in done)
    durations = [(t.datetime_complete - t.datetime_start).total_seconds() for t in done]
    return {"workers": workers, "trials": len(done), "window_s": round(window_s, 3),
            "copies": sum(1 for t in done if t.user_attrs.get("duplicate_of") is not None),
            "trials_per_s": len(done) / window_s, "mean_trial_s": sum(durations) / len(durations),
            "join_spread_s": (starts[min(workers, len(starts)) - 1] - starts[0]).total_seconds(),
            "worker_cpu_pct_of_core": cpu, "load_before": load_before, "load_after": load_after}


def _wait_for(logs: list[Path], processes: list[subprocess.Popen], marker: str, timeout_s: float) -> None:
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


def _spent(url: str, name: str, budget: int) -> bool:
    """Whether study ``name`` has ``budget`` measured trials and none running (one read of its trials)."""
    import optuna

    trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    running = any(t.state == optuna.trial.TrialState.RUNNING for t in trials)
    return not running and sum(1 for t in trials if t.user_attrs.get("measured")) >= budget


def _stop_when_done(logs: list[Path], processes: list[subprocess.Popen], sampler: Sampler, spent: Any,
                    timeout_s: float) -> None:
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
            if (done or logs[i].read_text(errors="replace").count("waiting") > seen[i]
                    or processes[i].poll() is not None):
                sampler.sample(i)
                processes[i].terminate()
                running.discard(i)
        time.sleep(0.2)
    if running:
        tail = logs[min(running)].read_text(errors="replace")[-1500:]
        raise SystemExit(f"{len(running)} workers still running after {timeout_s:.0f} s; worker "
                         f"{min(running)}'s log ends:\n{tail}")


def grpc_ladder(pg: Any, counts: list[int], per_worker: int, sleep_s: float,
                directory: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Bare Optuna workers (ask, sleep ``sleep_s``, tell; the random sampler) on PostgreSQL directly
    ("optuna-postgres") and through ``optuna.storages.run_grpc_proxy_server`` over it ("optuna-grpc",
    the proxy's CPU in ``proxy_cpu_pct_of_core``): the storage layer the proxy changes, without the
    tuner (``tuner.study.storage.open_storage`` opens RDB URLs only, and the tuner's claims, locks and
    heartbeats need the SQLAlchemy engine a proxy does not have). SystemExit without ``grpcio``."""
    try:
        import grpc  # noqa: F401 - optuna's proxy needs it; not a tuner dependency
    except ImportError:
        raise SystemExit("--grpc needs grpcio (pip install grpcio; not a tuner dependency)") from None
    for label in ("optuna-postgres", "optuna-grpc"):
        for n in counts:
            url = pg.create_database(f"{label.replace('-', '_')}_{n}")
            server, storage = None, url
            if label == "optuna-grpc":
                port = free_port()
                server = subprocess.Popen([sys.executable, __file__, "--grpc-server", url, str(port)], env=ENV)
                storage = f"grpc://127.0.0.1:{port}"
            try:
                row = _bare_fleet(url, storage, n, per_worker, sleep_s, directory / f"{label}_{n}", server)
            finally:
                if server is not None:
                    server.terminate()
                    server.wait()
            yield label, row


def _bare_fleet(url: str, storage: str, workers: int, per_worker: int, sleep_s: float, home: Path,
                server: subprocess.Popen | None) -> dict[str, Any]:
    """One run of ``workers`` bare Optuna worker processes on ``storage``; started, ready (connected),
    then released together by a file; the row as :func:`_row` (plus the proxy's CPU)."""
    import optuna

    home.mkdir(parents=True)
    name = "bare"
    optuna.create_study(study_name=name, storage=url)
    go, logs = home / "go", [home / f"w{i}.log" for i in range(workers)]
    processes = []
    for log in logs:
        with open(log, "w") as sink:
            processes.append(subprocess.Popen([sys.executable, __file__, "--optuna-worker", storage, name,
                                               str(per_worker), str(sleep_s), str(go)], env=ENV, stdout=sink,
                                              stderr=subprocess.STDOUT))
    try:
        _wait_for(logs, processes, "ready", timeout_s=600)
        proxy = Sampler([server.pid]) if server is not None else None
        load_before = loadavg()
        go.touch()
        codes = [p.wait(timeout=120 + 4 * per_worker * sleep_s) for p in processes]
        if any(codes):
            raise SystemExit(f"a bare worker failed: {codes}: {logs[codes.index(max(codes))].read_text()[-800:]}")
        load_after = loadavg()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    # each bare worker prints its own CPU share of the trial loop (it has ended: no tree to sample)
    shares = [float(log.read_text().rsplit("cpu_pct ", 1)[1].split()[0]) for log in logs]
    _, window_s, done = _measured_window(url, name, measured=False)
    row = _row(workers, done, window_s, sum(shares) / workers, load_before, load_after)
    if proxy is not None:
        row["proxy_cpu_pct_of_core"] = proxy.percent_of_core()
    return row


def _bare_worker(storage: str, name: str, trials: int, sleep_s: float, go: str) -> None:
    """A bare Optuna worker: connect, say "ready", wait for file ``go``, then ``trials`` times ask,
    sleep ``sleep_s`` s, tell. ``grpc://host:port``: through ``GrpcStorageProxy``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if storage.startswith("grpc://"):
        host, port = storage.removeprefix("grpc://").rsplit(":", 1)
        backend: Any = optuna.storages.GrpcStorageProxy(host=host, port=int(port))
        backend.wait_server_ready(timeout=120)
    else:
        backend = storage
    study = optuna.load_study(study_name=name, storage=backend, sampler=optuna.samplers.RandomSampler())
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.05)
    cpu_s, wall_s = sum(os.times()[:2]), time.monotonic()
    for _ in range(trials):
        trial = study.ask()
        x = trial.suggest_int("x", 0, 10**9)
        time.sleep(sleep_s)
        study.tell(trial, float(x))
    print(f"cpu_pct {100 * (sum(os.times()[:2]) - cpu_s) / (time.monotonic() - wall_s):.3f}", flush=True)


def _grpc_server(url: str, port: int) -> None:
    """The proxy: ``run_grpc_proxy_server`` over ``get_storage(url)`` (Optuna's cached RDB storage)."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    optuna.storages.run_grpc_proxy_server(optuna.storages.get_storage(url), host="127.0.0.1", port=port)


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


def _write(result: dict[str, Any]) -> None:
    """The raw results so far to :data:`RESULTS` (JSON)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1, default=str) + "\n")


def _print_rows(label: str, rows: list[dict[str, Any]], first: dict[str, Any]) -> None:
    """Add ``ratio_to_ideal`` to each row (against ``first``'s rate per worker) and print them."""
    base = first["trials_per_s"] / first["workers"]
    for row in rows:
        row["ratio_to_ideal"] = row["trials_per_s"] / (row["workers"] * base)
        print(f"{label:14s} N={row['workers']:2d}: {row['trials_per_s']:6.3f} trials/s, ratio to ideal "
              f"{row['ratio_to_ideal']:.2f}, trial {row['mean_trial_s']:.2f} s, N-th start +"
              f"{row['join_spread_s']:.1f} s, worker CPU {row['worker_cpu_pct_of_core']:.1f} % of a core each, "
              f"load {row['load_before']:.1f} -> {row['load_after']:.1f}"
              + (f", proxy CPU {row['proxy_cpu_pct_of_core']:.1f} % of a core" if "proxy_cpu_pct_of_core" in row
                 else ""), flush=True)


def sleep_main(args: argparse.Namespace, counts: list[int]) -> None:
    """The sleep-bound ladder on PostgreSQL (and through the gRPC proxy with ``--grpc``); writes RESULTS."""
    from tuner.testing.postgres import running_postgres

    print(f"host: {os.cpu_count()} cores, load average {loadavg():.2f}; {args.sleep:g} s sleep-bound trials, "
          f"{args.per_worker} per worker, workers {counts}", flush=True)
    result: dict[str, Any] = {"command": " ".join(["python", "bench/fleet.py", *sys.argv[1:]]),
                              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cores": os.cpu_count(),
                              "load_at_start": os.getloadavg(), "sleep_s": args.sleep, "per_worker": args.per_worker}
    with tempfile.TemporaryDirectory(prefix="tuner-fleet-sleep-") as tmp, running_postgres(Path(tmp) / "pg") as pg:
        rows: list[dict[str, Any]] = []
        result["postgres"] = rows
        for n in counts:
            rows.append(sleep_fleet(pg.create_database(f"fleet_{n}"), n, args.per_worker, args.sleep, Path(tmp)))
            _print_rows("postgres", rows[-1:], rows[0])
            _write(result)
        if args.grpc:
            for label, row in grpc_ladder(pg, counts, args.per_worker, args.sleep, Path(tmp)):
                result.setdefault(label, []).append(row)
                _print_rows(label, [row], result[label][0])
                _write(result)
    result["load_at_end"] = os.getloadavg()
    _write(result)
    print(f"ratio to ideal at N={rows[-1]['workers']} (postgres, {args.sleep:g} s trials, load "
          f"{rows[-1]['load_after']:.1f} on {os.cpu_count()} cores): {rows[-1]['ratio_to_ideal']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32, help="no-op mode: trials per study")
    parser.add_argument("--workers", default=None, help="N values, e.g. 1,4,8 (at most 32; default 1,2,4,8, "
                        "with --sleep 1,4,8,16,32)")
    parser.add_argument("--storages", default="postgres,sqlite", help="no-op mode: storages")
    parser.add_argument("--sleep", type=float, default=None, help="seconds each trial holds its slot (CPU idle)")
    parser.add_argument("--per-worker", type=int, default=3, help="with --sleep: trials per worker")
    parser.add_argument("--grpc", action="store_true", help="with --sleep: also through Optuna's gRPC proxy")
    parser.add_argument("--optuna-worker", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--grpc-server", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.optuna_worker:
        storage, name, trials, sleep_s, go = args.optuna_worker
        _bare_worker(storage, name, int(trials), float(sleep_s), go)
        return
    if args.grpc_server:
        _grpc_server(args.grpc_server[0], int(args.grpc_server[1]))
        return
    counts = [int(n) for n in (args.workers or ("1,4,8,16,32" if args.sleep else "1,2,4,8")).split(",")]
    if not counts or min(counts) < 1 or max(counts) > 32:
        parser.error("--workers: between 1 and 32 workers")
    if args.sleep is not None:
        sleep_main(args, counts)
        return
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
