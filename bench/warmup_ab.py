"""Whole-call against one-step warm-ups of a new shape, paired trial by trial (issue 38, item 4).

Reads pairs of ``bench/busy_device.py`` raw results measured with ``--same-settings`` (a seeded random
sampler, nothing skipped: both arms run the same settings in the same order), one arm ``--light-warmup off``
and one ``--light-warmup on``, and measures nothing. A machine's speed drifts between two runs by more than
the effect (the same settings' p50 moved by 12 % between arms), so each trial's warm-up and measured device
time is counted in *calls*: divided by that trial's own p50. Per pair it prints the calls the two arms spent
on warm-ups and on warm-ups plus timed repeats over the trials both ran OK, and their ratio.

Usage: ``python bench/warmup_ab.py OFF.json:ON.json [...]`` (paths under ``bench/results``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _calls(trial: dict[str, Any], phases: tuple[str, ...]) -> float:
    """The trial's device seconds in ``phases``, in calls of its own p50."""
    spent = sum(float((trial.get("phases_device_s") or {}).get(phase, 0.0)) for phase in phases)
    return spent / float(trial["latency_p50_s"])


def pair_lines(off: dict[str, Any], on: dict[str, Any], label: str) -> list[str]:
    """The comparison of one pair of raw results (see the module docstring)."""
    by_number = {t["number"]: t for t in on["trials"]}
    both = [
        (t, by_number[t["number"]])
        for t in off["trials"]
        if t["number"] in by_number
        and t["params"] == by_number[t["number"]]["params"]
        and t["latency_p50_s"]
        and by_number[t["number"]]["latency_p50_s"]
    ]
    if len(both) != len(off["trials"]) or len(both) != len(on["trials"]):
        ran = sum(1 for t in off["trials"] if t["latency_p50_s"])
        if len(both) < ran:
            raise SystemExit(f"{label}: the arms did not run the same settings ({len(both)} of {ran} match)")
    warm = [sum(_calls(t, ("warmup",)) for t in arm) for arm in zip(*both, strict=True)]
    total = [sum(_calls(t, ("warmup", "measured")) for t in arm) for arm in zip(*both, strict=True)]
    drift = sorted(b["latency_p50_s"] / a["latency_p50_s"] for a, b in both)[len(both) // 2]
    return [
        f"{label}: {len(both)} settings run OK in both arms (median p50 on/off {drift:.2f}); in calls of each "
        f"trial's own p50: warm-ups {warm[0]:.1f} whole-call -> {warm[1]:.1f} one-step, warm-ups + timed repeats "
        f"{total[0]:.1f} -> {total[1]:.1f} ({total[1] / total[0]:.2f}x)",
        f"  arms: `{off['command']}` ({off['measured_at']}) and `{on['command']}` ({on['measured_at']})",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="+", help="OFF.json:ON.json, file names under bench/results")
    args = parser.parse_args(argv)
    for pair in args.pairs:
        off_name, on_name = pair.split(":")
        off = json.loads((RESULTS / off_name).read_text())
        on = json.loads((RESULTS / on_name).read_text())
        print("\n".join(pair_lines(off, on, pair)))


if __name__ == "__main__":
    main()
