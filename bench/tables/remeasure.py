"""How far a table's latency is from itself: a seeded sample of its rows measured again, as they were measured.

A predictor fitted on a table's rows cannot beat the noise of the row it predicts. This re-measures ``--rows``
settings of a 1-thread table (a seeded sample of its OK rows) in one process with the code that built it
(:func:`build_tables._measure_row`: the worker's own measurement, the median of the sidecar's ``timed_calls``; a
first build's one timed call, two more when it was fast),
and prints how far each new ``latency_p50_s`` lies from the table's: the median and p90 of
``|new / table - 1|`` -- two measurements of the same setting, so about 1.4x one measurement's own error when
both are alike. Issue 38 asks for a median latency prediction error <= 10 %.

``--front`` measures instead every setting on the table's exhaustive front (:func:`tuner.replay.table.exhaustive_front`:
the settings every replay is scored against), ``--rounds`` times each: whether the front is the settings' or
a timing's luck. ``--csv PATH`` reads another build of the table (an earlier one: ``git show REV:bench/tables/...``);
``--timed-calls N`` measures as that build did (0: the first builds' one call, two more when it was fast).

Usage: ``python bench/tables/remeasure.py wan_tiny --rows 40 --results bench/results/remeasure_wan_tiny.json``
(raw figures there; ``--report`` prints them again and measures nothing).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/raw_results.py

import build_tables  # noqa: E402
import raw_results  # noqa: E402
from raw_results import provenance  # noqa: E402


def _rows(table: str, path: Path | None = None) -> tuple[list[str], list[dict[str, str]]]:
    """The 1-thread table's parameter names and its OK rows (``path``: another build's CSV)."""
    path = path or build_tables.table_path(table, 1)
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    names, _ = build_tables.settings_of(build_tables.TABLES[table])
    return names, [row for row in rows if row["outcome"] == "OK" and row["latency_p50_s"]]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Re-measure ``args.rows`` seeded rows of ``args.table`` (see the module docstring)."""
    os.environ["TUNER_TORCH_THREADS"] = "1"
    from tuner.spec.loading import load_spec

    definition = build_tables.TABLES[args.table]
    spec = load_spec(definition.spec_path)
    if definition.inputs:
        spec = spec.model_copy(update={"inputs": {**spec.inputs, **definition.inputs}})
    names, rows = _rows(args.table, args.csv)
    sidecar = json.loads(build_tables.table_path(args.table, 1).with_suffix(".json").read_text())
    timed_calls = sidecar.get("timed_calls") if args.timed_calls is None else (args.timed_calls or None)
    if args.front:
        front = _front_keys(args.table, args.csv)
        chosen = [row for row in rows if "|".join(row[n] for n in names) in front] * args.rounds
    else:
        chosen = random.Random(args.seed).sample(rows, min(args.rows, len(rows)))
    _, grid = build_tables.settings_of(definition)
    typed = {build_tables._key(setting, names): setting for setting in grid}
    scores: dict[str, dict[str, Any]] = {
        build_tables._key(typed[k], names): {} for k in typed
    }  # quality is not re-measured
    keep: dict[str, Any] = {}
    references: dict[str, Path] = {}
    out = []
    started = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for number, row in enumerate(chosen, start=1):
            setting = typed["|".join(row[n] for n in names)]
            reference = build_tables._reference_for(spec, setting, work, [], keep, references)  # as built
            cells = build_tables._measure_row(
                spec, setting, names, number, work, [], reference, keep, scores, definition, timed_calls
            )
            new = dict(zip([*names, "outcome", "reason", "latency_p50_s"], cells, strict=False))
            out.append(
                {
                    "setting": {n: row[n] for n in names},
                    "table_latency_p50_s": float(row["latency_p50_s"]),
                    "outcome": new["outcome"],
                    "latency_p50_s": float(new["latency_p50_s"]) if new["latency_p50_s"] else None,
                }
            )
    return {
        "table": args.table,
        "seed": args.seed,
        "front": bool(args.front),
        "csv": str(args.csv) if args.csv else None,
        "timed_calls": timed_calls,
        "rows": out,
        "elapsed_s": round(time.time() - started, 1),
    }


def _front_keys(table: str, csv_path: Path | None) -> set[str]:
    """The ``|``-joined parameter values of the table's exhaustive front (``csv_path``: another build's)."""
    import dataclasses

    from tuner.replay.table import exhaustive_front, load_hardware_types, load_table

    hardware = load_hardware_types()[f"{table}:cpu1t"]
    if csv_path is not None:
        hardware = dataclasses.replace(hardware, table_path=csv_path.resolve())
    measured = load_table(hardware)
    names, _ = build_tables.settings_of(build_tables.TABLES[table])
    return {"|".join(str(measured.rows[key].params[n]) for n in names) for key in exhaustive_front(measured)}


def report_lines(result: dict[str, Any]) -> list[str]:
    """The lines the bench prints, from its raw figures."""
    pairs = [(r["table_latency_p50_s"], r["latency_p50_s"]) for r in result["rows"] if r["latency_p50_s"]]
    errors = sorted(abs(new / old - 1.0) for old, new in pairs)
    drift = statistics.median(new / old for old, new in pairs)
    p90 = errors[min(len(errors) - 1, int(0.9 * len(errors)))]
    what = "front settings' runs" if result.get("front") else "rows"
    lines = [
        f"{result['table']}: {len(pairs)} {what} measured again ({result['elapsed_s']:.0f} s): |new / table - 1| "
        f"median {statistics.median(errors):.1%}, p90 {p90:.1%}; median new / table {drift:.2f}",
    ]
    if result.get("front"):
        by_setting: dict[str, list[float]] = {}
        table_s: dict[str, float] = {}
        for row in result["rows"]:
            key = ", ".join(f"{k}={v}" for k, v in row["setting"].items())
            by_setting.setdefault(key, []).append(row["latency_p50_s"])
            table_s[key] = row["table_latency_p50_s"]
        lines.append("| front setting | table latency | measured again |")
        lines.append("| --- | --- | --- |")
        for key in sorted(by_setting, key=table_s.__getitem__):
            again = ", ".join(f"{v:.3f}" for v in by_setting[key] if v is not None)
            lines.append(f"| {key} | {table_s[key]:.3f} s | {again} s |")
    return [*lines, f"raw: {provenance(result)}"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=sorted(build_tables.TABLES))
    parser.add_argument("--rows", type=int, default=40, help="rows to measure again (a seeded sample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--front", action="store_true", help="the table's exhaustive front instead of a sample")
    parser.add_argument("--rounds", type=int, default=1, help="with --front: times each front setting is measured")
    parser.add_argument("--csv", type=Path, default=None, help="another build of the table (its CSV)")
    parser.add_argument(
        "--timed-calls",
        type=int,
        default=None,
        help="the latency protocol (default: the sidecar's; 0: the first builds', one call and two more when fast)",
    )
    raw_results.main(parser, "tables/remeasure.py", measure, report_lines)
