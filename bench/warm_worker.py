"""Trial turnaround with a warm worker against a fresh process per trial, built-in avatar model.

The same trials (the avatar demo's baseline setting with varying ``sample_steps``,
one measured call each: the shape of a study where loading dominates) run on:

1. ``WarmRunner`` -- one long-lived worker that keeps the loaded DiT;
2. ``SubprocessRunner(launcher="fork")`` -- a new process per trial, forked from a
   fork server that already imported torch and the workload module (weights
   are still loaded per trial);
3. ``SubprocessRunner(launcher="exec")`` -- a new interpreter per trial
   (``import torch`` + weights every time).

Turnaround = the wall time of ``runner.run`` (request written -> result read).
The warm figure is reported for the first trial (start + load) and the
steady state (the rest); ratios are fresh per-trial mean / warm steady-state mean.
Usage: ``python bench/warm_worker.py [--trials 10] [--threads 1]``: raw figures to
``bench/results/warm_worker.json``; ``--report`` prints the same table from them and measures nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import raw_results
from raw_results import provenance

from tuner.results import Outcome
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner
from tuner.runner.warm import WarmRunner

WORKLOAD = "tuner.workloads.avatar_dit:AvatarDiTWorkload"
BASELINE = {"infer_frames": 12, "resolution": 32, "batch_size": 1, "precision": "fp32", "online_decode": True}
INPUTS = {"audio_seconds": 1.0, "fps": 12, "output_size": 32}


def request(trial: int, workdir: Path) -> TrialRequest:
    settings = {**BASELINE, "sample_steps": 1 + trial % 3, "num_clip": 1}
    return TrialRequest(
        study_name="bench_warm",
        trial_number=trial,
        workload_class=WORKLOAD,
        settings=settings,
        inputs=INPUTS,
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=300,
        workdir=str(workdir / f"trial_{trial:03d}"),
    )


def turnarounds(runner: Runner, trials: int, workdir: Path, threads: int) -> tuple[list[float], list[float]]:
    """(turnaround per trial, measured latency_p50 per trial), seconds."""
    times, latencies = [], []
    try:
        for trial in range(trials):
            started = time.perf_counter()
            result = runner.run(request(trial, workdir), Slot(0, None, threads))
            times.append(time.perf_counter() - started)
            if result.outcome is not Outcome.OK:
                raise SystemExit(
                    f"trial {trial} failed: {result.outcome.value} {result.reason}\n{result.log_tail[-800:]}"
                )
            latencies.append(result.metrics["latency_p50_s"].value or float("nan"))
    finally:
        runner.close()
    return times, latencies


def measure(trials: int, threads: int) -> dict[str, Any]:
    """Turnaround and model run (p50) of each trial on each runner, seconds."""
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as tmp:
        root = Path(tmp)
        runners: dict[str, Callable[[], Runner]] = {
            "warm": WarmRunner,
            "fork": lambda: SubprocessRunner(launcher="fork", preload=["tuner.workloads.avatar_dit"]),
            "exec": lambda: SubprocessRunner(launcher="exec"),
        }
        figures = {}
        for name, make in runners.items():
            times, latencies = turnarounds(make(), trials, root / name, threads)
            figures[name] = {"turnaround_s": times, "latency_p50_s": latencies}
    return {"trials": trials, "threads": threads, "runners": figures}


def report_lines(result: dict[str, Any]) -> list[str]:
    """The table and ratios docs/benchmarks.md quotes, from one run's figures (measured now or read back)."""
    runs = result["runners"]
    warm, warm_lat = runs["warm"]["turnaround_s"], runs["warm"]["latency_p50_s"]
    steady = statistics.fmean(warm[1:]) if len(warm) > 1 else warm[0]
    fork, fresh = runs["fork"]["turnaround_s"], runs["exec"]["turnaround_s"]
    lines = [
        provenance(result),
        "",
        f"built-in avatar DiT, {result['trials']} trials, 1 measured call each, {result['threads']} thread(s)",
        "",
        "| runner | turnaround / trial | model run (p50) |",
        "| --- | --- | --- |",
        f"| warm, first trial (start + load) | {warm[0]:.2f} s | {warm_lat[0]:.3f} s |",
        f"| warm, steady state | **{steady:.2f} s** | {statistics.fmean(warm_lat[1:] or warm_lat):.3f} s |",
        f"| fresh, fork server | {statistics.fmean(fork):.2f} s | "
        f"{statistics.fmean(runs['fork']['latency_p50_s']):.3f} s |",
        f"| fresh, new interpreter (`exec`) | {statistics.fmean(fresh):.2f} s | "
        f"{statistics.fmean(runs['exec']['latency_p50_s']):.3f} s |",
        "",
        f"Ratios: fresh (`exec`) / warm steady state **{statistics.fmean(fresh) / steady:.1f}x** (target >= 3x); "
        f"fresh (fork server) / warm {statistics.fmean(fork) / steady:.1f}x; the whole {result['trials']}-trial "
        f"run {sum(fresh):.1f} s fresh (`exec`) against {sum(warm):.1f} s warm ({sum(fresh) / sum(warm):.1f}x).",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    raw_results.main(parser, "warm_worker.py", lambda args: measure(args.trials, args.threads), report_lines)


if __name__ == "__main__":
    main()
