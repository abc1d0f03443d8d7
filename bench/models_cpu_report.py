"""docs/models.md's CPU figures, printed from the raw result of ``bench/models_cpu.py`` (measures nothing).

Usage::

    python bench/models_cpu_report.py [--results bench/results/models_cpu.json]

Prints markdown: where and how the run measured, the Wan ``tiny`` sweeps and cache table, the Omni thinker
``tiny`` sweeps and the parameter counts, every figure read from the JSON (latencies are each setting's
``latency_p50_s``; PSNR in dB against the base setting's video; ratios from the JSON's ``derived``).
``bench/models_cpu.py`` prints the same lines when it has measured; ``bench/report.py --check`` compares
them with the block in docs/models.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "models_cpu.json"
PSNR_IDENTICAL_DB = 100.0  # tuner.evaluators.video.PSNR_CAP_DB: what psnr_db gives identical videos


def _s(row: dict[str, Any], digits: int = 2) -> str:
    return f"{row['latency_p50_s']:.{digits}f} s"


def _db(row: dict[str, Any]) -> str:
    value = row.get("psnr_db_vs_base")
    return "" if value is None or value >= PSNR_IDENTICAL_DB else f" ({value:.1f} dB)"


def _count(count: float) -> str:
    """A parameter count to 4 significant digits, in k, M or B."""
    scale, suffix = (1e9, "B") if count >= 1e9 else (1e6, "M") if count >= 1e6 else (1e3, "k")
    return f"{count / scale:.4g} {suffix}"


def header_lines(result: dict[str, Any]) -> list[str]:
    """Where, when and how the run measured; the base setting's spread of repeats."""
    machine, versions = result["machine"], result["versions"]
    base = next(row for row in result["wan"]["sweeps"]["cache"] if row["is_base"])
    spread = (base["latency_max_s"] - base["latency_min_s"]) / 2 / base["latency_p50_s"]
    threads = machine["torch_threads"]
    return [
        f"Measured {result['date_utc']} on {machine['cpu_model']}, {machine['cpu_cores']} cores "
        f"({machine['idle_cores_at_start']} idle at the start), {threads} torch thread{'s' * (threads != 1)}; "
        f"torch {versions['torch']}, diffusers {versions['diffusers']}, transformers {versions['transformers']}; "
        f"{result['wall_s']:.0f} s in all. Each setting: {result['warmup']} warm-up call, then "
        f"{result['repeats']} rounds timing one call of every setting in turn; p50 of the {result['repeats']}. "
        f"The Wan base setting's repeats spread {base['latency_min_s']:.2f}–{base['latency_max_s']:.2f} s "
        f"(±{100 * spread:.0f} % around its p50)."
    ]


def wan_lines(wan: dict[str, Any]) -> list[str]:
    """The Wan ``tiny`` sweeps (one knob at a time) and the cache table."""
    sweeps, derived, base = wan["sweeps"], wan["derived"], wan["base"]
    calls_per_step = (
        next(r for r in sweeps["steps"] if r["is_base"])["computed_per_video"]["denoiser_calls"]
        // base["num_inference_steps"]
    )
    cfg = {row["value"]: row for row in sweeps["cfg"]}
    lines = [
        f"Wan `tiny` (`{wan['weights_identity']}`, {wan['precision']}), base {base['num_frames']} frames, "
        f"{base['width']}x{base['height']}, {base['num_inference_steps']} steps, {base['scheduler']}, "
        f"CFG {base['guidance_scale']}, batch {base['batch_size']}, no cache; one knob changed at a time. "
        "PSNR against the base's video:",
        "",
        "| knob | values → p50 latency | notes |",
        "| --- | --- | --- |",
        "| `num_inference_steps` | "
        + ", ".join(f"{r['value']}: {_s(r)}{_db(r)}" for r in sweeps["steps"])
        + f" | {1000 * derived['seconds_per_step']:.1f} ms per step ({calls_per_step} denoiser calls), "
        f"{1000 * derived['seconds_outside_steps']:.0f} ms outside the steps; 16/2 = "
        f"{derived['steps_16_over_2']:.2f}x |",
        "| `num_frames` | "
        + ", ".join(f"{r['value']}: {_s(r)}" for r in sweeps["frames"])
        + f" | 33/5 = {derived['frames_33_over_5']:.2f}x |",
        "| `guidance_scale` | "
        + ", ".join(f"{value}{' (no CFG)' if value <= 1 else ''}: {_s(row)}{_db(row)}" for value, row in cfg.items())
        + f" | CFG on/off = {derived['cfg_on_over_off']:.2f}x |",
        "",
    ]
    calls = next(r for r in sweeps["cache"] if r["is_base"])["computed_per_video"]["denoiser_calls"]
    lines += [
        f"| `cache` at {base['num_inference_steps']} steps (default knob) | p50 | speed-up | last block "
        f"computed, of {calls} denoiser calls (self-attention / feed-forward) | PSNR vs uncached |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in sweeps["cache"]:
        knob = ", ".join(f"{name} {value}" for name, value in row["cache_knob"].items())
        done = row["computed_per_video"]
        same = row["psnr_db_vs_base"] >= PSNR_IDENTICAL_DB
        quality = (
            ("identical" + ("" if row["is_base"] else " (nothing reused)"))
            if same
            else f"{row['psnr_db_vs_base']:.1f} dB"
        )
        lines.append(
            f"| {row['value']}{f' ({knob})' if knob else ''} | {_s(row)} | "
            f"{derived['cache_speedup'][row['value']]:.2f}x | {done['last_block_self_attention']} / "
            f"{done['last_block_feed_forward']} | {quality} |"
        )
    return lines


def omni_lines(omni: dict[str, Any]) -> list[str]:
    """The Omni thinker ``tiny`` sweeps (one knob at a time)."""
    sweeps, derived, base, inputs = omni["sweeps"], omni["derived"], omni["base"], omni["inputs"]
    first = next(r for r in sweeps["new_tokens"] if r["value"] == base["max_new_tokens"])
    rows = {name: {row["value"]: row for row in sweep} for name, sweep in sweeps.items()}
    no_cache, beams = rows["use_cache"][False], rows["beams"][2]
    return [
        f"Qwen2.5-Omni thinker `tiny` (`{omni['weights_identity']}`, {omni['precision']}, "
        f"{omni['attn_implementation']}), a synthetic {inputs['video_seconds']:g} s clip; base "
        f"{base['video_fps']:g} fps, {base['max_frames']} frames, {base['max_pixels']:,} px per frame "
        f"({first['frame_width']}x{first['frame_height']}, {first['video_tokens']} video tokens), "
        f"{base['audio_seconds']:g} s of audio ({first['audio_tokens']} tokens), {first['prompt_tokens']} prompt "
        f"tokens, {base['max_new_tokens']} new tokens, greedy, KV cache, batch {base['batch_size']}:",
        "",
        "| knob | values → p50 latency |",
        "| --- | --- |",
        "| `max_new_tokens` | "
        + ", ".join(
            f"{value}: {_s(row, 3)} ({row['ms_per_new_token']:.1f}{' ms/token' if value == 4 else ''})"
            for value, row in rows["new_tokens"].items()
        )
        + f"; {1000 * derived['seconds_per_new_token']:.1f} ms per added token, "
        f"{1000 * derived['seconds_before_decoding']:.0f} ms before decoding; 32/4 = "
        f"{derived['tokens_32_over_4']:.2f}x |",
        "| `max_frames` | "
        + ", ".join(
            f"{value} ({row['video_tokens']}{' video tokens' if value == 4 else ''}): {_s(row, 3)}"
            for value, row in rows["frames"].items()
        )
        + f"; 16/4 = {derived['frames_16_over_4']:.2f}x |",
        "| `max_pixels` | "
        + ", ".join(
            f"{value:,} ({row['video_tokens']}{' video tokens' if value == 6272 else ''}): {_s(row, 3)}"
            for value, row in rows["pixels"].items()
        )
        + f"; {derived['pixels_25088_over_6272']:.2f}x |",
        "| `audio_seconds` | "
        + ", ".join(
            f"{value:g} ({'no audio' if not value else str(row['audio_tokens']) + (' tokens' if value == 2 else '')}): "
            f"{_s(row, 3)}"
            for value, row in rows["audio"].items()
        )
        + f"; 8 s / none = {derived['audio_8_over_0']:.2f}x |",
        f"| `use_cache` false | {_s(no_cache)}, {derived['no_cache_over_cache']:.2f}x; "
        f"{'the same' if no_cache['answer_equals_base'] else 'another'} greedy answer |",
        f"| `num_beams` 2 | {_s(beams, 3)}, {derived['beams_2_over_1']:.2f}x; "
        f"{'the same answer' if beams['answer_equals_base'] else 'another answer'} |",
    ]


def parameter_lines(counts: dict[str, Any]) -> list[str]:
    """Parameters of every preset, counted on the meta device."""
    wan, omni = counts["wan"], counts["omni_thinker"]
    vae = {c["vae_parameters"] for name, c in wan.items() if name != "tiny"}
    two = [name for name, c in wan.items() if c["denoisers"] == 2]
    return [
        "Parameters, counted on the meta device: Wan denoiser "
        + ", ".join(
            f"`{name}` {_count(c['denoiser_parameters'])}"
            + (f" (its VAE {_count(c['vae_parameters'])})" if name == "tiny" else "")
            + (" (two experts)" if name in two else "")
            for name, c in wan.items()
        )
        + (f", the Wan2.1 VAE of the other presets {_count(vae.pop())}" if len(vae) == 1 else "")
        + "; Omni thinker "
        + ", ".join(f"`{name}` {_count(value)}" for name, value in omni.items())
        + "."
    ]


def report_lines(result: dict[str, Any]) -> list[str]:
    """The markdown docs/models.md shows, from one raw result of ``bench/models_cpu.py``."""
    return [
        *header_lines(result),
        "",
        *wan_lines(result["wan"]),
        "",
        *omni_lines(result["omni"]),
        "",
        *parameter_lines(result["parameter_counts"]),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="the raw result (default bench/results/models_cpu.json)"
    )
    args = parser.parse_args(argv)
    if not args.results.is_file():
        raise SystemExit(f"{args.results}: no raw result; run bench/models_cpu.py to measure it")
    print("\n".join(report_lines(json.loads(args.results.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
