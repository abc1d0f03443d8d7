"""Print the figures of committed ``bench/gpu_check.sh`` runs (their ``gpu_check.json`` files) as the tables
docs/benchmarks.md holds between report markers.

    python bench/gpu_check_report.py bench/results/gpu_h200_2026-12-04

Reads every ``*.json`` of the directory that a GPU check wrote (``mode``, ``phases``) and prints: the machine
(GPU, driver, torch, CUDA, Python) and each run's start and seconds; one row per phase (status, seconds, the
figure that decides it); the Wan phase's trials (p50, CV, peaks, PSNR) and latency ratios. Nothing is
measured here: the figures are the run's own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _runs(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    runs = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "phases" in data and "mode" in data:
            runs.append((path.name, data))
    return runs


def _decisive(name: str, figures: dict[str, Any]) -> str:
    """The one figure that decides a phase, as text."""
    if name == "device_facts":
        facts = figures.get("fingerprint", {})
        return f"{facts.get('gpu_type')}, {facts.get('gpu_memory_gb')} GB, driver {facts.get('driver_version')}"
    if name == "latency_truth":
        cells = [f"{t['kernel_ms']} ms kernel: {100 * t['error']:+.2f} %" for t in figures.get("trials", [])]
        return "; ".join(cells)
    if name == "vram_spike":
        return (f"{figures['spike_gib']} GiB for {figures['spike_ms']} ms: allocator {figures['allocator_peak_gb']:.2f} "
                f"GB, NVML rise {figures['nvml_rise_gb']:.2f} GB")
    if name == "carry_over":
        ratio = figures.get("small_over_large", {})
        return ", ".join(f"small / large {key} {value:.3f}" for key, value in ratio.items())
    if name == "sampler_cost":
        return f"memory sampler on / off p50, worst: {100 * figures['max_cost']:.2f} % slower"
    if name == "avatar":
        return f"{sum(1 for t in figures.get('trials', []) if t['outcome'] == 'OK')} trials OK"
    if name == "wan21_diffusers":
        return f"{figures.get('ok_trials')} of {figures.get('settings_planned')} settings OK"
    if name == "slot_pinning":
        return f"every trial on its GPU: {all(t.get('on_its_device', True) for t in figures.get('trials', []))}"
    if name == "gpu_tests":
        return ", ".join(f"{count} {kind}" for kind, count in figures.get("counts", {}).items())
    return ""


def report(folder: Path) -> str:
    runs = _runs(folder)
    lines: list[str] = []
    facts = next((data["phases"]["device_facts"]["figures"]["fingerprint"] for _, data in runs
                  if "device_facts" in data["phases"]), {})
    if facts:
        lines.append(f"Machine: {facts.get('gpu_type')} ({facts.get('gpu_memory_gb')} GB), driver "
                     f"{facts.get('driver_version')}, CUDA {facts.get('cuda_driver_version')}, torch "
                     f"{facts.get('torch_version')}, Python {facts.get('python_version')}.")
        lines.append("")
    lines += ["| run | phase | status | seconds | figure |", "| --- | --- | --- | --- | --- |"]
    for name, data in runs:
        for phase, record in data["phases"].items():
            lines.append(f"| {name} ({data['started']}) | `{phase}` | {record.get('status')} | "
                         f"{record.get('seconds')} | {_decisive(phase, record.get('figures') or {})} |")
    for _, data in runs:
        wan = data["phases"].get("wan21_diffusers", {}).get("figures")
        if not wan:
            continue
        lines += ["", f"Wan phase: {wan['architecture']}, {wan['resolution']}, {wan['precision']} (random weights: "
                      "PSNR is agreement with the reference setting's output of an untrained network).", "",
                  "| setting | p50 s | CV | allocator peak GB | device peak GB | PSNR dB |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for trial in wan["trials"]:
            lines.append(f"| {trial['setting']} | {trial['latency_p50_s']:.3f} | {trial['latency_cv']:.3f} | "
                         f"{trial['peak_vram_gb']:.2f} | {trial['peak_vram_device_gb']:.2f} | "
                         f"{trial['psnr_db']:.2f} |")
        lines += ["", "Latency ratios (p50 over p50): " + ", ".join(
            f"{key} {value:.2f}" for key, value in wan["latency_ratios"].items() if value is not None) + "."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("folder", type=Path, help="A directory of gpu_check.json files (bench/results/gpu_*).")
    print(report(parser.parse_args().folder))


if __name__ == "__main__":
    main()
