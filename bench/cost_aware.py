"""Cost-aware search against today's default, in device-seconds: which reaches the front for less.

Usage::

    python bench/cost_aware.py                         # every table below, 8 seeds, 2 processes
    python bench/cost_aware.py --seeds 5 --tables avatar_dit:cpu1t --methods default-v1,ei-per-second
    python bench/cost_aware.py --jobs 1                # one process (a busy machine)

Each study is REPLAYED (simulated runs) through the real coordinator against an exhaustive measured
table (:mod:`tuner.replay.methods`); a trial's device-seconds are modelled by
:mod:`tuner.replay.cost_model` (the table sidecar's measured start-up and evaluation, plus
(warm-up + min_repeats) x latency_p50_s). ``default-v1`` is today's default exactly (TPE,
multivariate, 5 start-up trials); the candidates are the ``tpe`` sampler's ``cost_aware`` option
(:mod:`tuner.study.cost_aware`). Per table and method it prints the median over seeds of the
device-seconds and of the trials (that ran a workload) to reach 90 / 95 % of the exhaustive front's
normalised hypervolume (a seed that never gets there counts as infinite; ``n`` says how many did),
the median fraction after 40 trials, and the ratio of device-seconds to 95 % against default-v1. A
candidate "wins on every table" when, on each table, its median device-seconds to 95 % is below
default-v1's and its median fraction at 40 trials is not lower; the issue's goal (at most half the
device-seconds, at most 3x the front's size in trials) is printed beside it. Raw curves go to
``bench/results/cost_aware_<table>_<hardware>.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from tuner.replay.cost_model import overhead_note
from tuner.replay.methods import Method, Target, replay_once
from tuner.replay.table import load_hardware_types, load_table

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"avatar_dit:cpu1t": 100, "avqa:cpu1t": 200, "avqa:cpu1t-nodnn": 200}  # table -> trials per study
METHODS: dict[str, Method] = {
    "default-v1": Method("default-v1", "tpe", options={"multivariate": True, "n_startup_trials": 5}),
    "cheap-start": Method("cheap-start", "tpe", options={"cost_aware": "cheap-start"}),
    "ei-per-second": Method("ei-per-second", "tpe", options={"cost_aware": "ei-per-second"}),
    "ei-per-second-cooled": Method("ei-per-second-cooled", "tpe", options={"cost_aware": "ei-per-second-cooled"}),
    "ei-per-sqrt-second": Method("ei-per-sqrt-second", "tpe", options={"cost_aware": {"weight": 0.5}}),
}
TARGETS = (0.90, 0.95)
AT_TRIALS = 40


@lru_cache(maxsize=None)
def _target(label: str) -> Target:
    return Target.of(load_table(load_hardware_types()[label]))


def replay_job(label: str, method_name: str, seed: int, budget: int) -> dict[str, Any]:
    """One replayed study (run in a worker process): its curves and counts."""
    with tempfile.TemporaryDirectory(prefix="tuner-cost-aware-") as scratch:
        replay = replay_once(_target(label), METHODS[method_name], seed, budget, Path(scratch))
    return {"table": label, "method": method_name, "seed": seed, "fractions": replay.fractions,
            "device_s": replay.device_s, "trials": replay.trials, "runs": replay.runs,
            "stopped_because": replay.stopped_because, "elapsed_s": replay.elapsed_s, "sampler_s": replay.sampler_s}


def first_reach(fractions: Sequence[float], device_s: Sequence[float], target: float) -> tuple[float, float]:
    """(trials, device-seconds) when the hypervolume fraction first reaches ``target``; (inf, inf) never."""
    for index, fraction in enumerate(fractions):
        if fraction >= target - 1e-12:
            return float(index + 1), float(device_s[index])
    return math.inf, math.inf


def summarise(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Medians over seeds (a seed that never reaches a target counts as infinite)."""
    summary: dict[str, Any] = {"seeds": len(runs)}
    for target in TARGETS:
        reached = [first_reach(r["fractions"], r["device_s"], target) for r in runs]
        key = f"{round(100 * target)}"
        summary[f"trials_to_{key}"] = statistics.median(t for t, _ in reached)
        summary[f"device_s_to_{key}"] = statistics.median(s for _, s in reached)
        summary[f"reached_{key}"] = sum(1 for t, _ in reached if math.isfinite(t))
    summary[f"hv_at_{AT_TRIALS}"] = statistics.median(
        r["fractions"][min(AT_TRIALS, len(r["fractions"])) - 1] for r in runs)
    summary["device_s_total"] = statistics.median(r["device_s"][-1] for r in runs)
    return summary


def _finite(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Summaries for JSON: a target never reached (infinite) is null."""
    return {name: {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in s.items()}
            for name, s in summaries.items()}


def _fmt(value: float, digits: int = 1) -> str:
    return "never" if not math.isfinite(value) else f"{value:.{digits}f}"


def table_lines(label: str, front: int, summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The printed table of one measured table (see the module docstring)."""
    base = summaries.get("default-v1")
    lines = [f"{label}: front {front} settings (goal: 95 % in <= {3 * front} trials, <= 0.5x default-v1's device-s)",
             f"| method | dev-s to 90 % | dev-s to 95 % (n) | x default-v1 | trials to 95 % | HV@{AT_TRIALS} | "
             "dev-s total |", "|---|---|---|---|---|---|---|"]
    for name, s in summaries.items():
        ratio = (s["device_s_to_95"] / base["device_s_to_95"]) if base and math.isfinite(base["device_s_to_95"]) \
            and base["device_s_to_95"] > 0 else math.nan
        lines.append(f"| {name} | {_fmt(s['device_s_to_90'])} | {_fmt(s['device_s_to_95'])} ({s['reached_95']}/"
                     f"{s['seeds']}) | {_fmt(ratio, 2) if not math.isnan(ratio) else 'n/a'} | "
                     f"{_fmt(s['trials_to_95'], 0)} | {s[f'hv_at_{AT_TRIALS}']:.3f} | {s['device_s_total']:.1f} |")
    return lines


def verdicts(by_table: Mapping[str, tuple[int, Mapping[str, Mapping[str, Any]]]]) -> list[str]:
    """Per candidate: wins on every table (cheaper to 95 %, HV@40 not lower), and the issue's goal."""
    lines = []
    names = {n for _, summaries in by_table.values() for n in summaries if n != "default-v1"}
    for name in sorted(names):
        wins, goal = [], []
        for label, (front, summaries) in by_table.items():
            s, base = summaries.get(name), summaries.get("default-v1")
            if s is None or base is None:
                continue
            cheaper = s["device_s_to_95"] < base["device_s_to_95"]
            kept = s[f"hv_at_{AT_TRIALS}"] >= base[f"hv_at_{AT_TRIALS}"] - 1e-9
            wins.append(cheaper and kept)
            goal.append(cheaper and kept and s["device_s_to_95"] <= 0.5 * base["device_s_to_95"]
                        and s["trials_to_95"] <= 3 * front)
        verdict = "wins on every table" if wins and all(wins) else f"does not win on every table ({sum(wins)}/{len(wins)})"
        lines.append(f"{name}: {verdict}; meets the issue's goal on {sum(goal)}/{len(goal)} tables")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default=",".join(TABLES), help="table:hardware,...")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated of {', '.join(METHODS)}")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--budget", type=int, help="trials per study (default: per table, see TABLES)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    labels, names = args.tables.split(","), args.methods.split(",")
    unknown = [n for n in names if n not in METHODS] + [t for t in labels if t not in TABLES]
    if unknown:
        parser.error(f"unknown {unknown}")
    started = time.perf_counter()
    print(f"cost-aware search (REPLAYED studies: simulated runs, modelled device-seconds); {args.seeds} seeds", flush=True)
    jobs = [(label, name, seed, args.budget or TABLES[label]) for label in labels for name in names
            for seed in range(args.seeds)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(replay_job, *zip(*jobs)))
    by_table: dict[str, tuple[int, dict[str, dict[str, Any]]]] = {}
    for label in labels:
        target = _target(label)
        print(overhead_note(target.table), flush=True)
        runs = [r for r in results if r["table"] == label]
        summaries = {name: summarise([r for r in runs if r["method"] == name]) for name in names}
        by_table[label] = (target.front_size, summaries)
        for line in table_lines(label, target.front_size, summaries):
            print(line, flush=True)
        path = args.results_dir / f"cost_aware_{label.replace(':', '_')}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"table": label, "front_size": target.front_size,
                                    "overhead": overhead_note(target.table), "seeds": args.seeds,
                                    "methods": {n: dict(METHODS[n].options) for n in names},
                                    "summaries": _finite(summaries), "runs": runs}, indent=1))
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    for line in verdicts(by_table):
        print(line, flush=True)
    print(f"elapsed {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
