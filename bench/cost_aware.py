"""Cost-aware search against today's default, in device-seconds: which reaches the front for less.

Usage::

    python bench/cost_aware.py                         # every table below, 8 seeds, 2 processes
    python bench/cost_aware.py --seeds 5 --tables avatar_dit:cpu1t --methods default-v1,ei-per-second
    python bench/cost_aware.py --jobs 1                # one process (a busy machine)
    python bench/cost_aware.py --first-seed 8 --seeds 8 --merge   # 8 more seeds, added to the JSON's
    python bench/cost_aware.py --report                # print the tables of the results JSON, replay nothing

Each study is REPLAYED (simulated runs) through the real coordinator against an exhaustive measured
table (:mod:`tuner.replay.methods`); a trial's device-seconds are modelled by
:mod:`tuner.replay.cost_model` (the table sidecar's measured start-up and evaluation, plus
(warm-up + min_repeats) x latency_p50_s). ``default-v1`` is today's default exactly (TPE,
multivariate, 5 start-up trials); the candidates are the ``tpe`` sampler's ``cost_aware`` option
(:mod:`tuner.search.cost_aware`). Per table and method it prints the median over seeds of the
device-seconds and of the trials (that ran a workload) to reach 90 / 95 % of the exhaustive front's
normalised hypervolume (a seed that never gets there counts as infinite; ``n`` says how many did),
the median fraction after 40 trials, the ratio of device-seconds to 95 % against default-v1, and on how
many seeds the method got there for fewer device-seconds than default-v1 on the same seed (paired: a
seed is the spec's and the sampler's, so both start from the same random draws). A
candidate "wins on every table" when, on each table, its median device-seconds to 95 % is below
default-v1's and its median fraction at 40 trials is not lower; the issue's goal (at most half the
device-seconds, at most 3x the front's size in trials) is printed beside it. Raw curves go to
``bench/results/cost_aware_<table>_<hardware>.json``; ``--merge`` adds the runs already there that were
replayed under the same cost model (their first run, the reference, cost the same), ``--report``
prints the tables from them alone.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

from tuner.replay.cost_model import ReplayCostModel, overhead_note
from tuner.replay.hypervolume import trials_to_reach
from tuner.replay.methods import Method, Target, replay_once
from tuner.replay.table import load_hardware_types, load_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cost_aware_report import AT_TRIALS, finite, table_lines, verdicts  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parents[1]
TABLES = {  # table -> trials per study
    "avatar_dit:cpu1t": 100,
    "avqa:cpu1t": 200,
    "avqa:cpu1t-nodnn": 200,
    "wan_tiny:cpu1t": 100,
    "omni_tiny:cpu1t": 100,
}
MORE_TABLES = {  # only when named (--tables): the tables measured against a drift anchor (bench/tables/anchored_build.py)
    f"{table}:cpu1t-anchored{raw}": 100 for table in ("wan_tiny", "omni_tiny") for raw in ("", "-raw")
}
IN_ORDER = 1  # the methods as they were before proposals were asked ahead for reloads: run in the order asked
METHODS: dict[str, Method] = {
    "default-v1": Method(
        "default-v1", "tpe", options={"multivariate": True, "n_startup_trials": 5}, reload_lookahead=IN_ORDER
    ),
    "cheap-start": Method("cheap-start", "tpe", options={"cost_aware": "cheap-start"}, reload_lookahead=IN_ORDER),
    "ei-per-second": Method("ei-per-second", "tpe", options={"cost_aware": "ei-per-second"}, reload_lookahead=IN_ORDER),
    "ei-per-second-cooled": Method(
        "ei-per-second-cooled", "tpe", options={"cost_aware": "ei-per-second-cooled"}, reload_lookahead=IN_ORDER
    ),
    "ei-per-sqrt-second": Method(
        "ei-per-sqrt-second", "tpe", options={"cost_aware": {"weight": 0.5}}, reload_lookahead=IN_ORDER
    ),
    "prediction-first": Method(  # default-v1, and proposals predicted dominated are skipped (10 % audited)
        "prediction-first",
        "tpe",
        options={"multivariate": True, "n_startup_trials": 5},
        skip_dominated={"audit_share": 0.1},
        reload_lookahead=IN_ORDER,
    ),
    "skip-ahead": Method(  # the spec's default before predicted gain: prediction-first, proposals asked ahead
        "skip-ahead", "tpe", skip_dominated={"audit_share": 0.1}
    ),
    "gain-sampler-start": Method(  # the default before the spread start: TPE proposes until 10 are measured
        "gain-sampler-start",
        "tpe",
        skip_dominated={"audit_share": 0.1},
        predicted_gain={"after": 10, "start": "sampler"},
    ),
    "default": Method(  # the spec's default: skip-ahead, proposals by predicted gain per second, a spread start
        "default", "tpe", skip_dominated={"audit_share": 0.1}, predicted_gain={"after": 10}
    ),
    "default-ahead-2": Method(  # the default with proposals asked at most 2 ahead (a smaller window)
        "default-ahead-2", "tpe", skip_dominated={"audit_share": 0.1}, reload_lookahead=2
    ),
    "random": Method("random", "random", reload_lookahead=IN_ORDER),
}
TARGETS = (0.90, 0.95)


@cache
def _target(label: str) -> Target:
    return Target.of(load_table(load_hardware_types()[label]))


def replay_job(label: str, method_name: str, seed: int, budget: int) -> dict[str, Any]:
    """One replayed study (run in a worker process): its curves and counts."""
    with tempfile.TemporaryDirectory(prefix="tuner-cost-aware-") as scratch:
        replay = replay_once(_target(label), METHODS[method_name], seed, budget, Path(scratch))
    return {
        "table": label,
        "method": method_name,
        "seed": seed,
        "overhead": overhead_note(_target(label).table),
        "fractions": replay.fractions,
        "device_s": replay.device_s,
        "trials": replay.trials,
        "runs": replay.runs,
        "stopped_because": replay.stopped_because,
        "elapsed_s": replay.elapsed_s,
        "sampler_s": replay.sampler_s,
        "skipped_dominated": replay.skipped_dominated,
        "audited": replay.audited,
        "wrong_skips": replay.wrong_skips,
    }


def first_reach(fractions: Sequence[float], device_s: Sequence[float], target: float) -> tuple[float, float]:
    """(trials, device-seconds) when the hypervolume fraction first reaches ``target``
    (:func:`~tuner.replay.hypervolume.trials_to_reach`); (inf, inf) never."""
    reached = trials_to_reach(fractions, target)
    return (math.inf, math.inf) if reached is None else (float(reached), float(device_s[reached - 1]))


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
        r["fractions"][min(AT_TRIALS, len(r["fractions"])) - 1] for r in runs
    )
    summary["device_s_total"] = statistics.median(r["device_s"][-1] for r in runs)
    summary["hv_final"] = statistics.median(r["fractions"][-1] for r in runs)
    if any("skipped_dominated" in r for r in runs):  # runs replayed since skipping existed
        summary["skipped_dominated"] = sum(r.get("skipped_dominated", 0) for r in runs)
        summary["audited"] = sum(r.get("audited", 0) for r in runs)
        summary["wrong_skips"] = sum(r.get("wrong_skips", 0) for r in runs)
    return summary


def reference_cost(target: Target) -> float:
    """The modelled device-seconds of the table's reference setting (every study's first run): two runs
    replayed under the same cost model (:mod:`tuner.replay.cost_model`, the sidecar) agree on it."""
    table = target.table
    reference = table.spec.reference or {}
    return ReplayCostModel.of(table).trial_seconds(table.lookup(dict(reference)), table.result(dict(reference)))


def earlier_runs(
    path: Path, new: Sequence[Mapping[str, Any]], target: Target, recorded: bool = False
) -> list[dict[str, Any]]:
    """The runs in ``path`` (an earlier results JSON) of any method, not repeated in ``new``, replayed under
    the same cost model (their first run cost :func:`reference_cost`): those a merged summary adds. ``recorded``
    (a report): all of them, as they were written together, whatever the cost model is today."""
    if not path.exists():
        return []
    done = {(r["method"], r["seed"]) for r in new}
    earlier = [r for r in json.loads(path.read_text())["runs"] if (r["method"], r["seed"]) not in done]
    expected = None if recorded else reference_cost(target)
    kept = [
        r
        for r in earlier
        if r["device_s"] and (expected is None or math.isclose(r["device_s"][0], expected, rel_tol=1e-9))
    ]
    print(
        f"  merged {len(kept)} earlier run(s) from {path.name}"
        + (
            f"; left out {len(earlier) - len(kept)} replayed under another cost model"
            if len(kept) < len(earlier)
            else ""
        ),
        flush=True,
    )
    return kept


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default=",".join(TABLES), help="table:hardware,...")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated of {', '.join(METHODS)}")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="add the runs already in the results JSON (other seeds, same cost model) to the new ones",
    )
    parser.add_argument("--report", action="store_true", help="replay nothing: print the tables of the results JSON")
    parser.add_argument("--budget", type=int, help="trials per study (default: per table, see TABLES)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    labels, names, budgets = args.tables.split(","), args.methods.split(","), {**TABLES, **MORE_TABLES}
    unknown = [n for n in names if n not in METHODS] + [t for t in labels if t not in budgets]
    if unknown:
        parser.error(f"unknown {unknown}")
    started = time.perf_counter()
    print("cost-aware search (REPLAYED studies: simulated runs, modelled device-seconds)", flush=True)
    jobs = (
        []
        if args.report
        else [
            (label, name, seed, args.budget or budgets[label])
            for label in labels
            for name in names
            for seed in range(args.first_seed, args.first_seed + args.seeds)
        ]
    )
    results: list[dict[str, Any]] = []
    if jobs:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(replay_job, *zip(*jobs)))
    by_table = {
        label: report_table(
            label,
            [r for r in results if r["table"] == label],
            args.results_dir,
            merge=args.merge or args.report,
            write=not args.report,
            shown=names if args.report else None,
        )
        for label in labels
    }
    for line in verdicts(by_table):
        print(line, flush=True)
    if args.report:
        print(recorded_time(labels, args.results_dir), flush=True)
    else:  # a report is read from committed results: the same text every time
        print(f"elapsed {time.perf_counter() - started:.0f} s", flush=True)
    return 0


def report_table(
    label: str,
    runs: list[dict[str, Any]],
    results_dir: Path,
    merge: bool,
    write: bool,
    shown: Sequence[str] | None = None,
) -> tuple[int, dict[str, dict[str, Any]]]:
    """Print one table's summaries (``runs`` plus, with ``merge``, the earlier ones; only the methods ``shown``
    when given: a report of some methods); write its JSON."""
    target = _target(label)
    path = results_dir / f"cost_aware_{label.replace(':', '_')}.json"
    note, front_size = overhead_note(target.table), target.front_size
    if not write and path.exists():  # a report: the cost model and the front the runs were replayed under, as recorded
        recorded = json.loads(path.read_text())
        note, front_size = str(recorded.get("overhead", note)), int(recorded.get("front_size", front_size))
    print(note, flush=True)
    if merge:
        runs = runs + earlier_runs(path, runs, target, recorded=not write)
    present = [n for n in METHODS if any(r["method"] == n for r in runs) and (shown is None or n in shown)]
    summaries = {name: summarise([r for r in runs if r["method"] == name]) for name in present}
    for name in present:
        summaries[name]["cheaper_seeds"] = paired_cheaper(runs, name)
    for line in table_lines(label, front_size, summaries):
        print(line, flush=True)
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "table": label,
                    "front_size": target.front_size,
                    "overhead": note,
                    "seeds": sorted({r["seed"] for r in runs}),
                    "methods": {
                        n: {
                            **dict(METHODS[n].options),
                            **(
                                {"skip_dominated": dict(METHODS[n].skip_dominated)} if METHODS[n].skip_dominated else {}
                            ),
                        }
                        for n in present
                    },
                    "summaries": finite(summaries),
                    "runs": runs,
                },
                indent=1,
            )
        )
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    return target.front_size, summaries


def recorded_time(labels: Sequence[str], results_dir: Path) -> str:
    """One line: how many replayed studies the results JSONs of ``labels`` hold and their replay wall time."""
    runs = [
        run
        for label in labels
        for run in json.loads((results_dir / f"cost_aware_{label.replace(':', '_')}.json").read_text())["runs"]
    ]
    return (
        f"recorded: {len(runs)} replayed studies, {sum(run['elapsed_s'] for run in runs):.0f} s of replay "
        "wall time in all"
    )


def paired_cheaper(runs: Sequence[Mapping[str, Any]], name: str) -> str:
    """``k/n``: of the n seeds replayed by both, those where ``name`` reached 95 % for fewer device-seconds
    than default-v1 on the same seed (same spec seed, same start-up draws)."""

    def cost(run: Mapping[str, Any]) -> float:
        return first_reach(run["fractions"], run["device_s"], 0.95)[1]

    base = {r["seed"]: cost(r) for r in runs if r["method"] == "default-v1"}
    mine = {r["seed"]: cost(r) for r in runs if r["method"] == name and r["seed"] in base}
    return f"{sum(1 for seed, c in mine.items() if c < base[seed])}/{len(mine)}"


if __name__ == "__main__":
    sys.exit(main())
