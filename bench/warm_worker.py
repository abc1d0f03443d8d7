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
Usage: ``python bench/warm_worker.py [--trials 10] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tuner.results import Outcome
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner
from tuner.runner.warm import WarmRunner

WORKLOAD = "tuner.workloads.avatar_dit:AvatarDiTWorkload"
BASELINE = {"infer_frames": 12, "resolution": 32, "batch_size": 1, "precision": "fp32", "online_decode": True}
INPUTS = {"audio_seconds": 1.0, "fps": 12, "output_size": 32}


def request(trial: int, workdir: Path) -> TrialRequest:
    settings = {**BASELINE, "sample_steps": 1 + trial % 3, "num_clip": 1}
    return TrialRequest(study_name="bench_warm", trial_number=trial, workload_class=WORKLOAD, settings=settings,
                        inputs=INPUTS, seed=0, device="cpu",
                        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
                        timeout_s=300, workdir=str(workdir / f"trial_{trial:03d}"))


def turnarounds(runner: Runner, trials: int, workdir: Path, threads: int) -> tuple[list[float], list[float]]:
    """(turnaround per trial, measured latency_p50 per trial), seconds."""
    times, latencies = [], []
    try:
        for trial in range(trials):
            started = time.perf_counter()
            result = runner.run(request(trial, workdir), Slot(0, None, threads))
            times.append(time.perf_counter() - started)
            if result.outcome is not Outcome.OK:
                raise SystemExit(f"trial {trial} failed: {result.outcome.value} {result.reason}\n{result.log_tail[-800:]}")
            latencies.append(result.metrics["latency_p50_s"].value or float("nan"))
    finally:
        runner.close()
    return times, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as tmp:
        root = Path(tmp)
        warm, warm_lat = turnarounds(WarmRunner(), args.trials, root / "warm", args.threads)
        fork, fork_lat = turnarounds(SubprocessRunner(launcher="fork", preload=["tuner.workloads.avatar_dit"]),
                                     args.trials, root / "fork", args.threads)
        fresh, fresh_lat = turnarounds(SubprocessRunner(launcher="exec"), args.trials, root / "exec", args.threads)
    steady = statistics.fmean(warm[1:]) if len(warm) > 1 else warm[0]
    print(f"built-in avatar DiT, {args.trials} trials, 1 measured call each, {args.threads} thread(s)")
    print(f"{'runner':<34}{'turnaround/trial':>18}{'model run (p50)':>18}")
    print(f"{'warm: first trial (start + load)':<34}{warm[0]:>16.3f} s{warm_lat[0]:>16.3f} s")
    print(f"{'warm: steady state':<34}{steady:>16.3f} s{statistics.fmean(warm_lat[1:] or warm_lat):>16.3f} s")
    print(f"{'fresh, fork server':<34}{statistics.fmean(fork):>16.3f} s{statistics.fmean(fork_lat):>16.3f} s")
    print(f"{'fresh, new interpreter (exec)':<34}{statistics.fmean(fresh):>16.3f} s{statistics.fmean(fresh_lat):>16.3f} s")
    print(f"ratio fresh (fork) / warm steady:  {statistics.fmean(fork) / steady:.2f}x")
    print(f"ratio fresh (exec) / warm steady:  {statistics.fmean(fresh) / steady:.2f}x  (target >= 3x)")
    total_warm, total_exec = sum(warm), sum(fresh)
    print(f"whole run: warm {total_warm:.2f} s, exec {total_exec:.2f} s ({total_exec / total_warm:.2f}x)")


if __name__ == "__main__":
    main()
