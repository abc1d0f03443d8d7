"""Which setting to export when the spec does not say: the fastest, the knee, or the best quality?

On each exhaustive measured table (``bench/tables``, read by :mod:`tuner.replay.table`: the
feasible settings are exactly those a replayed study can reach) the spec's two objectives give
the table's Pareto front (:func:`tuner.pareto.dominates` over :class:`tuner.pareto.Point`,
checked against :func:`tuner.replay.table.exhaustive_front`). Each rule picks one setting:

* ``fastest`` — best on the first objective (``latency_p50_s``): the old default;
* ``knee`` — :func:`tuner.pareto.knee_point` of the front: the new default;
* ``best quality`` — best on the second (quality) objective on the front;
* ``latency s.t. stlpips_alex <= T`` (avatar only) — the fastest feasible setting within T;
* for context, not a rule: the fastest front setting whose quality is no worse than the baseline's.

For each pick, and for the spec's ``baseline`` (what a team runs before tuning) and ``reference``
(the expensive setting quality is measured against): its latency, its speed-up over the baseline
(baseline latency / its latency), its quality objective and its quality loss (distance from the
best quality on the front, in the objective's units: for ``stlpips_alex`` the value itself, for
``text_gt_exact_match`` 1 minus it on these fronts). Then the knee against the fastest pick: the
share of the fastest pick's speed-up it keeps (ratio of speed-ups), the share of the fastest
pick's latency cut from the baseline it keeps, and the share of the fastest pick's quality loss
it avoids.

Nothing is measured: the script reads the committed tables. ``--report`` re-prints the markdown
from ``bench/results/default_choice.json`` without reading the tables. Every figure is rounded
once, when the JSON is written (latency and quality to 4 significant digits, speed-ups to 2
decimals, shares to 0.1 %), and printed as stored.

Usage: ``python bench/default_choice.py [--report]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "default_choice.json"
TABLES = ("avatar_dit:cpu1t", "avqa:cpu1t", "avqa:cpu1t-nodnn")
THRESHOLDS = {"avatar_dit": ("stlpips_alex", (0.01, 0.015, 0.02, 0.05))}  # 0.015: the demo spec's bound


def sig(value: float, digits: int = 4) -> float:
    return float(f"{value:.{digits}g}")


def turned(value: float, direction: str) -> float:
    return -value if direction == "maximize" else value


def front_of(points: Sequence[Any], directions: Sequence[str]) -> list[Any]:
    """The non-dominated points (rank 0 of :func:`tuner.pareto.pareto_ranks`), in O(n * front).

    Visited in lexicographic order of the minimised values, a point's dominators all come before
    it, and one on the front dominates it whenever any does, so only the front so far is checked.
    """
    from tuner.pareto import dominates, minimised

    front: list[Any] = []
    for point in sorted(points, key=lambda p: (minimised(p.values, directions), p.number)):
        if not any(dominates(q.values, point.values, directions) for q in front):
            front.append(point)
    return sorted(front, key=lambda p: p.number)


def measure() -> dict[str, Any]:
    from tuner.pareto import Point, knee_point
    from tuner.replay.table import exhaustive_front, feasible_values, load_hardware_types, load_table
    from tuner.spec.candidate import canonical_key

    types = load_hardware_types()
    tables = []
    for label in TABLES:
        hardware = types[label]
        table = load_table(hardware)
        spec = table.spec
        metrics = [o.metric for o in spec.objectives]
        directions = [o.direction for o in spec.objectives]
        speed, quality = metrics[0], metrics[1]
        feasible = feasible_values(table)
        keys = [key for key in table.rows if key in feasible]  # table (measurement) order
        points = [Point(number, feasible[key]) for number, key in enumerate(keys)]
        front = front_of(points, directions)
        front_keys = {keys[p.number] for p in front}
        if front_keys != set(exhaustive_front(table)):
            raise SystemExit(f"{label}: the front here differs from tuner.replay.table.exhaustive_front")

        q_best = min(turned(p.values[1], directions[1]) for p in front)

        def key_of(params: Mapping[str, Any]) -> str:
            return canonical_key({name: params[name] for name in table.parameter_names})

        base_row = table.lookup(spec.baseline)
        base_latency = base_row.values[speed]

        def entry(rule: str, params: Mapping[str, Any]) -> dict[str, Any]:
            row = table.lookup(params)
            key = key_of(row.params)
            latency, q = row.values[speed], row.values[quality]
            item = {
                "rule": rule,
                "params": {n: row.params[n] for n in table.parameter_names if n not in hardware.fixed},
                speed: sig(latency),
                "speedup": round(base_latency / latency, 2),
                quality: sig(q),
                "quality_loss": sig(turned(q, directions[1]) - q_best),
                "feasible": key in feasible,
                "on_front": key in front_keys,
            }
            if quality == "text_gt_exact_match":
                item["correct"] = round(q * spec.inputs["num_questions"])
                item["questions"] = spec.inputs["num_questions"]
            return item

        def params_of(point: Any) -> Mapping[str, Any]:
            return table.rows[keys[point.number]].params

        fastest = min(
            front,
            key=lambda p: (
                p.values[0] if directions[0] == "minimize" else -p.values[0],
                turned(p.values[1], directions[1]),
                p.number,
            ),
        )
        knee = knee_point(front, directions)
        best = min(
            front, key=lambda p: (turned(p.values[1], directions[1]), turned(p.values[0], directions[0]), p.number)
        )
        rows = [
            entry("baseline", spec.baseline),
            entry("reference", spec.reference),
            entry("fastest (old default)", params_of(fastest)),
            entry("knee (new default)", params_of(knee)),
            entry("best quality on the front", params_of(best)),
        ]
        threshold = THRESHOLDS.get(hardware.table)
        if threshold is not None:
            metric, limits = threshold
            index = metrics.index(metric)
            for limit in limits:
                within = [p for p in points if p.values[index] <= limit]
                pick = min(within, key=lambda p: (p.values[0], p.number))
                rows.append(entry(f"min {speed} s.t. {metric} <= {limit:g}", params_of(pick)))

        base_q = turned(base_row.values[quality], directions[1])
        as_good = [p for p in front if turned(p.values[1], directions[1]) <= base_q]
        if as_good:  # context, not a rule: the fastest front setting that loses nothing against the baseline
            pick = min(as_good, key=lambda p: (turned(p.values[0], directions[0]), p.number))
            rows.append(entry(f"min {speed} s.t. {quality} no worse than baseline", params_of(pick)))

        f_row, k_row = rows[2], rows[3]
        f_raw = table.rows[keys[fastest.number]].values
        k_raw = table.rows[keys[knee.number]].values
        f_loss = turned(f_raw[quality], directions[1]) - q_best
        k_loss = turned(k_raw[quality], directions[1]) - q_best
        knee_vs_fastest = {
            "speedup_kept_pct": round(100 * (base_latency / k_raw[speed]) / (base_latency / f_raw[speed]), 1),
            "latency_cut_kept_pct": round(100 * (base_latency - k_raw[speed]) / (base_latency - f_raw[speed]), 1),
            "quality_loss_avoided_pct": round(100 * (1 - k_loss / f_loss), 1) if f_loss > 0 else None,
            "knee_dominates_baseline": (
                k_raw[speed] <= base_latency
                and turned(k_raw[quality], directions[1]) <= turned(base_row.values[quality], directions[1])
                and (k_raw[speed], k_raw[quality]) != (base_latency, base_row.values[quality])
            ),
        }
        assert f_row["rule"].startswith("fastest") and k_row["rule"].startswith("knee")
        tables.append(
            {
                "table": label,
                "csv": str(hardware.table_path.relative_to(ROOT)),
                "spec": str(hardware.spec_path.relative_to(ROOT))
                if hardware.spec_path.is_absolute()
                else str(hardware.spec_path),
                "fixed": dict(hardware.fixed),
                "memory_cap_gb": hardware.memory_cap_gb,
                "objectives": [{"metric": m, "direction": d} for m, d in zip(metrics, directions)],
                "settings": len(table.rows),
                "feasible": len(feasible),
                "front_size": len(front),
                "front": sorted(([sig(v) for v in p.values] for p in front), key=lambda v: v[0]),
                "best_quality_on_front": sig(q_best if directions[1] == "minimize" else -q_best),
                "rows": rows,
                "knee_vs_fastest": knee_vs_fastest,
            }
        )
    return {
        "command": "python bench/default_choice.py",
        "report_command": "python bench/default_choice.py --report",
        "generated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "definitions": {
            "front": "non-dominated feasible settings of the table on the spec's two objectives "
            "(feasible as in tuner.replay.table.feasible_values)",
            "speedup": "baseline latency_p50_s / the setting's latency_p50_s",
            "quality_loss": "distance from the best quality objective value on the front, in its units",
            "speedup_kept_pct": "knee speed-up / fastest speed-up (both over the baseline)",
            "latency_cut_kept_pct": "(baseline - knee latency) / (baseline - fastest latency)",
            "quality_loss_avoided_pct": "1 - knee quality loss / fastest quality loss",
            "rounding": "latency and quality 4 significant digits, speed-ups 2 decimals, shares 0.1 %",
        },
        "tables": tables,
    }


def setting_text(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in params.items())


def quality_text(row: Mapping[str, Any], metric: str) -> str:
    if "correct" in row:
        return f"{row[metric]} ({row['correct']}/{row['questions']})"
    return str(row[metric])


def markdown(result: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for table in result["tables"]:
        speed, quality = (o["metric"] for o in table["objectives"])
        direction = table["objectives"][1]["direction"]
        fixed = ", ".join(f"{k}={v}" for k, v in table["fixed"].items()) or "none"
        lines += [
            f"**{table['table']}** (`{table['csv']}`; {table['settings']} settings, {table['feasible']} "
            f"feasible, {table['front_size']} on the front; {quality} {direction}d; fixed: {fixed})",
            "",
            f"| rule | {speed} | speed-up vs baseline | {quality} | quality loss | on front | setting |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in table["rows"]:
            name = f"**{row['rule']}**" if row["rule"].startswith("knee") else row["rule"]
            front = "yes" if row["on_front"] else ("no" if row["feasible"] else "infeasible")
            lines.append(
                f"| {name} | {row[speed]} s | {row['speedup']}x | {quality_text(row, quality)} | "
                f"{row['quality_loss']} | {front} | {setting_text(row['params'])} |"
            )
        kvf = table["knee_vs_fastest"]
        lines += [
            "",
            f"Knee against fastest: keeps {kvf['speedup_kept_pct']} % of its speed-up "
            f"({kvf['latency_cut_kept_pct']} % of its latency cut from the baseline), avoids "
            f"{kvf['quality_loss_avoided_pct']} % of its quality loss; knee dominates the baseline: "
            f"{'yes' if kvf['knee_dominates_baseline'] else 'no'}.",
            "",
        ]
    lines.append(
        f"Regenerate: `{result['command']}` (re-print: `{result['report_command']}`); generated {result['generated']}."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--report",
        action="store_true",
        help=f"re-print the markdown from {RESULTS.relative_to(ROOT)} without reading the tables",
    )
    args = parser.parse_args(argv)
    if args.report:
        result = json.loads(RESULTS.read_text())
    else:
        result = measure()
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
