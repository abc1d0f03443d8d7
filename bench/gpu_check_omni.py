"""The ``av_llm_omni`` phase of ``bench/gpu_check.py``: the audio-visual LLM at full size on the GPU.

The thinker of Qwen2.5-Omni-7B (transformers' ``Qwen2_5OmniThinkerForConditionalGeneration``: vision and audio
encoders and the 7.6 B decoder, 8.93 B parameters) with seeded RANDOM weights in bf16, built directly on the GPU
by :mod:`tuner.adapters.factories.transformers_av` (``omni_presets.build_random_thinker``: transformers' own
initialisation under ``torch.device("cuda")``, so the 17.9 GB of weights are drawn on the device and never
exist as a 36 GB fp32 host copy), run as a tuner study of ``search_spaces/av_omni.yaml`` in one warm worker: the
model is built once, by the first trial (its ``startup_s``). Nothing downloads: transformers is in the GPU image,
the inputs (a synthetic clip's patchified frames, log-mel audio, seeded prompt ids) are built as the Omni
processor builds them. Random weights answer with noise, so every answer is decoded to exactly
``max_new_tokens`` (the factory's ``fixed_length``): the cost of each setting is the real one.

The settings (:data:`CUDA_SETTINGS`, in order of value; the study stops at its share of the phase's cap) span
fps x max_frames x max_new_tokens on a 16 s clip (360 x 640, at most 200,704 pixels per frame, 10 s of audio):
the reference (2 fps, 32 frames, 64 tokens), a base (1 fps, 16 frames, 32 tokens), a short answer (8 tokens),
more frames (2 fps, 32), the frame cap binding (2 fps, cap 16) and fewer frames (0.5 fps: 8). Figures per
setting: outcome, p50 (s) and CV, the prompt's video / audio tokens, new tokens per second, allocator and
device peaks (GB), ``text_f1`` against the reference answer (random weights: agreement of an untrained
network's token ids, not answer quality), GPU utilization, power and ``energy_per_output_j`` (J per answer;
unavailable with the reason on a CPU); ratios of p50s and the decode cost per token from the base and the short
answer.

``--cpu-plumbing`` runs the same code with the ``tiny`` preset (39.6 M parameters) as a stand-in, fp32, on a 4 s
168 x 224 clip with three settings: the phase's plumbing and transformers under the image guard, nothing
about a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from gpu_check_study import PhaseContext, failures, metric_figures, study_rows

ROOT = Path(__file__).resolve().parents[1]

ARCHITECTURE = {"cuda": "qwen2.5-omni-7b", "cpu": "tiny"}
"""The thinker preset per device: the full-size 7B on a GPU, the tiny stand-in on the CPU."""

INPUTS = {
    "cuda": {
        "video_seconds": 16.0,
        "source_fps": 25.0,
        "video_height": 360,
        "video_width": 640,
        "min_pixels": 100352,
        "prompt_tokens": 32,
        "media_seed": 0,
    },
    "cpu": {
        "video_seconds": 4.0,
        "source_fps": 25.0,
        "video_height": 168,
        "video_width": 224,
        "min_pixels": 3136,
        "prompt_tokens": 16,
        "media_seed": 0,
    },
}
"""The synthetic clip and prompt per device (one clip / question pair)."""

_FIXED = {"num_beams": 1, "use_cache": True, "batch_size": 1, "attn_implementation": "sdpa"}
_CUDA = {**_FIXED, "max_pixels": 200704, "audio_seconds": 10.0, "precision": "bf16"}
_CPU = {**_FIXED, "max_pixels": 12544, "audio_seconds": 2.0, "precision": "fp32"}

CUDA_SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("reference: more frames, longer answer", {**_CUDA, "video_fps": 2.0, "max_frames": 32, "max_new_tokens": 64}),
    ("base", {**_CUDA, "video_fps": 1.0, "max_frames": 16, "max_new_tokens": 32}),
    ("short answer", {**_CUDA, "video_fps": 1.0, "max_frames": 16, "max_new_tokens": 8}),
    ("more frames", {**_CUDA, "video_fps": 2.0, "max_frames": 32, "max_new_tokens": 32}),
    ("frame cap binds", {**_CUDA, "video_fps": 2.0, "max_frames": 16, "max_new_tokens": 32}),
    ("fewer frames", {**_CUDA, "video_fps": 0.5, "max_frames": 16, "max_new_tokens": 32}),
)
"""(label, setting) in the order they run: the first is the spec's reference, the second its baseline."""

CPU_SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (  # 8 / 4 frames, 8 / 2 tokens: plumbing only
    ("reference: more frames, longer answer", {**_CPU, "video_fps": 2.0, "max_frames": 8, "max_new_tokens": 8}),
    ("base", {**_CPU, "video_fps": 1.0, "max_frames": 4, "max_new_tokens": 8}),
    ("short answer", {**_CPU, "video_fps": 1.0, "max_frames": 4, "max_new_tokens": 2}),
)

MEASUREMENT: dict[str, dict[str, Any]] = {
    "cuda": {"warmup": 1, "min_repeats": 2, "max_repeats": 3, "cv_target": 0.02},
    "cpu": {"warmup": 1, "min_repeats": 1, "max_repeats": 1},
}
"""The phase's measurement block per device."""

RATIOS: dict[str, tuple[str, str]] = {
    "longer_answer_over_short": ("base", "short answer"),
    "more_frames_over_base": ("more frames", "base"),
    "fewer_frames_over_base": ("fewer frames", "base"),
    "frame_cap_binds_over_base": ("frame cap binds", "base"),
}
"""Figure name -> (numerator label, denominator label), both p50 latencies (None when either did not run OK or is
not in the run: the CPU run has the first only)."""

TRIAL_METRICS = (
    "latency_p50_s",
    "latency_cv",
    "count_frames",
    "count_video_tokens",
    "count_audio_tokens",
    "count_prompt_tokens",
    "count_new_tokens",
    "count_max_new_tokens_hit",
    "peak_vram_gb",
    "peak_vram_device_gb",
    "peak_rss_gb",
    "text_f1",
    "gpu_util_mean_pct",
    "gpu_util_peak_pct",
    "gpu_power_mean_w",
    "energy_per_output_j",
)
"""The metrics each trial's figures keep (with the reason of those unavailable)."""


def _categorical(values: list[Any]) -> dict[str, Any]:
    return {"type": "categorical", "choices": sorted(set(values), key=str)}


def omni_phase_spec(cuda: bool) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """The phase's study spec (from ``search_spaces/av_omni.yaml``) and its labelled settings, each a full parameter
    dict; every parameter is a categorical over the values the settings use."""
    device = "cuda" if cuda else "cpu"
    spec = yaml.safe_load((ROOT / "search_spaces" / "av_omni.yaml").read_text())
    settings = list(CUDA_SETTINGS if cuda else CPU_SETTINGS)
    spec.pop("cases", None)  # one clip / question pair: the phase times settings within the device budget
    spec["inputs"] = dict(INPUTS[device])
    spec["parameters"] = {name: _categorical([s[name] for _, s in settings]) for name in settings[0][1]}
    spec["workload"].update(device=device, timeout_s=120 if cuda else 60, timeout_mode="fixed")
    spec["workload"]["python"]["kwargs"].update(architecture=ARCHITECTURE[device], device=device)
    if not cuda:
        spec["workload"]["torch_threads"] = 1
    spec["reference"], spec["baseline"] = settings[0][1], settings[1][1]
    spec["objectives"] = [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "text_f1", "direction": "maximize"},
    ]
    spec["constraints"], spec["report"] = [], ["peak_vram_gb", "count_video_tokens", "count_new_tokens"]
    spec["measurement"] = dict(MEASUREMENT[device])
    spec["budget"], spec["sampler"] = {"trials": len(settings)}, {"name": "random"}
    spec.pop("export", None)
    return spec, settings


def _label_of(params: dict[str, Any], settings: list[tuple[str, dict[str, Any]]]) -> str | None:
    for label, setting in settings:
        if all(params.get(name) == value for name, value in setting.items()):
            return label
    return None


def _trial(row: dict[str, Any], settings: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    figures = metric_figures(row, TRIAL_METRICS)
    p50, new_tokens = figures["latency_p50_s"], figures["count_new_tokens"]
    return {
        "number": row["number"],
        "setting": _label_of(row["params"], settings),
        "outcome": row["outcome"],
        "reason": row["reason"],
        **{k: row["params"].get(k) for k in ("video_fps", "max_frames", "max_new_tokens")},
        "weights": row.get("weights_identity"),
        "startup_s": row["phases_s"].get("startup"),
        "new_tokens_per_s": new_tokens / p50 if p50 and new_tokens is not None else None,
        **figures,
    }


def phase_av_llm_omni(ctx: PhaseContext) -> dict[str, Any]:
    """Run the phase (module docs); ``ok`` when every setting ran OK, each prompt held video and audio tokens and
    each answer was as long as asked (a random network's answer is decoded to ``max_new_tokens``)."""
    spec, settings = omni_phase_spec(ctx.cuda)
    rows = [
        r
        for r in study_rows(spec, ctx, "gpu_av_llm_omni", share=0.8, enqueue=[setting for _, setting in settings[2:]])
        if r["duplicate_of"] is None
    ]
    trials = [_trial(row, settings) for row in rows]
    ok_rows = [t for t in trials if t["outcome"] == "OK"]
    p50 = {t["setting"]: t["latency_p50_s"] for t in ok_rows if t["setting"]}
    ratios = {
        name: (p50[top] / p50[bottom] if p50.get(top) and p50.get(bottom) else None)
        for name, (top, bottom) in RATIOS.items()
    }
    by_label = dict(settings)
    tokens = by_label["base"]["max_new_tokens"] - by_label["short answer"]["max_new_tokens"]
    decode = (
        (p50["base"] - p50["short answer"]) / tokens * 1000 if p50.get("base") and p50.get("short answer") else None
    )
    full_answers = all(
        t["count_new_tokens"] == t["max_new_tokens"]
        and (t["count_video_tokens"] or 0) > 0
        and (t["count_audio_tokens"] or 0) > 0
        for t in ok_rows
    )
    reference = next((t for t in trials if t["setting"] == settings[0][0]), {})
    return {
        "device": ctx.device,
        "architecture": ARCHITECTURE[ctx.device],
        "stand_in": None if ctx.cuda else "the tiny thinker preset (39.6 M parameters) on the CPU: plumbing only",
        "precision": settings[0][1]["precision"],
        "inputs": spec["inputs"],
        "measurement": spec["measurement"],
        "load_s": reference.get("startup_s"),
        "trials": trials,
        "ok_trials": len(ok_rows),
        "settings_planned": len(settings),
        "latency_ratios": ratios,
        "decode_ms_per_token": decode,
        "full_answers": full_answers,
        "failures": failures(rows),
        "quality_note": "text_f1 with random weights: agreement with the reference setting's token ids from an "
        "untrained network, not answer quality",
        "ok": len(ok_rows) == len(settings) and full_answers,
    }
