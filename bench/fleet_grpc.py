"""The gRPC proxy rungs of ``bench/fleet.py --sleep S --grpc`` (issue 27): bare Optuna workers on PostgreSQL
directly and through Optuna's gRPC storage proxy, with sleep-bound trials.

Imported by ``bench/fleet.py``; this file is also the program of each bare worker (``--worker``) and of the
proxy (``--server``) those rungs start as their own processes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleet_sleep import ENV, Sampler, loadavg, measured_window, row_of, wait_for_logs

from tuner.host import free_port


def require_grpc() -> None:
    """SystemExit (one line) when ``grpcio``, which Optuna's proxy needs, is not installed."""
    try:
        import grpc  # noqa: F401 - optuna's proxy needs it; not a tuner dependency
    except ImportError:
        raise SystemExit("--grpc needs grpcio (pip install grpcio; not a tuner dependency)") from None


def grpc_ladder(
    pg: Any, counts: list[int], per_worker: int, sleep_s: float, directory: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Bare Optuna workers (ask, sleep ``sleep_s``, tell; the random sampler) on PostgreSQL directly
    ("optuna-postgres") and through ``optuna.storages.run_grpc_proxy_server`` over it ("optuna-grpc",
    the proxy's CPU in ``proxy_cpu_pct_of_core``): the storage layer the proxy changes, without the
    tuner (``tuner.storage.opening.open_storage`` opens RDB URLs only, and the tuner's claims, locks and
    heartbeats need the SQLAlchemy engine a proxy does not have). SystemExit without ``grpcio``."""
    require_grpc()
    for label in ("optuna-postgres", "optuna-grpc"):
        for n in counts:
            url = pg.create_database(f"{label.replace('-', '_')}_{n}")
            server, storage = None, url
            if label == "optuna-grpc":
                port = free_port()
                server = subprocess.Popen([sys.executable, __file__, "--server", url, str(port)], env=ENV)
                storage = f"grpc://127.0.0.1:{port}"
            try:
                row = _bare_fleet(url, storage, n, per_worker, sleep_s, directory / f"{label}_{n}", server)
            finally:
                if server is not None:
                    server.terminate()
                    server.wait()
            yield label, row


def _bare_fleet(
    url: str, storage: str, workers: int, per_worker: int, sleep_s: float, home: Path, server: subprocess.Popen | None
) -> dict[str, Any]:
    """One run of ``workers`` bare Optuna worker processes on ``storage``; started, ready (connected),
    then released together by a file; the row as :func:`fleet_sleep.row_of` (plus the proxy's CPU)."""
    import optuna

    home.mkdir(parents=True)
    name = "bare"
    optuna.create_study(study_name=name, storage=url)
    go, logs = home / "go", [home / f"w{i}.log" for i in range(workers)]
    processes = []
    for log in logs:
        with open(log, "w") as sink:
            processes.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--worker", storage, name, str(per_worker), str(sleep_s), str(go)],
                    env=ENV,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        wait_for_logs(logs, processes, "ready", timeout_s=600)
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
    _, window_s, done = measured_window(url, name, measured=False)
    row = row_of(workers, done, window_s, sum(shares) / workers, load_before, load_after)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--worker",
        nargs=5,
        metavar=("STORAGE", "STUDY", "TRIALS", "SLEEP_S", "GO_FILE"),
        help="run one bare Optuna worker",
    )
    parser.add_argument("--server", nargs=2, metavar=("URL", "PORT"), help="run the gRPC proxy over URL")
    args = parser.parse_args()
    if args.worker:
        storage, name, trials, sleep_s, go = args.worker
        _bare_worker(storage, name, int(trials), float(sleep_s), go)
    elif args.server:
        _grpc_server(args.server[0], int(args.server[1]))
    else:
        parser.error("--worker or --server (the rungs themselves run from bench/fleet.py --sleep S --grpc)")


if __name__ == "__main__":
    main()
