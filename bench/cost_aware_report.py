"""The printed tables of ``bench/cost_aware.py``: one per replayed table (device-seconds and trials to 90 % and 95 % of
the exhaustive front's hypervolume, per method) and the verdict lines against default-v1 and issue 38's goal."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

AT_TRIALS = 40
"""The trial count at which each method's hypervolume is reported (``HV@40``)."""


def finite(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Summaries for JSON: a target never reached (infinite) is null."""
    return {
        name: {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in s.items()}
        for name, s in summaries.items()
    }


def _fmt(value: float, digits: int = 1) -> str:
    return "never" if not math.isfinite(value) else f"{value:.{digits}f}"


def table_lines(label: str, front: int, summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The printed table of one measured table (see the module docstring)."""
    base = summaries.get("default-v1")
    lines = [
        f"{label}: front {front} settings (goal: 95 % in <= {3 * front} trials, <= 0.5x default-v1's device-s)",
        f"| method | seeds | dev-s to 90 % | dev-s to 95 % (reached) | x default-v1 | cheaper seeds | trials to 95 % | "
        f"HV@{AT_TRIALS} | HV at end | dev-s total | skipped (audited, wrong) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summaries.items():
        ratio = (
            (s["device_s_to_95"] / base["device_s_to_95"])
            if base and math.isfinite(base["device_s_to_95"]) and base["device_s_to_95"] > 0
            else math.nan
        )
        lines.append(
            f"| {name} | {s['seeds']} | {_fmt(s['device_s_to_90'])} | {_fmt(s['device_s_to_95'])} "
            f"({s['reached_95']}) | {_fmt(ratio, 2) if not math.isnan(ratio) else 'n/a'} | "
            f"{s.get('cheaper_seeds', '')} | "
            f"{_fmt(s['trials_to_95'], 0)} | {s[f'hv_at_{AT_TRIALS}']:.3f} | "
            + (f"{s['hv_final']:.3f}" if "hv_final" in s else "n/a")
            + f" | {s['device_s_total']:.1f} | "
            + (
                f"{s['skipped_dominated']} ({s['audited']}, {s['wrong_skips']})"
                if s.get("skipped_dominated") or s.get("audited")
                else "-"
            )
            + " |"
        )
    return lines


def verdicts(by_table: Mapping[str, tuple[int, Mapping[str, Mapping[str, Any]]]]) -> list[str]:
    """Per candidate: wins on every table (cheaper to 95 %, HV@40 not lower), and the issue's goal."""
    lines = []
    names = {n for _, summaries in by_table.values() for n in summaries if n != "default-v1"}
    for name in sorted(names):
        wins, goal, acceptance = [], [], []
        for _label, (front, summaries) in by_table.items():
            s, base = summaries.get(name), summaries.get("default-v1")
            if s is None or base is None:
                continue
            cheaper = s["device_s_to_95"] < base["device_s_to_95"]
            kept = s[f"hv_at_{AT_TRIALS}"] >= base[f"hv_at_{AT_TRIALS}"] - 1e-9
            wins.append(cheaper and kept)
            goal.append(
                cheaper
                and kept
                and s["device_s_to_95"] <= 0.5 * base["device_s_to_95"]
                and s["trials_to_95"] <= 3 * front
            )
            if "hv_final" in s and "hv_final" in base:  # issue 38: <= 0.5x to 95 %, <= 2 % of the front lost at the end
                acceptance.append(
                    math.isfinite(s["device_s_to_95"])
                    and s["device_s_to_95"] <= 0.5 * base["device_s_to_95"]
                    and s["hv_final"] >= base["hv_final"] - 0.02
                )
        verdict = (
            "wins on every table" if wins and all(wins) else f"does not win on every table ({sum(wins)}/{len(wins)})"
        )
        line = f"{name}: {verdict}; meets the issue's goal on {sum(goal)}/{len(goal)} tables"
        if acceptance:
            line += (
                f"; issue 38's (<= 0.5x default-v1's device-s to 95 %, <= 2 % of the front lost at the end) on "
                f"{sum(acceptance)}/{len(acceptance)}"
            )
        lines.append(line)
    return lines
