"""What the committed exhaustive tables hold: docs/benchmarks.md's "bench/tables" figures, from the tables.

Usage: ``python bench/tables/inventory.py``. Reads every table ``hardware_types.yaml`` declares (the
CSV and its JSON sidecar) and measures nothing. Printed:

* one row per table: the space (each parameter's measured values), the hardware type (torch threads,
  oneDNN), settings measured / the space's size, how each latency was timed (the median of the sidecar's
  ``timed_calls``; for the first builds one call, and two more below ``remeasure_below_s``), the date of its
  first run and the time its runs took;
* per table: the OK settings' latency (min, median, max, seconds) and peak RSS (min, max, GB) — with
  whether the peaks are per setting (sidecar ``peak_rss_per_setting``) — and, where a memory cap is
  declared, the share of settings above it (an OOM in a replay);
* oneDNN off against on (two tables of the same space, one torch thread each): the median ratio of
  each setting's latency, per precision, and within each table bf16 against fp32;
* host noise: pairs of settings that differ only in a knob of equal cost (``online_decode`` on the
  avatar table), the median relative latency difference of the pairs measured among the table's first
  rows (the CSV is in measured order; the quiet start of the run) and of the others.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
QUIET_ROWS = 150  # the avatar run's first rows, measured before other work loaded the machine
EQUAL_COST_KNOB = ("avatar_dit:cpu1t", "online_decode")
ONEDNN_PAIR = ("avqa:cpu1t", "avqa:cpu1t-nodnn")


def _tables() -> dict[str, dict[str, Any]]:
    """``"space:hardware"`` -> its rows (measured order), parameter names, sidecar and declared cap."""
    declared = yaml.safe_load((HERE / "hardware_types.yaml").read_text())
    tables: dict[str, dict[str, Any]] = {}
    for space, entry in declared.items():
        for hardware, table in entry["hardware"].items():
            path = HERE / table["table"]
            with path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                fields = list(reader.fieldnames or [])
                rows = list(reader)
            tables[f"{space}:{hardware}"] = {
                "file": path.name,
                "rows": rows,
                "parameters": fields[: fields.index("outcome")],
                "sidecar": json.loads(path.with_suffix(".json").read_text()),
                "cap_gb": table.get("memory_cap_gb"),
            }
    return tables


def _values(rows: list[dict[str, str]], name: str) -> str:
    seen = sorted({row[name] for row in rows}, key=lambda v: (float(v) if v.replace(".", "", 1).isdigit() else 0, v))
    return f"{name} {'/'.join(seen)}" if len(seen) > 1 else f"{name}={seen[0]}"


def _ok(rows: list[dict[str, str]], column: str) -> list[float]:
    return [float(row[column]) for row in rows if row["outcome"] == "OK" and row[column]]


def _key(row: dict[str, str], parameters: list[str], leave_out: str = "") -> tuple[str, ...]:
    return tuple(row[name] for name in parameters if name != leave_out)


def _bf16_over_fp32(table: dict[str, Any]) -> float:
    """Median over settings of latency(bf16) / latency(fp32), the other parameters equal."""
    fp32 = {
        _key(row, table["parameters"], "precision"): float(row["latency_p50_s"])
        for row in table["rows"]
        if row["outcome"] == "OK" and row["precision"] == "fp32"
    }
    return statistics.median(
        float(row["latency_p50_s"]) / fp32[key]
        for row in table["rows"]
        if row["outcome"] == "OK"
        and row["precision"] == "bf16"
        and (key := _key(row, table["parameters"], "precision")) in fp32
    )


def inventory_lines(tables: dict[str, dict[str, Any]]) -> list[str]:
    """The markdown table of what each exhaustive table holds."""
    lines = [
        "| table | space | hardware type | settings | latency timed | first measured | time |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for table in tables.values():
        side, rows = table["sidecar"], table["rows"]
        inputs = side.get("inputs_override") or {}
        space = " x ".join(_values(rows, name) for name in table["parameters"])
        hardware = f"{side['torch_threads']} torch thread{'s' if side['torch_threads'] > 1 else ''}" + (
            "" if side.get("onednn", True) else ", oneDNN off"
        )
        runs = side["runs"]
        lines.append(
            f"| `{table['file']}` | `{side['spec']}`{' inputs ' + str(inputs) if inputs else ''}: {space} | "
            f"{hardware} | {len(rows)} of {side['settings']} | {_timed(side)} | {runs[0]['started'][:10]} | "
            f"{sum(run['seconds'] for run in runs) / 60:.0f} min |"
        )
    return lines


def _timed(sidecar: dict[str, Any]) -> str:
    """How the table's latencies were timed (build_tables.py's protocols)."""
    calls = sidecar.get("timed_calls")
    if calls:
        return f"median of {calls} calls"
    return f"1 call; 2 more below {sidecar['remeasure_below_s']:g} s"


def figure_lines(tables: dict[str, dict[str, Any]]) -> list[str]:
    """Latency and memory per table, oneDNN off against on, and the host-noise pairs."""
    lines = []
    for name, table in tables.items():
        rows, side = table["rows"], table["sidecar"]
        latency, peaks = _ok(rows, "latency_p50_s"), _ok(rows, "peak_rss_gb")
        line = (
            f"- `{name}`: latency {min(latency):.3f}-{max(latency):.1f} s (median {statistics.median(latency):.2f} s) "
            f"over {len(latency)} OK settings; peak RSS {min(peaks):.3f}-{max(peaks):.3f} GB "
            f"({'per setting' if side.get('peak_rss_per_setting') else 'the process history, not per setting'})"
        )
        if table["cap_gb"] is not None:
            above = sum(1 for value in peaks if value > table["cap_gb"])
            line += f"; declared cap {table['cap_gb']:.3f} GB: {100 * above / len(rows):.0f} % of the settings above it"
        lines.append(line)
    on, off = (tables[name] for name in ONEDNN_PAIR)
    by_setting = {_key(row, on["parameters"]): row for row in on["rows"] if row["outcome"] == "OK"}
    ratios: dict[str, list[float]] = {}
    for row in off["rows"]:
        twin = by_setting.get(_key(row, off["parameters"]))
        if row["outcome"] == "OK" and twin is not None:
            ratios.setdefault(row["precision"], []).append(float(row["latency_p50_s"]) / float(twin["latency_p50_s"]))
    lines.append(
        f"- oneDNN off / on (`{ONEDNN_PAIR[1]}` / `{ONEDNN_PAIR[0]}`, each setting's latency, median): "
        + ", ".join(
            f"{precision} {statistics.median(values):.2f}x ({len(values)} settings)"
            for precision, values in sorted(ratios.items())
        )
    )
    lines.append(
        "- bf16 / fp32 (each setting's latency against the same setting in fp32, median; within one table, so "
        "one run's load): " + ", ".join(f"`{name}` {_bf16_over_fp32(tables[name]):.2f}x" for name in ONEDNN_PAIR)
    )
    name, knob = EQUAL_COST_KNOB
    table = tables[name]
    pairs: dict[tuple[str, ...], list[tuple[int, float]]] = {}
    for index, row in enumerate(table["rows"]):
        if row["outcome"] == "OK":
            pairs.setdefault(_key(row, table["parameters"], knob), []).append((index, float(row["latency_p50_s"])))
    quiet: list[float] = []
    loaded: list[float] = []
    for measured in pairs.values():
        if len(measured) == 2:
            (first, a), (second, b) = measured
            (quiet if max(first, second) < QUIET_ROWS else loaded).append(abs(a - b) / ((a + b) / 2))
    load = table["sidecar"]["runs"][0]
    lines.append(
        f"- host noise (`{name}`, settings that differ only in `{knob}`, equal cost): median difference "
        f"{100 * statistics.median(quiet):.1f} % over the {len(quiet)} pairs measured among the first "
        f"{QUIET_ROWS} rows, {100 * statistics.median(loaded):.0f} % over the {len(loaded)} others (load "
        f"average {load['load_average_before'][0]:.2f} at the run's start, {load['load_average_after'][0]:.2f} "
        f"at its end)"
    )
    return lines


def main() -> int:
    tables = _tables()
    print(
        "\n".join(
            [
                "`python bench/tables/inventory.py` (reads the committed tables)",
                "",
                *inventory_lines(tables),
                "",
                *figure_lines(tables),
            ]
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
