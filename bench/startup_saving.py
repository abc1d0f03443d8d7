"""What the fork server's class preload saved: the default's device-seconds to the front before and after.

Usage::

    python bench/startup_saving.py            # reads committed results only; runs nothing

Before commit 784895e the fork server imported a workload's *package* only, so a package that
imports its class lazily (``tuner.workloads.avqa``) paid torch and the model code in every
trial's start-up. ``bench/tables/measure_overhead.py`` measured the per-trial start-up from real
trials' recorded phases before the fix (the table sidecars' ``trial_overhead_s`` at commit f0b7c1e,
committed unchanged as the raw result :data:`BEFORE`, so nothing here reads git history) and after it
(the sidecars in the tree). The default sampler does not see costs, so
a replayed study proposes the same trials under either start-up: its device-seconds before the
fix are its replayed curve plus the start-up difference for every trial that ran. This reads the
committed replays of the default (``bench/results/device_seconds/*.json``, written by
``python bench/search_efficiency.py --tables avqa:cpu1t,avqa:cpu1t-nodnn --methods sweep,default
--seeds 10 --budget 200 --results-dir bench/results/device_seconds``) and prints, per table, the
median device-seconds to 95 % of the front with the start-up measured before and after, and the
ratio. Device-seconds as in :mod:`tuner.replay.cost_model` (one device per CPU slot).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from tuner.replay.hypervolume import trials_to_reach

ROOT = Path(__file__).resolve().parents[1]
# the start-up measured before the fix: the sidecars of the last commit before it (f0b7c1e), kept as a raw result
BEFORE = ROOT / "bench" / "results" / "startup_before_preload.json"
TABLES = {"avqa:cpu1t": "avqa.cpu1t", "avqa:cpu1t-nodnn": "avqa.cpu1t-nodnn"}
TARGET = 0.95


def startup_s(sidecar: dict[str, Any]) -> float:
    """The per-trial start-up (s) a sidecar's ``trial_overhead_s`` holds."""
    return float(sidecar["trial_overhead_s"]["startup"])


def to_target(fractions: list[float], device_s: list[float], extra_per_trial: float) -> float | None:
    """Device-seconds until ``fractions`` first reach :data:`TARGET` (:func:`trials_to_reach`), each trial
    costing ``extra_per_trial`` more; None when they never do."""
    reached = trials_to_reach(fractions, TARGET)
    return None if reached is None else device_s[reached - 1] + extra_per_trial * reached


def main() -> int:
    lines = []
    before_fix = json.loads(BEFORE.read_text())["tables"]
    for label, stem in TABLES.items():
        now = startup_s(json.loads((ROOT / "bench" / "tables" / f"{stem}.json").read_text()))
        before = startup_s(before_fix[stem])
        results = json.loads(
            (
                ROOT / "bench" / "results" / "device_seconds" / f"search_efficiency_{stem.replace('.', '_')}.json"
            ).read_text()
        )
        replays = results["methods"]["default"]["replays"]
        after_s = [to_target(r["fractions"], r["device_s"], 0.0) for r in replays]
        before_s = [to_target(r["fractions"], r["device_s"], before - now) for r in replays]
        reached = [(a, b) for a, b in zip(after_s, before_s) if a is not None and b is not None]
        if not reached:
            print(f"{label}: the default did not reach {TARGET:.0%} in the committed replays")
            continue
        after_median = statistics.median(a for a, _ in reached)
        before_median = statistics.median(b for _, b in reached)
        print(
            f"{label}: start-up {before:.3g} s -> {now:.3g} s per trial; default to {TARGET:.0%} of the front: "
            f"{before_median:.0f} -> {after_median:.0f} device-s (median of {len(reached)} seeds)"
        )
        lines.append(f"{label} {after_median / before_median:.2f}x")
    print("device-seconds to 95 % after / before the preload fix: " + ", ".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
