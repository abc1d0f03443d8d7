"""Search efficiency: how many trials, and device-seconds, each sampler needs to find a measured space's front.

Usage::

    python bench/search_efficiency.py --quick        # avatar_dit:cpu1t, 5 seeds, 100 trials, no gp: < 5 min
    python bench/search_efficiency.py                # every table, 20 seeds, 100 trials (gp 5 seeds)
    python bench/search_efficiency.py --tables avatar_dit:cpu1t,avqa:cpu1t-nodnn --methods sweep,tpe,default
    python bench/search_efficiency.py --tables avqa:cpu1t-nodnn --methods default,default+warm:avqa:cpu1t
    python bench/search_efficiency.py --variants 'tpe:n_startup_trials=10,multivariate=false'
    python bench/search_efficiency.py --report bench/results/search_efficiency_avqa_cpu1t.json  # replays nothing

``--report RESULTS.json ...`` re-prints the markdown table docs/benchmarks.md shows from committed raw
results only (``bench/search_efficiency_report.py``).

Each study is REPLAYED (simulated runs): the real coordinator, samplers and SQLite storage run it,
and a :class:`tuner.replay.runner.ReplayRunner` answers every trial from an exhaustive table of
measured settings (``bench/tables/*.csv``, hardware types and their declared memory caps in
``bench/tables/hardware_types.yaml``). Settings above the cap are OOM; the spec's quality
constraints hold as in a real study. Per table x hardware type and method it prints the trials
(that ran a workload: reference and baseline included, rule-rejected and copied ones free) to
reach 90 / 95 / 99 % of the exhaustive front's normalised hypervolume (median [IQR] over seeds,
and how many seeds got there), the device-seconds to reach them, and the fraction reached after
40 trials; it writes ``bench/results/search_efficiency_<table>_<hw>.png`` (median curves) and
``.json`` (raw curves: fractions and cumulative device-seconds per trial, per seed).

Device-seconds are MODELLED (:mod:`tuner.replay.cost_model`): each replayed run costs the table's
measured per-trial start-up and evaluation (sidecar ``trial_overhead_s``, written by
``bench/tables/measure_overhead.py``; 0 s where absent: the ``cost model:`` line under each table
says which) plus its warm-up and timed calls at the setting's recorded latency; a rule-refused,
copied or skipped setting costs nothing. After the table, one line gives the default's
device-seconds to 95 % against a person's sweep of the same space. The closing lines compare the
default with the sweep at 95 % in trials (per table, then the worst case), and, last, the default's
median device-seconds to 95 % as a fraction of ``default-v1``'s (the default before issue 26:
TPE, multivariate, 5 start-up trials, pinned) — in ``--quick`` mode the one line on the quick table.

Methods: ``sweep`` (a person's hand sweep from the reference, whole space, deterministic: one
run), ``random``, ``hillclimb`` (Model Analyzer's quick search, multi-objective), ``tpe``,
``nsga2``, ``gp``, ``default`` (what a spec without a sampler block gets) and ``default-v1`` (the
default before issue 26, kept under its own name to compare against); ``--variants
name:key=value,...`` adds samplers with options. The spec's seed is the study's seed and the
sampler's. A method is a :class:`tuner.replay.methods.Method`: a sampler, coordinator keyword
arguments and an optional setup run on the opened study first (:func:`search_methods.extra_methods` is where
coordinator features such as ``memory_model`` or a warm start join as methods).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tuner.replay.cost_model import ReplayCostModel, overhead_note
from tuner.replay.methods import Method, Replay, Target, replay_once
from tuner.replay.report import (
    MethodResult,
    comparison,
    cost_comparison,
    sweep_cost_line,
    table_lines,
    write_outputs,
)
from tuner.replay.table import (
    HardwareType,
    MeasuredTable,
    TableError,
    load_hardware_types,
    load_table,
    over_cap_fraction,
)
from tuner.results import Outcome

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_efficiency_report import report_lines  # noqa: E402 - beside this script
from search_methods import (  # noqa: E402 - beside this script
    DEFAULT_V1,
    STANDARD,
    extra_methods,
    parse_variant,
    same_replay,
    standard_methods,
)

ROOT = Path(__file__).resolve().parents[1]
FULL = {"seeds": 20, "budget": 100, "gp_seeds": 5, "tables": None, "methods": ",".join(STANDARD)}
QUICK = {
    "seeds": 5,
    "budget": 100,
    "gp_seeds": 1,
    "tables": "avatar_dit:cpu1t",
    "methods": ",".join(m for m in STANDARD if m != "gp"),
}  # gp: ~1-2 s per ask at 100 trials
GP_NOTE = "gp: fewer seeds (about 0.5-1 s per ask at 60 trials on a 2-core CPU, growing with the trials)"


def replay_table(
    table: MeasuredTable, methods: Sequence[Method], seeds: int, budget: int, say: Any
) -> list[MethodResult]:
    """Every method's replays on ``table`` (identical methods run once)."""
    target = Target.of(table)
    done: list[tuple[Method, MethodResult]] = []
    with tempfile.TemporaryDirectory(prefix="tuner-replay-") as scratch:
        for method in methods:
            twin = next((result for other, result in done if same_replay(other, method)), None)
            if twin is not None:
                say(f"  {method.name}: same sampler and options as {twin.name}, reported from its replays")
                done.append((method, MethodResult(method.name, twin.replays, twin.budget)))
                continue
            count = 1 if method.deterministic else (method.seeds if method.seeds is not None else seeds)
            started = time.perf_counter()
            replays: list[Replay] = [
                replay_once(target, method, seed, budget, Path(scratch) / f"{len(done)}-{seed}")
                for seed in range(count)
            ]
            done.append(
                (
                    method,
                    MethodResult(method.name, replays, len(replays[0].fractions) if method.whole_space else budget),
                )
            )
            say(f"  {method.name}: {count} seed(s) in {time.perf_counter() - started:.1f} s")
            for replay in replays:  # every run the ReplayRunner served is a measured trial of the study
                if replay.runs != len(replay.fractions):
                    say(
                        f"  WARNING {method.name} seed {replay.seed}: the runner served {replay.runs} runs but the "
                        f"study counts {len(replay.fractions)} measured trials"
                    )
    return [result for _, result in done]


def describe(table: MeasuredTable, target: Target) -> str:
    """One line: coverage, the cap and its OOM share, the front."""
    measured = len(table.rows)
    coverage = "complete" if table.complete else f"PARTIAL: {measured} of {table.space_size} settings measured"
    cap = (
        "no memory cap declared"
        if table.memory_cap_gb is None
        else f"declared cap {table.memory_cap_gb:g} GB ({100 * over_cap_fraction(table):.0f} % of OK settings over it)"
    )
    return (
        f"{table.hardware.label}: {table.space_size} settings, {coverage}; {cap}; exhaustive "
        f"front {target.front_size} settings, normalised hypervolume {target.front_hypervolume:.4f}"
    )


def unusable(table: MeasuredTable) -> str | None:
    """Why no study can be replayed on ``table`` (its reference would fail), or None."""
    reference = table.spec.reference
    if reference is None:
        return None
    result = table.result(reference)
    if result.outcome is not Outcome.OK:
        return (
            f"the reference setting replays as {result.outcome.value} ({result.reason}): every study would stop "
            f"at its first trial; raise memory_cap_gb in hardware_types.yaml or wait for the table"
        )
    return None


def bench_table(
    label: str,
    declared: Mapping[str, HardwareType],
    methods: Sequence[Method],
    seeds: int,
    budget: int,
    results_dir: Path,
) -> tuple[list[tuple[str, float]], list[str]] | None:
    """Replay every method on one declared table, print its table and write its results; the default
    against the sweep (line, trials ratio) and the default against default-v1 (device-seconds line), when
    those methods ran. None when the table was skipped (said why)."""
    hardware = declared.get(label)
    if hardware is None or not hardware.table_path.exists():
        print(f"{label}: skipped: {'not declared' if hardware is None else 'no table yet'}", flush=True)
        return None
    table = load_table(hardware)
    target = Target.of(table)
    print(describe(table, target), flush=True)
    print(f"cost model: {overhead_note(table)}", flush=True)
    problem = unusable(table)
    if problem is not None:
        print(f"{label}: skipped: {problem}", flush=True)
        return None
    results = replay_table(table, methods, seeds, budget, lambda line: print(line, flush=True))
    for line in table_lines(results):
        print(line, flush=True)
    model = ReplayCostModel.of(table)
    about: dict[str, object] = {
        "table": hardware.label,
        "table_path": str(hardware.table_path),
        "memory_cap_gb": hardware.memory_cap_gb,
        "settings": table.space_size,
        "measured_settings": len(table.rows),
        "complete": table.complete,
        "front_size": target.front_size,
        "front_hypervolume": target.front_hypervolume,
        "cost_model": {
            "startup_s": model.startup_s,
            "evaluation_s": model.evaluation_s,
            "warmup_calls": model.warmup_calls,
            "repeats": model.repeats,
            "measured_overhead": model.measured_overhead,
            "note": overhead_note(table),
        },
    }
    coverage = "complete" if table.complete else f"partial: {len(table.rows)} of {table.space_size} settings"
    cap = "no memory cap" if hardware.memory_cap_gb is None else f"declared cap {hardware.memory_cap_gb:g} GB"
    title = (
        f"{hardware.label} ({coverage}), {cap}, front "
        f"{target.front_size} settings\nREPLAYED studies (simulated runs): median of {seeds} seeds, "
        f"{budget} trials; sweep: the whole space"
    )
    png, raw = write_outputs(results_dir, f"search_efficiency_{hardware.table}_{hardware.name}", title, results, about)
    print(f"wrote {_shown(png)} and {_shown(raw)}", flush=True)
    by_name = {r.name: r for r in results}
    verdicts: list[tuple[str, float]] = []
    costs: list[str] = []
    if "default" in by_name and "sweep" in by_name:
        verdicts.append(comparison(label, by_name["default"], by_name["sweep"]))
        print(sweep_cost_line(label, by_name["default"], by_name["sweep"]), flush=True)
    if "default" in by_name and DEFAULT_V1.name in by_name:
        costs.append(cost_comparison(label, by_name["default"], by_name[DEFAULT_V1.name])[0])
    return verdicts, costs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"avatar_dit:cpu1t only, {QUICK['seeds']} seeds x {QUICK['budget']} trials, no gp (< 5 min idle)",
    )
    parser.add_argument(
        "--report",
        nargs="+",
        type=Path,
        metavar="RESULTS_JSON",
        help="replay nothing: print the markdown table of these committed results (one table)",
    )
    parser.add_argument("--tables", help="table:hardware,... (default: every declared table that exists)")
    parser.add_argument(
        "--methods",
        help=f"comma-separated, default: {','.join(STANDARD)} (quick: no gp) and the variants; "
        "also default-no-memory-model, default+warm:<table>:<hardware>",
    )
    parser.add_argument("--variants", action="append", default=[], help="sampler:key=value,... (repeatable)")
    parser.add_argument("--seeds", type=int, help=f"seeds per method (default {FULL['seeds']}; quick {QUICK['seeds']})")
    parser.add_argument(
        "--gp-seeds",
        type=int,
        help=f"seeds for gp (default {FULL['gp_seeds']}; quick {QUICK['gp_seeds']}, "
        "where gp runs only when --methods names it)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        help=f"trials per study (default {FULL['budget']}; quick {QUICK['budget']}); sweep: whole space",
    )
    parser.add_argument(
        "--table-dir",
        type=Path,
        default=ROOT / "bench" / "tables",
        help="directory holding hardware_types.yaml and the tables",
    )
    parser.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    if args.report:
        print("\n".join(report_lines(args.report, args.methods.split(",") if args.methods else None)))
        return 0
    started = time.perf_counter()
    mode = QUICK if args.quick else FULL
    seeds = args.seeds or int(mode["seeds"])  # type: ignore[call-overload]
    gp_seeds = args.gp_seeds or int(mode["gp_seeds"])  # type: ignore[call-overload]
    budget = args.budget or int(mode["budget"])  # type: ignore[call-overload]
    try:
        declared = load_hardware_types(args.table_dir / "hardware_types.yaml")
    except TableError as error:
        parser.error(str(error))
    catalogue = {**standard_methods(gp_seeds), **extra_methods(declared, budget)}
    variants = [parse_variant(v) for text in args.variants for v in text.split(";") if v.strip()]
    names = args.methods.split(",") if args.methods else [*str(mode["methods"]).split(","), *(v.name for v in variants)]
    catalogue.update({v.name: v for v in variants})
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; known: {sorted(catalogue)}")
    methods = [catalogue[n] for n in names]
    wanted = args.tables or mode["tables"] or ""
    labels = [t for t in str(wanted).split(",") if t] or [k for k, hw in declared.items() if hw.table_path.exists()]
    print(
        f"search efficiency (REPLAYED studies: simulated runs from measured tables); {seeds} seeds, "
        f"{budget} trials per study; sweep: the whole space, once",
        flush=True,
    )
    if "gp" in names:
        print(f"{GP_NOTE}: {gp_seeds}", flush=True)
    verdicts: list[tuple[str, float]] = []
    costs: list[str] = []
    for label in labels:
        outcome = bench_table(label, declared, methods, seeds, budget, args.results_dir)
        if outcome is not None:
            verdicts.extend(outcome[0])
            costs.extend(outcome[1])
    print(f"elapsed {time.perf_counter() - started:.1f} s{' (quick mode)' if args.quick else ''}", flush=True)
    for line, _ in verdicts:
        print(line, flush=True)
    if len(verdicts) > 1:
        worst_line, _ = max(verdicts, key=lambda v: v[1] if not math.isnan(v[1]) else -1.0)
        print(f"worst case: {worst_line}", flush=True)
    for line in costs:  # last: the new default's device-seconds to 95 % against the old default's
        print(line, flush=True)
    return 0


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
