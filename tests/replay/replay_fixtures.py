"""A tiny SYNTHETIC measured table for the replay tests, written to a temporary directory.

Nothing here was measured: the metrics are formulas of the setting, chosen so that the table
has every case a replay must handle — a rule-refused setting (INVALID), a recorded CRASH,
settings over the declared memory cap (OOM), settings failing the quality constraint, and a
front of several points. The space: ``steps`` 1..4 x ``res`` {32, 64} x ``fast`` bool, with
``mode`` fixed at ``"a"`` (16 settings).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

CAP_GB = 1.25
SPEC_TEXT = """\
name: tiny_replay
description: SYNTHETIC space for the replay tests (values are formulas, never measured).
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 30
  device: cpu
inputs:
  seconds: 3.0
parameters:
  steps: {type: int, low: 1, high: 4}
  res: {type: categorical, choices: [32, 64]}
  fast: {type: bool}
  mode: {type: categorical, choices: [a, b]}
rules:
  - expr: "not (steps == 1 and res == 64)"
    message: "one step at 64 px is refused"
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: stlpips_alex, direction: minimize}
constraints:
  - {metric: peak_vram_gb, max: "0.85 * gpu_memory_gb"}
  - {metric: psnr_db, min: 18}
reference: {steps: 4, res: 64, fast: true, mode: a}
baseline: {steps: 2, res: 32, fast: false, mode: a}
budget: {trials: 10}
seed: 0
"""
PARAMETERS = ("steps", "res", "fast", "mode")
COLUMNS = (
    *PARAMETERS,
    "outcome",
    "reason",
    "latency_p50_s",
    "latency_repeats",
    "peak_rss_gb",
    "stlpips_alex",
    "psnr_db",
)
CRASHED = {"steps": 3, "res": 32, "fast": True, "mode": "a"}


def synthetic_row(steps: int, res: int, fast: bool) -> dict[str, Any]:
    """The SYNTHETIC record of one setting (see the module docstring)."""
    setting = {"steps": steps, "res": res, "fast": fast, "mode": "a"}
    if steps == 1 and res == 64:
        return {**setting, "outcome": "INVALID", "reason": "one step at 64 px is refused"}
    if setting == CRASHED:
        return {**setting, "outcome": "CRASH", "reason": "Segmentation fault"}
    latency = 0.05 * steps * (res / 32) ** 2 * (0.5 if fast else 1.0)
    return {
        **setting,
        "outcome": "OK",
        "latency_p50_s": f"{latency:.6g}",
        "latency_repeats": 2,
        "peak_rss_gb": f"{1.0 + 0.1 * (res == 64) + 0.2 * (not fast and steps >= 3):.6g}",
        "stlpips_alex": f"{0.3 / steps + 0.1 * (res == 32) + 0.05 * fast - 0.075 * (steps == 4):.6g}",
        "psnr_db": f"{30 - 5 * (4 - steps):.6g}",
    }


def write_tiny_table(
    directory: Path,
    *,
    missing: tuple[dict[str, Any], ...] = (),
    sidecar_fixed: dict[str, Any] | None = None,
    inputs: dict[str, Any] | None = None,
    sidecar_inputs: dict[str, Any] | None = None,
) -> Path:
    """Spec, CSV, sidecar and ``hardware_types.yaml`` (table ``tiny``, hardware ``cpu1t``) under
    ``directory``; returns the hardware-types path. ``missing`` settings are left out of the CSV;
    ``inputs`` are declared overridden (the sidecar says ``sidecar_inputs``, default the same)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tiny.yaml").write_text(SPEC_TEXT)
    rows = [synthetic_row(steps, res, fast) for steps in (1, 2, 3, 4) for res in (32, 64) for fast in (False, True)]
    rows = [r for r in rows if {k: r[k] for k in PARAMETERS} not in [{**m, "mode": "a"} for m in missing]]
    with (directory / "tiny.cpu1t.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in COLUMNS})
    (directory / "tiny.cpu1t.json").write_text(
        json.dumps(
            {
                "table": "tiny",
                "spec": str(directory / "tiny.yaml"),
                "hardware": "cpu1t",
                "synthetic": True,
                "fixed": {"mode": "a"} if sidecar_fixed is None else sidecar_fixed,
                "inputs_override": (inputs or {}) if sidecar_inputs is None else sidecar_inputs,
            }
        )
    )
    types = directory / "hardware_types.yaml"
    types.write_text(
        f"tiny:\n  spec: tiny.yaml\n  fixed: {{mode: a}}\n  inputs: {json.dumps(inputs or {})}\n"
        f"  hardware:\n    cpu1t: {{table: tiny.cpu1t.csv, memory_cap_gb: {CAP_GB}}}\n"
    )
    return types
