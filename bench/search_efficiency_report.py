"""The ``--report`` of ``bench/search_efficiency.py``, nothing replayed.

``--report RESULTS.json ...`` re-prints, from committed raw results only, the markdown table
docs/benchmarks.md shows (several files: their methods in one table, for runs split over files):
trials to 90 / 95 / 99 %, the median fraction after 10, 20 and 40 trials and after the last
one (HV at end; the sweep's last is the whole space's), mean OOM runs and skips per study
where a memory cap was declared, device-seconds to 95 % where the file has them, and the closing
lines the run printed. Trials to a target come from the file's ``trials_to`` when it has them
(computed before the curves were rounded); older files hold only the curves, rounded to 6
digits, so a target counts as reached only where the rounded fraction is above it (a fraction
just under 0.9 rounds to 0.9: on the avqa sweep that is trial 432, where it reached 0.9 at 468).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tuner.replay.methods import Replay
from tuner.replay.report import (
    CHECKPOINTS,
    COST_TARGET,
    TARGETS,
    MethodResult,
    comparison,
    cost_comparison,
    quantile,
    sweep_cost_line,
)

DEFAULT_V1_NAME = "default-v1"
"""The default before issue 26, kept under its own name; the last closing line compares the default with it."""


class _Recorded(MethodResult):
    """A method's replays as a results JSON holds them: per-seed trials and device-seconds to each target
    from the file when it has them, else from the rounded curves (reached only above the target)."""

    stored: Mapping[str, Any] = {}

    def trials_to(self, target: float) -> list[float]:
        kept = self.stored.get("trials_to", {}).get(f"{target:g}")
        if kept is not None:
            return [math.inf if v is None else float(v) for v in kept]
        return [float(_above(r.fractions, target) or math.inf) for r in self.replays]

    def device_s_to(self, target: float) -> list[float]:
        kept = self.stored.get("device_s_to", {}).get(f"{target:g}")
        if kept is not None:
            return [math.inf if v is None else float(v) for v in kept]
        return [math.inf if (n := _above(r.fractions, target)) is None else r.device_s[n - 1] for r in self.replays]

    def median_fraction_at(self, trials: int) -> float:
        kept = self.stored.get("median_fraction_at", {}).get(str(trials))
        return float(kept) if kept is not None else super().median_fraction_at(trials)


def _above(fractions: Sequence[float], target: float) -> int | None:
    """Trials until a rounded curve is above ``target`` (None: never)."""
    return next((index + 1 for index, fraction in enumerate(fractions) if fraction > target), None)


def _recorded(name: str, raw: Mapping[str, Any]) -> _Recorded:
    replays = [
        Replay(
            method=name,
            seed=r["seed"],
            fractions=r["fractions"],
            trials=r["trials_recorded"],
            runs=r["runs"],
            stopped_because=r["stopped_because"],
            elapsed_s=r["elapsed_s"],
            sampler_s=r["sampler_s"],
            oom_runs=r["oom_runs"],
            skipped_oom=r["skipped_predicted_oom"],
            device_s=r.get("device_s", []),
        )
        for r in raw["replays"]
    ]
    result = _Recorded(name, replays, raw["budget"])
    object.__setattr__(result, "stored", raw)
    return result


def report_lines(paths: Sequence[Path], only: Sequence[str] | None = None) -> list[str]:
    """The markdown table of committed results (see the module docstring); methods whose replays are the
    same (``tpe`` and ``default``) share one row, named ``a = b``."""
    abouts = [json.loads(Path(p).read_text()) for p in paths]
    first = abouts[0]
    if any(a["table"] != first["table"] for a in abouts):
        raise SystemExit(f"--report: one table at a time, got {sorted({a['table'] for a in abouts})}")
    results = [
        _recorded(name, raw)
        for about in abouts
        for name, raw in about["methods"].items()
        if only is None or name in only
    ]
    rows: list[tuple[list[str], _Recorded]] = []
    for result in results:
        curves = [r.fractions for r in result.replays]
        twin = next((row for row in rows if [r.fractions for r in row[1].replays] == curves), None)
        if twin is not None:
            twin[0].append(result.name)
        else:
            rows.append(([result.name], result))
    cap = first["memory_cap_gb"]
    costs = all(r.device_s for result in results for r in result.replays)
    seeds = sorted({len(result.replays) for result in results if result.name != "sweep"})
    budgets = sorted({result.budget for result in results if result.name != "sweep"})
    lines = [
        f"{first['table']}: {first['settings']} settings, front of {first['front_size']}, "
        + ("no memory cap" if cap is None else f"declared cap {cap:g} GB")
        + f"; {'/'.join(map(str, seeds))} seeds x {'/'.join(map(str, budgets))} trials"
        + ("; sweep: the whole space, once" if any(r.name == "sweep" for r in results) else ""),
        "",
    ]
    head = ["method", *(f"to {round(t * 100)} %" for t in TARGETS), *(f"HV@{k}" for k in CHECKPOINTS), "HV at end"]
    head += ["OOM runs", "skipped"] if cap is not None else []
    head += [f"dev-s to {round(COST_TARGET * 100)} %"] if costs else []
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for names, result in rows:
        cells = [
            " = ".join(names),
            *(result.cell(t) for t in TARGETS),
            *(f"{result.median_fraction_at(k):.3f}" for k in CHECKPOINTS),
            f"{quantile([r.fractions[-1] if r.fractions else 0.0 for r in result.replays], 0.5):.4f}",
        ]
        cells += [f"{result.mean_oom_runs:.1f}", f"{result.mean_skipped:.1f}"] if cap is not None else []
        cells += [result.device_cell(COST_TARGET)] if costs else []
        lines.append("| " + " | ".join(cells) + " |")
    by_name = {r.name: r for r in results}
    closing = []
    if "default" in by_name and "sweep" in by_name:
        closing.append(comparison(first["table"], by_name["default"], by_name["sweep"])[0])
        if costs:
            closing.append(sweep_cost_line(first["table"], by_name["default"], by_name["sweep"]))
    if costs and "default" in by_name and DEFAULT_V1_NAME in by_name:
        closing.append(cost_comparison(first["table"], by_name["default"], by_name[DEFAULT_V1_NAME])[0])
    return lines + ([""] + closing if closing else [])
