"""Quality scored off the device: the same tiny-Wan study with its quality scored in the worker, then in a scorer.

Issue 38, item 4: score trial N's quality off the device's critical path while trial N+1 runs. Two arms of
``search_spaces/wan_tiny_cpu.yaml`` (diffusers' real WanPipeline, tiny, random weights, one CPU thread, a warm
worker) through the public API, each with ``--trials`` measured trials of the same settings (a seeded random
sampler, nothing skipped: :mod:`busy_device`'s ``--same-settings``): ``measurement.score_off_device: false``
(quality scored in the worker while the device waits) and ``true`` (a scorer process on another core scores it
while the slot runs the next trial; :mod:`tuner.runner.scoring`). On this CPU host the "device" is the slot's
core: the scorer runs beside it on the second core, as it would beside a GPU's calls.

Printed per arm: the study's wall time, its recorded device-seconds and the measured calls' share of them (whole
study; from the second run on). Then the pairs of settings both arms measured: the off-device arm's latency p50
over the in-worker arm's (median and range: latency truth, the scorer must not slow the calls it runs beside)
and the largest PSNR difference (the scores must be the same).

Usage: ``python bench/score_off_device.py [--trials 14]``; raw figures to ``bench/results/score_off_device.json``;
``--report`` prints the lines from them and measures nothing.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import raw_results
from busy_device import measure as measure_arm
from busy_device import shares
from raw_results import provenance

ARMS = (("in the worker", False), ("off the device", True))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Both arms, in order, with the same settings."""
    arms = []
    for label, off in ARMS:
        arm = argparse.Namespace(
            trials=args.trials,
            wall_s=args.wall_s,
            warmup=None,
            reload_on=None,
            light_warmup=None,
            same_settings=True,
            reload_lookahead=None,
            label=label,
            score_off_device=off,
        )
        arms.append(measure_arm(arm))
    return {"trials_asked": args.trials, "arms": arms}


def _after_first(rows: list[dict[str, Any]]) -> float:
    """The measured share of the runs after the first."""
    later: dict[str, float] = {}
    for row in rows[1:]:
        for phase, seconds in row["phases_device_s"].items():
            later[phase] = later.get(phase, 0.0) + float(seconds)
    return shares(later)["measured"]


def _ran(arm: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for row in arm["trials"] if row["device_s"]]


def _key(row: dict[str, Any]) -> str:
    return repr(sorted(row["setting"].items()))


def report_lines(result: dict[str, Any]) -> list[str]:
    """The lines the bench prints, from its raw figures."""
    lines = []
    for arm in result["arms"]:
        ran = _ran(arm)
        share = shares(arm["phases_device_s"])
        scored = [row for row in ran if row["scored_off_device"]]
        lines.append(
            f"{arm['label']}: {len(ran)} runs in {arm['study_wall_s']:.1f} s, {arm['recorded_device_s']:.1f} device-s; "
            f"measured {share['measured']:.1%} (from the second run on {_after_first(ran):.1%}), evaluation "
            f"{share['evaluation']:.1%}; {len(scored)} scored off the device "
            f"({sum(float(row['eval_time_s'] or 0) for row in scored):.1f} s in the scorer)"
        )
    inside, outside = ({_key(row): row for row in _ran(arm) if row["outcome"] == "OK"} for arm in result["arms"])
    pairs = [(inside[key], outside[key]) for key in inside.keys() & outside.keys()]
    ratios = [b["latency_p50_s"] / a["latency_p50_s"] for a, b in pairs if a["latency_p50_s"] and b["latency_p50_s"]]
    psnr = [abs(a["psnr_db"] - b["psnr_db"]) for a, b in pairs if a["psnr_db"] is not None and b["psnr_db"] is not None]
    if ratios:
        lines.append(
            f"{len(ratios)} settings in both arms: latency p50 off the device / in the worker median "
            f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); largest PSNR difference "
            f"{max(psnr, default=0.0):.2g} dB"
        )
    walls = [arm["study_wall_s"] for arm in result["arms"]]
    lines.append(f"study wall time off the device / in the worker: {walls[1] / walls[0]:.3f}")
    lines.append(f"raw: {provenance(result)}")
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=14, help="measured trials per arm (default 14)")
    parser.add_argument("--wall-s", type=float, default=900.0, help="each study's wall-time budget (s)")
    raw_results.main(parser, "score_off_device.py", measure, report_lines)
