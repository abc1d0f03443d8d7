"""Print the figures of committed ``bench/gpu_check.sh`` runs (their JSON files) as the tables docs/benchmarks.md
holds between report markers.

    python bench/gpu_check_report.py bench/results/gpu_h200_2026-12-04

Reads every ``*.json`` of the directory that a GPU check wrote (``mode``, ``phases``): the two prepared runs'
``gpu_check_run1.json`` / ``gpu_check_run2.json``, or any file of an earlier plan (the first H200 lease's
``gpu_check.json`` files, renamed by the phases they ran). Prints the machine (GPU, driver, torch, CUDA, Python;
one line per run when the runs' machines differ) and each run's phases: status, seconds, the figure that decides
it; the Wan phase's trials (p50, CV, peaks, PSNR; where measured, the bare twin's p50 and the tuner / bare ratio,
GPU utilization, power and joules per video) and latency ratios; the audio-visual LLM phase's trials (prompt
tokens, p50, new tokens per second, peaks, utilization, power, joules per answer, agreement with the reference
answer). A figure the run reported unavailable prints as ``n/a``. Nothing is measured here: the figures are the
run's own.
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


def _num(value: Any, spec: str) -> str:
    """``value`` formatted with ``spec``, or ``n/a`` when the run reported none."""
    return "n/a" if value is None else format(value, spec)


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def _decisive(name: str, figures: dict[str, Any]) -> str:
    """The one figure that decides a phase, as text."""
    if name == "device_facts":
        facts = figures.get("fingerprint", {})
        return f"{facts.get('gpu_type')}, {facts.get('gpu_memory_gb')} GB, driver {facts.get('driver_version')}"
    if name == "latency_truth":
        cells = [
            f"{t['kernel_ms']} ms kernel: {_num(_percent(t['error']), '+.2f')} %" for t in figures.get("trials", [])
        ]
        return "; ".join(cells)
    if name == "vram_spike":
        return (
            f"{figures['spike_gib']} GiB for {figures['spike_ms']} ms: allocator "
            f"{_num(figures['allocator_peak_gb'], '.2f')} GB, NVML rise {_num(figures['nvml_rise_gb'], '.2f')} GB"
        )
    if name == "carry_over":
        ratio = figures.get("small_over_large", {})
        return ", ".join(f"small / large {key} {_num(value, '.3f')}" for key, value in ratio.items())
    if name == "sampler_cost":
        return f"memory sampler on / off p50, worst: {_num(_percent(figures.get('max_cost')), '.2f')} % slower"
    if name == "avatar":
        return f"{sum(1 for t in figures.get('trials', []) if t['outcome'] == 'OK')} trials OK"
    if name == "wan21_diffusers":
        text = f"{figures.get('ok_trials')} of {figures.get('settings_planned')} settings OK"
        if "twin_ratio_worst" in figures:
            text += f"; worst tuner / bare p50 {_num(figures['twin_ratio_worst'], '.3f')} (goal {figures['twin_goal']})"
        return text
    if name == "av_llm_omni":
        return (
            f"{figures.get('architecture')}: {figures.get('ok_trials')} of {figures.get('settings_planned')} "
            f"settings OK, built in {_num(figures.get('load_s'), '.1f')} s"
        )
    if name == "slot_pinning":
        return f"every trial on its GPU: {all(t.get('on_its_device', True) for t in figures.get('trials', []))}"
    if name == "gpu_tests":
        return ", ".join(f"{count} {kind}" for kind, count in figures.get("counts", {}).items())
    return ""


def _machine(facts: dict[str, Any]) -> str:
    return (
        f"{facts.get('gpu_type')} ({facts.get('gpu_memory_gb')} GB), driver {facts.get('driver_version')}, CUDA "
        f"{facts.get('cuda_driver_version')}, torch {facts.get('torch_version')}, Python "
        f"{facts.get('python_version')}"
    )


def _machine_lines(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """``Machine: ...`` once when every run names the same one, else one line per run."""
    machines = [
        (name, _machine(data["phases"]["device_facts"]["figures"]["fingerprint"]))
        for name, data in runs
        if (data["phases"].get("device_facts", {}).get("figures") or {}).get("fingerprint")
    ]
    if not machines:
        return []
    if len({machine for _, machine in machines}) == 1:
        return [f"Machine: {machines[0][1]}.", ""]
    return [f"Machine of {name}: {machine}." for name, machine in machines] + [""]


def _wan_lines(wan: dict[str, Any]) -> list[str]:
    twin = "twin_ratios" in wan  # runs since the bare twin and NVML activity: their columns
    lines = [
        "",
        f"Wan phase: {wan['architecture']}, {wan['resolution']}, {wan['precision']} (random weights: PSNR is "
        "agreement with the reference setting's output of an untrained network).",
    ]
    if twin:
        measurement = wan.get("measurement", {})
        repeats = sorted({measurement.get("min_repeats"), measurement.get("max_repeats")}, key=str)
        lines[-1] += (
            f" Each setting: {' to '.join(map(str, repeats))} tuner repeats after "
            f"{measurement.get('warmup')} warm-up, then {measurement.get('bare_twin')} bare calls."
        )
    head = ["setting", "p50 s", "CV", "allocator peak GB", "device peak GB", "PSNR dB"]
    if twin:
        head += ["bare p50 s", "tuner / bare", "GPU util mean %", "peak %", "power W", "J per video"]
    lines += ["", "| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for trial in wan["trials"]:
        cells = [
            str(trial["setting"]),
            _num(trial["latency_p50_s"], ".3f"),
            _num(trial["latency_cv"], ".3f"),
            _num(trial["peak_vram_gb"], ".2f"),
            _num(trial["peak_vram_device_gb"], ".2f"),
            _num(trial["psnr_db"], ".2f"),
        ]
        if twin:
            cells += [
                _num(trial.get("bare_p50_s"), ".3f"),
                _num(trial.get("twin_ratio"), ".3f"),
                _num(trial.get("gpu_util_mean_pct"), ".0f"),
                _num(trial.get("gpu_util_peak_pct"), ".0f"),
                _num(trial.get("gpu_power_mean_w"), ".0f"),
                _num(trial.get("joules_per_video"), ".0f"),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Latency ratios (p50 over p50): "
        + ", ".join(f"{key} {value:.2f}" for key, value in wan["latency_ratios"].items() if value is not None)
        + ".",
    ]
    if twin:
        lines += ["", f"Worst tuner / bare p50: {_num(wan['twin_ratio_worst'], '.3f')} (goal <= {wan['twin_goal']})."]
    return lines


def _omni_lines(omni: dict[str, Any]) -> list[str]:
    inputs = omni.get("inputs", {})
    lines = [
        "",
        f"Audio-visual LLM phase: the {omni['architecture']} thinker, {omni['precision']}, random weights "
        f"(built in {_num(omni.get('load_s'), '.1f')} s, worker start included); a "
        f"{inputs.get('video_seconds')} s clip, {inputs.get('video_height')}x{inputs.get('video_width')}; "
        "every answer decoded to max_new_tokens; text F1 is agreement with the reference setting's token "
        "ids from an untrained network.",
        "",
        "| setting | fps | max frames | max new tokens | video tokens | audio tokens | p50 s | CV | "
        "new tokens/s | allocator peak GB | device peak GB | GPU util mean % | power W | J per answer | "
        "text F1 |",
        "| " + " | ".join("---" for _ in range(15)) + " |",
    ]
    for trial in omni["trials"]:
        cells = [
            str(trial["setting"]),
            str(trial["video_fps"]),
            str(trial["max_frames"]),
            str(trial["max_new_tokens"]),
            _num(trial["count_video_tokens"], ".0f"),
            _num(trial["count_audio_tokens"], ".0f"),
            _num(trial["latency_p50_s"], ".3f"),
            _num(trial["latency_cv"], ".3f"),
            _num(trial["new_tokens_per_s"], ".1f"),
            _num(trial["peak_vram_gb"], ".2f"),
            _num(trial["peak_vram_device_gb"], ".2f"),
            _num(trial["gpu_util_mean_pct"], ".0f"),
            _num(trial["gpu_power_mean_w"], ".0f"),
            _num(trial["energy_per_output_j"], ".0f"),
            _num(trial["text_f1"], ".2f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    ratios = ", ".join(f"{key} {value:.2f}" for key, value in omni["latency_ratios"].items() if value is not None)
    lines += [
        "",
        f"Latency ratios (p50 over p50): {ratios or 'none'}; decode cost "
        f"{_num(omni.get('decode_ms_per_token'), '.1f')} ms per new token (base against short answer).",
    ]
    return lines


def report(folder: Path) -> str:
    runs = _runs(folder)
    lines = _machine_lines(runs)
    lines += ["| run | phase | status | seconds | figure |", "| --- | --- | --- | --- | --- |"]
    for name, data in runs:
        for phase, record in data["phases"].items():
            lines.append(
                f"| {name} ({data['started']}) | `{phase}` | {record.get('status')} | "
                f"{record.get('seconds')} | {_decisive(phase, record.get('figures') or {})} |"
            )
    for _, data in runs:
        wan = data["phases"].get("wan21_diffusers", {}).get("figures")
        if wan:
            lines += _wan_lines(wan)
        omni = data["phases"].get("av_llm_omni", {}).get("figures")
        if omni:
            lines += _omni_lines(omni)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("folder", type=Path, help="A directory of the check's JSON files (bench/results/gpu_*).")
    print(report(parser.parse_args().folder))


if __name__ == "__main__":
    main()
