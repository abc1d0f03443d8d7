"""Where the figures stand: the latest committed figure of each thing the tuner claims, with its raw result.

``docs/benchmarks.md`` is written in the order things were measured; this prints, from committed raw results
only (it measures nothing and reads no git), the newest figure of each claim a user asks about first:

* the search's cost: device-seconds the default needs to reach 95 % of an exhaustive table's front against the
  previous default (default-v1: TPE alone), per table (``bench/cost_aware.py``'s results);
* how close its predictions come before a run (``bench/prediction_error.py``, the default's own studies);
* the share of a warm worker's device time spent in measured calls (``bench/busy_device.py``);
* the tuner's own cost per trial (``bench/overhead.py``) and its latency against a bare timing of the same
  call (``bench/bare_twin.py``);
* the figures of the GPU check's first run on a real GPU (``bench/gpu_check.sh``).

Each line names the file it was read from; the section of ``docs/benchmarks.md`` that printed it from the same
file gives the command that regenerates it. Usage: ``python bench/figures_now.py``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from busy_device import shares

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SEARCH = {
    "wan_tiny:cpu1t": RESULTS / "proposer_plain",
    "omni_tiny:cpu1t-anchored": RESULTS / "proposer_plain",
    "avatar_dit:cpu1t": RESULTS / "proposer_plain",
    "avqa:cpu1t-nodnn": RESULTS / "proposer_plain",
    "avqa:cpu1t": RESULTS / "interactions",
}
"""Each table's newest replays of the default, by the directory holding them, in the order printed."""
PREDICTION = (RESULTS / "prediction_error_default_proposer_plain.json",)
"""The prediction-error results of the current default's studies (rows of every table in them are printed)."""
BUSY = RESULTS / "busy_device_after_another_14.json"
OVERHEAD = RESULTS / "overhead.json"
TWIN = RESULTS / "bare_twin.json"
GPU = RESULTS / "gpu_h200_2026-12-04" / "gpu_check_phases_a-d_g_h.json"


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _seconds(value: float | None) -> str:
    return "never" if value is None or not math.isfinite(value) else f"{value:.1f}"


def search_lines(tables: Mapping[str, Path]) -> list[str]:
    """One row per table: the default's and default-v1's median device-seconds to 95 % of the front (10 seeds)."""
    lines = [
        "| table | default: device-s to 95 % | default-v1 | default / default-v1 | seeds reaching 95 % "
        "| front at the end | skipped (audited, wrong) | raw |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, directory in tables.items():
        path = directory / f"cost_aware_{label.replace(':', '_')}.json"
        summaries: Mapping[str, Mapping[str, Any]] = _read(path)["summaries"]
        mine, base = summaries["default"], summaries["default-v1"]
        ratio = (
            f"{mine['device_s_to_95'] / base['device_s_to_95']:.2f}x"
            if mine["device_s_to_95"] is not None and base["device_s_to_95"]
            else "n/a (default-v1 never reaches it in half the seeds)"
            if base["device_s_to_95"] is None
            else "n/a"
        )
        skipped = mine.get("skipped_dominated")
        lines.append(
            f"| {label} | {_seconds(mine['device_s_to_95'])} | {_seconds(base['device_s_to_95'])} | {ratio} | "
            f"{mine['reached_95']}/{mine['seeds']} (default-v1 {base['reached_95']}/{base['seeds']}) | "
            f"{mine['hv_final']:.3f} ({base['hv_final']:.3f}) | "
            + (f"{skipped} ({mine['audited']}, {mine['wrong_skips']})" if skipped is not None else "-")
            + f" | `{_rel(path)}` |"
        )
    return lines


def prediction_lines(paths: Sequence[Path]) -> list[str]:
    """One row per table: the median absolute error of each predicted metric, measured / predicted - 1."""
    lines = ["| table | metric | median abs. error | inside the interval | raw |", "| --- | --- | --- | --- | --- |"]
    for path in paths:
        for row in _read(path)["rows"]:
            lines.append(
                f"| {row['table']} | {row['metric']} | {row['median_abs_error']:.1%} | {row['inside_interval']:.0%} "
                f"| `{_rel(path)}` |"
            )
    return lines


def one_liners() -> list[str]:
    """The warm worker's measured share, the per-trial overhead, the twin ratio and the GPU check's first run."""
    busy = _read(BUSY)
    overhead = _read(OVERHEAD)
    twin = [row["twin_ratio"] for row in _read(TWIN)["rows"] if row["twin_ratio"] is not None]
    gpu = _read(GPU)
    truth = gpu["phases"]["latency_truth"]["figures"]
    wan = gpu["phases"]["wan21_diffusers"]["figures"]
    ok = sum(1 for trial in wan["trials"] if trial["outcome"] == "OK")
    return [
        f"- A tiny Wan study in a warm worker spends {shares(busy['phases_device_s'])['measured']:.1%} of its "
        f"device time in measured calls (`{_rel(BUSY)}`).",
        f"- The tuner's own path costs {(overhead['whole_path_s_per_trial'] - overhead['bare_optuna_s_per_trial']) * 1e3:.1f}"
        f" ms per trial over bare Optuna (`{_rel(OVERHEAD)}`).",
        f"- Its latency over a bare timing of the same loaded call, in the same worker: "
        f"{min(twin):.3f}-{max(twin):.3f} on {len(twin)} CPU settings, median {statistics.median(twin):.3f} "
        f"(`{_rel(TWIN)}`).",
        f"- On an H200 (2026-12-04): a CUDA sleep kernel timed within {truth['max_error']:.2%}; "
        f"Wan2.1-T2V-1.3B at {wan['resolution']}, {ok} of {len(wan['trials'])} settings measured OK (`{_rel(GPU)}`).",
    ]


def report_lines() -> list[str]:
    return [
        "Search cost: replayed studies (simulated runs, modelled device-seconds), median of 10 seeds; the front "
        "at the end is the median share of its hypervolume after the whole budget:",
        "",
        *search_lines(SEARCH),
        "",
        "Predictions before each run, in the default's own studies (5 seeds, 60 trials per table):",
        "",
        *prediction_lines(PREDICTION),
        "",
        *one_liners(),
    ]


if __name__ == "__main__":
    print("\n".join(report_lines()))
