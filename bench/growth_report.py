"""The ``--report`` of ``bench/growth.py``: docs/benchmarks.md's growth table ("The tuner's own cost as studies
and fleets grow") re-printed from committed raw results, nothing measured."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

GOAL_RATIO = 1.5  # overhead at the largest size / overhead at 50
RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPORTED = (RESULTS_DIR / "growth.json", RESULTS_DIR / "growth_full.json")
STORAGE_NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _run_name(result: dict[str, Any]) -> str:
    return "quick run" if "--quick" in result["command"].split() else "full run"


def report(paths: Sequence[Path] = REPORTED) -> str:
    """docs/benchmarks.md's growth table ("The tuner's own cost as studies and fleets grow") from raw results:
    per storage of each file, the median overhead (CPU ms per trial outside the sampler, tuner − bare) at each
    size, the largest size's ÷ 50's (and the same of the whole CPU times' differences), SQL statements per
    trial (median of the rows); then one line per file: its command, date, load, repeats and proposals."""
    results = [(path, json.loads(path.read_text())) for path in paths]
    sizes = sorted(
        {
            int(size)
            for _, result in results
            for medians in result["median_overhead_cpu_s_per_trial"].values()
            for size in medians
        }
    )
    lines = [
        "| storage | "
        + " | ".join(f"{size:,} trials" if i == 0 else f"{size:,}" for i, size in enumerate(sizes))
        + " | largest ÷ "
        + f"{sizes[0]:,}"
        + " | SQL statements / trial |",
        "|---" * (len(sizes) + 3) + "|",
    ]
    for _, result in results:
        for storage, medians in result["median_overhead_cpu_s_per_trial"].items():
            by_size = {int(size): value for size, value in medians.items()}
            cells = [f"{by_size[size] * 1e3:.1f} ms" if size in by_size else "—" for size in sizes]
            largest, smallest = max(by_size), min(by_size)
            prefix = "" if largest == sizes[-1] and smallest == sizes[0] else f"{largest:,} ÷ {smallest:,}: "
            statements = statistics.median(
                row["sql_statements_per_trial"] for row in result["rows"] if row["storage"] == storage
            )
            lines.append(
                f"| {STORAGE_NAMES.get(storage, storage)} ({_run_name(result)}) | "
                + " | ".join(cells)
                + f" | {prefix}**{result['ratios'][storage]:.2f}** (whole CPU: "
                f"{result['ratios_of_totals'][storage]:.2f}) | {statements:.0f} |"
            )
    lines += [
        "",
        f"Goal: largest ÷ {sizes[0]:,} ≤ {GOAL_RATIO:g}. Cells: the median over the repeats of the tuner's CPU "
        "per trial outside the sampler − bare Optuna's; whole CPU: the same ratio of the differences of whole "
        "CPU times.",
    ]
    for path, result in results:
        same = min(row["bare_same_proposals"] for row in result["rows"])
        lines += [
            "",
            f"{_run_name(result).capitalize()}: `{result['command']}` ({path.name}), measured "
            f"{result['measured_at']}, {result['cores']} cores, load average (1 / 5 / 15 min) "
            + " / ".join(f"{x:.1f}" for x in result["load_average_before"])
            + " before, "
            + " / ".join(f"{x:.1f}" for x in result["load_average_after"])
            + f" after; median of "
            f"{result['repeats']} repeats of {result['trials_timed']} trials; the bare replay made "
            f"{same:.0%} the same proposals as the tuner (the lowest of its rows).",
        ]
    return "\n".join(lines)
