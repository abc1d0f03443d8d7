"""How much of a measured table's latency is the host's drift over the build, not the setting (issue 38).

A table's settings are measured in a seeded random order (``build_tables.py``), so two rows next to each other
in its CSV are unrelated settings measured seconds apart. What a model of the settings cannot explain of a row
(its leave-one-out residual under the study's latency model, :class:`tuner.search.prediction.LogRidge`, fitted on
every OK row) should then be unrelated from one row to the next; a correlation along the build order is the
host's speed drifting over minutes, which any study replayed on the table meets as noise of the setting. Per
table and latency column: the rows, the median |residual| (as |measured / predicted - 1|), the residuals'
correlation with the row 1, 5 and 25 rows later, and the range of their 25-row rolling mean (how much slower or
faster than typical a stretch of the build ran). A table built against a drift anchor
(``anchored_build.py``) is shown corrected (``latency_p50_s``) and raw (its ``.raw.csv``).

Usage: ``python bench/tables/table_drift.py --tables omni_tiny:cpu1t,omni_tiny:cpu1t-anchored``;
raw figures in ``bench/results/table_drift.json``; ``--report`` prints them again.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/raw_results.py

from raw_results import main, provenance  # noqa: E402

TABLE_DIR = Path(__file__).resolve().parent
LAGS = (1, 5, 25)
WINDOW = 25


def _columns(label: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per latency column of the table (and of its raw rows before a drift anchor's correction): the cost-model feature rows and log latencies of its OK rows, in the
    CSV's (build) order."""
    from tuner.replay.table import load_hardware_types, load_table
    from tuner.search.prediction import cost_columns, setting_features
    from tuner.spec.space import distributions

    hardware = load_hardware_types(TABLE_DIR / "hardware_types.yaml")[label]
    table = load_table(hardware)
    space = distributions(table.spec)
    with hardware.table_path.open(newline="") as handle:
        cells = [row for row in csv.DictReader(handle) if row["outcome"] == "OK" and row["latency_p50_s"]]
    names = list(space)
    by_key = {tuple(str(row.params[n]) for n in names): row for row in table.rows.values()}
    features = np.asarray(
        [setting_features(by_key[tuple(cell[n] for n in names)].params, space, prior=False) for cell in cells]
    )[:, cost_columns(space)]
    out = {"latency_p50_s": (features, np.log([float(cell["latency_p50_s"]) for cell in cells]))}
    raw = hardware.table_path.with_name(hardware.table_path.name.replace(".csv", ".raw.csv"))
    if raw.exists():  # anchored_build.py's rows before the anchor's correction, in the same order
        with raw.open(newline="") as handle:
            before = [row for row in csv.DictReader(handle) if row["outcome"] == "OK" and row["latency_p50_s"]]
        assert [tuple(r[n] for n in names) for r in before] == [tuple(c[n] for n in names) for c in cells]
        out["raw (before the anchor)"] = (features, np.log([float(row["latency_p50_s"]) for row in before]))
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tuner.search.prediction import LogRidge

    rows = []
    for label in args.tables.split(","):
        for column, (features, logs) in _columns(label).items():
            residuals = np.asarray(LogRidge(features, logs).loo)
            rolling = np.convolve(residuals, np.ones(WINDOW) / WINDOW, mode="valid")
            rows.append(
                {
                    "table": label,
                    "column": column,
                    "rows": len(logs),
                    "median_abs_residual": float(np.median(np.abs(np.exp(residuals) - 1.0))),
                    **{f"lag_{lag}": float(np.corrcoef(residuals[:-lag], residuals[lag:])[0, 1]) for lag in LAGS},
                    "rolling_low": float(np.exp(rolling.min()) - 1.0),
                    "rolling_high": float(np.exp(rolling.max()) - 1.0),
                }
            )
    return {"rows": rows}


def report_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        provenance(result),
        "",
        "| table | latency column | OK rows | median abs. residual | correlation with the row 1 / 5 / 25 later "
        f"| {WINDOW}-row stretches, slowest and fastest |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        lags = " / ".join(f"{row[f'lag_{lag}']:+.2f}" for lag in LAGS)
        lines.append(
            f"| {row['table']} | {row['column']} | {row['rows']} | {row['median_abs_residual']:.1%} | {lags} | "
            f"{row['rolling_high']:+.1%}, {row['rolling_low']:+.1%} |"
        )
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--tables", default="wan_tiny:cpu1t,wan_tiny:cpu1t-anchored,omni_tiny:cpu1t,omni_tiny:cpu1t-anchored"
    )
    main(parser, "tables/table_drift.py", measure, report_lines)
