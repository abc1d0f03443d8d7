"""The real model libraries on this CPU: Wan (diffusers) and the Qwen2.5-Omni thinker (transformers), tiny presets.

Measured in one run, in one process, with ``--threads`` torch threads (default 1, as the tiny CPU specs pin):

1. **Wan tiny** (``make_video_pipeline(weights="random", architecture="tiny", seed=0)``, fp32: diffusers'
   real WanPipeline, WanTransformer3DModel, AutoencoderKLWan and UniPC scheduler with seeded random weights),
   the prompt of ``search_spaces/wan_tiny_cpu.yaml``, from a base setting (9 frames, 64 x 64 px, 16 steps,
   unipc, CFG 5.0, batch 1, no cache) one knob at a time: ``num_inference_steps`` 2/4/8/16, ``num_frames``
   5/9/17/33, ``guidance_scale`` 1.0 (no CFG) / 5.0, and at 16 steps every ``cache`` the factory accepts
   (its default threshold / interval). PSNR (dB, ``tuner.evaluators.video.psnr_db``, 100 = identical) of each
   video against the base setting's uncached video: with random weights this is agreement with the output
   of an UNTRAINED network, not image quality.
2. **Omni thinker tiny** (``make_omni_thinker(weights="random", architecture="tiny", seed=0)``, fp32, sdpa:
   transformers' real Qwen2_5OmniThinkerForConditionalGeneration), the synthetic clip of
   ``search_spaces/av_omni_tiny_cpu.yaml`` (4 s, 25 fps, 168 x 224), from a base setting (4 fps, 8 frames,
   12,544 px per frame, 2 s of audio, 16 new tokens, greedy, KV cache, batch 1): ``max_new_tokens``
   4/8/16/32 (and ms per new token), ``max_frames`` 4/8/16, ``max_pixels`` 6272/12544/25088,
   ``audio_seconds`` 0/2/4/8, ``use_cache`` false and ``num_beams`` 2. Every answer is exactly
   ``max_new_tokens`` long (the factory's ``fixed_length`` for random weights).
3. **Parameter counts** of every preset (Wan denoiser(s) and VAE; the Omni thinker), built on the meta
   device (no memory).

Contract: every setting gets ``--warmup`` untimed calls (>= 1: MagCache calibrates its ratios, the thinker
builds its inputs, on the first one), then ``--repeats`` rounds, each timing one call of every setting in turn
(so a slow spell of a shared machine falls on all settings alike). A timed call is the factory's ``run``, what a
tuner trial times: the pipeline or ``generate`` and the output's conversion. ``latency_p50_s`` is the median of
a setting's repeats in seconds; every repeat is kept in the JSON. A setting shared by sweeps (the base) is
measured once. For Wan, ``computed_per_video`` counts the denoiser's calls and those in which its last block
really computed self-attention / feed-forward (what a cache skipped is not counted). Figures are of this machine
and this run only. Nothing downloads (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` are set before the
libraries load). The raw result goes to ``bench/results/models_cpu.json`` (``--out``); the run ends by printing
what ``python bench/models_cpu_report.py`` prints from it (docs/models.md's block).

Usage: ``HF_HUB_OFFLINE=1 python bench/models_cpu.py [--threads 1] [--warmup 1] [--repeats 7] [--quick]``
(``--quick``: 2 repeats, about a third of the time).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before huggingface_hub, transformers or diffusers read them
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from models_cpu_report import report_lines  # noqa: E402  (bench/: the figures docs/models.md prints)

from tuner.evaluators.video import psnr_db  # noqa: E402
from tuner.host import host_fingerprint, idle_cores  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WAN_SPEC = ROOT / "search_spaces" / "wan_tiny_cpu.yaml"
OMNI_SPEC = ROOT / "search_spaces" / "av_omni_tiny_cpu.yaml"

WAN_BASE: dict[str, Any] = {
    "num_frames": 9,
    "height": 64,
    "width": 64,
    "num_inference_steps": 16,
    "guidance_scale": 5.0,
    "scheduler": "unipc",
    "cache": "none",
    "batch_size": 1,
}
WAN_SWEEPS: dict[str, tuple[str, list[Any]]] = {
    "steps": ("num_inference_steps", [2, 4, 8, 16]),
    "frames": ("num_frames", [5, 9, 17, 33]),
    "cfg": ("guidance_scale", [1.0, 5.0]),
}  # + "cache": every method the factory accepts
OMNI_BASE: dict[str, Any] = {
    "video_fps": 4.0,
    "max_frames": 8,
    "max_pixels": 12544,
    "audio_seconds": 2.0,
    "max_new_tokens": 16,
    "num_beams": 1,
    "use_cache": True,
    "batch_size": 1,
}
OMNI_SWEEPS: dict[str, tuple[str, list[Any]]] = {
    "new_tokens": ("max_new_tokens", [4, 8, 16, 32]),
    "frames": ("max_frames", [4, 8, 16]),
    "pixels": ("max_pixels", [6272, 12544, 25088]),
    "audio": ("audio_seconds", [0.0, 2.0, 4.0, 8.0]),
    "use_cache": ("use_cache", [True, False]),
    "beams": ("num_beams", [1, 2]),
}
OMNI_COUNTERS = ("frames", "frame_height", "frame_width", "video_tokens", "audio_tokens", "prompt_tokens", "new_tokens")


def key_of(params: dict[str, Any]) -> str:
    """A setting's canonical key (JSON with sorted names)."""
    return json.dumps(params, sort_keys=True)


def sweep_settings(base: dict[str, Any], sweeps: dict[str, tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    """Every distinct setting of the sweeps (the base setting with one knob changed), in sweep order."""
    settings: dict[str, dict[str, Any]] = {}
    for knob, values in sweeps.values():
        for value in values:
            settings.setdefault(key_of({**base, knob: value}), {**base, knob: value})
    return list(settings.values())


def interleaved(
    settings: list[dict[str, Any]], call: Callable[[dict[str, Any]], Any], warmup: int, repeats: int
) -> dict[str, tuple[list[float], list[Any]]]:
    """Seconds of each timed call and its output, per setting (by :func:`key_of`).

    Every setting gets ``warmup`` untimed calls, then ``repeats`` rounds each time one call of every setting in
    turn: a slow spell of the machine (another process) falls on all settings alike, not on one block."""
    for params in settings:
        for _ in range(warmup):
            call(params)
    measured: dict[str, tuple[list[float], list[Any]]] = {key_of(params): ([], []) for params in settings}
    for round_number in range(repeats):
        for params in settings:
            seconds, outputs = measured[key_of(params)]
            started = time.perf_counter()
            outputs.append(call(params))
            seconds.append(time.perf_counter() - started)
        print(f"  round {round_number + 1}/{repeats} of {len(settings)} settings", flush=True)
    return measured


def latency_row(seconds: list[float]) -> dict[str, Any]:
    """``latency_p50_s`` (median, s), the repeat count and every repeat (s)."""
    return {
        "latency_p50_s": statistics.median(seconds),
        "repeats": len(seconds),
        "latency_min_s": min(seconds),
        "latency_max_s": max(seconds),
        "latency_s": seconds,
    }


def sweep_rows(
    base: dict[str, Any], sweeps: dict[str, tuple[str, list[Any]]], measured: dict[str, dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """For each sweep, one row per value: the knob, its value, whether it is the base's, and its measurement."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for sweep, (knob, values) in sweeps.items():
        rows[sweep] = [
            {"knob": knob, "value": value, "is_base": value == base[knob], **measured[key_of({**base, knob: value})]}
            for value in values
        ]
        for row in rows[sweep]:
            print(f"  {sweep:<11}{knob} = {row['value']!s:<12}{row['latency_p50_s']:>9.3f} s  (n={row['repeats']})")
    return rows


def wan_benchmark(warmup: int, repeats: int) -> dict[str, Any]:
    """Wan tiny (random weights, seed 0, fp32) latency per sweep, and PSNR against the uncached base video."""
    from tuner.adapters.factories.diffusers_video import make_video_pipeline
    from tuner.adapters.factories.wan.knobs import CACHE_DEFAULTS, CACHES

    spec = yaml.safe_load(WAN_SPEC.read_text())
    inputs = dict(spec["inputs"])
    started = time.perf_counter()
    model = make_video_pipeline(weights="random", architecture="tiny", device="cpu", seed=0)
    model.load({"precision": "fp32"})
    load_s = time.perf_counter() - started
    counts = compute_counters(model.pipe.transformer)

    def call(params: dict[str, Any]) -> tuple[np.ndarray, dict[str, int]]:
        counts.clear()  # a cache's hooks are swapped when the method changes (about 1 ms)
        video = model.run(params, inputs).video
        assert video is not None
        return video, dict(counts)

    print(f"Wan tiny (diffusers WanPipeline, random weights, fp32), loaded in {load_s:.1f} s")
    sweeps = {**WAN_SWEEPS, "cache": ("cache", list(CACHES))}
    raw = interleaved(sweep_settings(WAN_BASE, sweeps), call, warmup, repeats)
    measured = {
        key: {
            **latency_row(seconds),
            "repeats_identical": all(np.array_equal(v, outputs[0][0]) for v, _ in outputs),
            "video_shape": list(outputs[0][0].shape),
            "computed_per_video": outputs[0][1],
        }
        for key, (seconds, outputs) in raw.items()
    }
    rows = sweep_rows(WAN_BASE, sweeps, measured)
    reference = raw[key_of(WAN_BASE)][1][0][0]
    for sweep in ("steps", "cfg", "cache"):
        for row in rows[sweep]:
            row["psnr_db_vs_base"] = psnr_db(raw[key_of({**WAN_BASE, row["knob"]: row["value"]})][1][0][0], reference)
    for row in rows["cache"]:
        row["cache_knob"] = CACHE_DEFAULTS.get(str(row["value"]), {})
    return {
        "factory": "tuner.adapters.factories.diffusers_video:make_video_pipeline",
        "weights_identity": model.weights_identity({}),
        "precision": "fp32",
        "load_s": load_s,
        "inputs": inputs,
        "base": WAN_BASE,
        "sweeps": rows,
        "derived": wan_derived(rows),
    }


def compute_counters(transformer: Any) -> dict[str, int]:
    """Counts, per call, of the denoiser's calls and of what its last block really computed: its
    self-attention (``attn1.to_q``) and feed-forward (``ffn.net.2``) projections. No cache hook wraps these
    leaf layers, so a call a cache served from its store is not counted (the denoiser call is)."""
    counts: dict[str, int] = {}
    last = transformer.blocks[-1]

    def counter(key: str) -> Callable[..., None]:
        def count(*_: Any) -> None:
            counts[key] = counts.get(key, 0) + 1

        return count

    for name, module in (
        ("denoiser_calls", transformer),
        ("last_block_self_attention", last.attn1.to_q),
        ("last_block_feed_forward", last.ffn.net[2]),
    ):
        module.register_forward_hook(counter(name))
    return counts


def wan_derived(rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Ratios and slopes read off the sweeps (s, or a plain ratio)."""
    steps = {row["value"]: row["latency_p50_s"] for row in rows["steps"]}
    frames = {row["value"]: row["latency_p50_s"] for row in rows["frames"]}
    cfg = {row["value"]: row["latency_p50_s"] for row in rows["cfg"]}
    none = next(row["latency_p50_s"] for row in rows["cache"] if row["value"] == "none")
    per_step = (steps[16] - steps[2]) / 14
    return {
        "seconds_per_step": per_step,
        "seconds_outside_steps": steps[2] - 2 * per_step,
        "steps_16_over_2": steps[16] / steps[2],
        "frames_33_over_5": frames[33] / frames[5],
        "cfg_on_over_off": cfg[5.0] / cfg[1.0],
        "cache_speedup": {row["value"]: none / row["latency_p50_s"] for row in rows["cache"]},
    }


def omni_benchmark(warmup: int, repeats: int) -> dict[str, Any]:
    """Omni thinker tiny (random weights, seed 0, fp32, sdpa) latency per sweep, token counts, ms per new token."""
    from tuner.adapters.factories.transformers_av import make_omni_thinker

    spec = yaml.safe_load(OMNI_SPEC.read_text())
    inputs = dict(spec["inputs"])
    started = time.perf_counter()
    model = make_omni_thinker(weights="random", architecture="tiny", seed=0, device="cpu")
    model.load({"precision": "fp32", "attn_implementation": "sdpa"})
    load_s = time.perf_counter() - started
    settings = sweep_settings(OMNI_BASE, OMNI_SWEEPS)
    views: dict[str, Any] = {}
    for params in settings:  # one factory object per setting, all on the one network: each keeps its own inputs
        views[key_of(params)] = make_omni_thinker(weights="random", architecture="tiny", seed=0, device="cpu")
        views[key_of(params)].model = model.model

    print(f"Omni thinker tiny (transformers, random weights, fp32, sdpa), loaded in {load_s:.1f} s")
    raw = interleaved(settings, lambda params: views[key_of(params)].run(params, inputs), warmup, repeats)
    measured: dict[str, dict[str, Any]] = {}
    for key, (seconds, outputs) in raw.items():
        first = outputs[0]
        row = {
            **latency_row(seconds),
            "repeats_identical": all(o.text == first.text for o in outputs),
            **{name: int(first.counters[name]) for name in OMNI_COUNTERS},
        }
        measured[key] = {**row, "ms_per_new_token": 1000 * row["latency_p50_s"] / row["new_tokens"]}
    rows = sweep_rows(OMNI_BASE, OMNI_SWEEPS, measured)
    base_answer = raw[key_of(OMNI_BASE)][1][0].text
    for sweep in ("use_cache", "beams"):
        for row in rows[sweep]:
            row["answer_equals_base"] = raw[key_of({**OMNI_BASE, row["knob"]: row["value"]})][1][0].text == base_answer
    tokens = {row["value"]: row["latency_p50_s"] for row in rows["new_tokens"]}
    per_token = (tokens[32] - tokens[4]) / 28
    by = {sweep: {row["value"]: row["latency_p50_s"] for row in rows[sweep]} for sweep in rows}
    derived = {
        "seconds_per_new_token": per_token,
        "seconds_before_decoding": tokens[4] - 4 * per_token,
        "tokens_32_over_4": tokens[32] / tokens[4],
        "frames_16_over_4": by["frames"][16] / by["frames"][4],
        "pixels_25088_over_6272": by["pixels"][25088] / by["pixels"][6272],
        "audio_8_over_0": by["audio"][8.0] / by["audio"][0.0],
        "no_cache_over_cache": by["use_cache"][False] / by["use_cache"][True],
        "beams_2_over_1": by["beams"][2] / by["beams"][1],
    }
    return {
        "factory": "tuner.adapters.factories.transformers_av:make_omni_thinker",
        "weights_identity": model.weights_identity({}),
        "precision": "fp32",
        "attn_implementation": "sdpa",
        "load_s": load_s,
        "inputs": inputs,
        "base": OMNI_BASE,
        "sweeps": rows,
        "derived": derived,
    }


def parameter_counts() -> dict[str, Any]:
    """Parameters of every preset, counted on the meta device: Wan denoiser(s) and VAE, the Omni thinker."""
    from diffusers import AutoencoderKLWan

    from tuner.adapters.factories import omni_presets
    from tuner.adapters.factories.wan import presets as wan_presets

    wan: dict[str, dict[str, int]] = {}
    for name, preset in wan_presets.PRESETS.items():
        with torch.device("meta"):
            vae = AutoencoderKLWan(**dict(preset.vae))
        wan[name] = {
            "denoisers": preset.experts,
            "denoiser_parameters": wan_presets.parameter_count(preset),
            "vae_parameters": sum(p.numel() for p in vae.parameters()),
        }
    omni = {name: omni_presets.parameter_count(name) for name in omni_presets.PRESETS}
    return {"wan": wan, "omni_thinker": omni}


def provenance(threads: int) -> dict[str, Any]:
    """Machine facts, library versions and the git state of this checkout."""

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else f"unavailable ({done.stderr.strip()})"

    idle, usable = idle_cores()
    return {
        "machine": {
            **host_fingerprint(),
            "idle_cores_at_start": idle,
            "cores_usable": usable,
            "torch_threads": threads,
        },
        "versions": {name: version(name) for name in ("torch", "diffusers", "transformers", "numpy", "tuner")},
        "git": {
            "commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        },
    }


def command_line() -> str:
    """How this run was started, from the repository root (the interpreter relative to it when inside)."""
    python = Path(sys.executable)
    shown = str(python.relative_to(ROOT)) if python.is_relative_to(ROOT) else str(python)
    return " ".join(["HF_HUB_OFFLINE=1", shlex.quote(shown), *map(shlex.quote, sys.argv)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per setting (>= 1)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per setting")
    parser.add_argument("--quick", action="store_true", help="2 repeats per setting")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "models_cpu.json")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else args.repeats
    if args.warmup < 1 or repeats < 1 or args.threads < 1:
        parser.error("--warmup, --repeats and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "bench/models_cpu.py",
        "command": command_line(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **provenance(args.threads),
        "warmup": args.warmup,
        "repeats": repeats,
        "note": "random weights: PSNR is agreement with the uncached output of an untrained network, not quality",
    }
    result["parameter_counts"] = parameter_counts()
    result["wan"] = wan_benchmark(args.warmup, repeats)
    result["omni"] = omni_benchmark(args.warmup, repeats)
    result["wall_s"] = time.perf_counter() - started
    print("\n" + "\n".join(report_lines(result)))  # what docs/models.md shows: bench/models_cpu_report.py
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\n{result['wall_s']:.0f} s in all; raw result: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
