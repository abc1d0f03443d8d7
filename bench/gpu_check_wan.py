"""The ``wan21_diffusers`` phase of ``bench/gpu_check.py``: a real diffusers Wan pipeline on the GPU.

Wan2.1-T2V-1.3B (diffusers ``WanPipeline``, the architecture of the published config,
1,418,996,800 parameters) built with seeded RANDOM weights by
:mod:`tuner.adapters.factories.diffusers_video`, bf16 with the VAE in fp32, at 480p
(832x480), run as a tuner study in one warm worker. Nothing downloads: diffusers
travels as a wheel (``bench/gpu_wheels.sh``), the image has transformers.

The settings are one knob at a time from a base (:data:`CUDA_SETTINGS`, in order of
value; the study stops at its wall-time share of the phase's cap, so a slow GPU loses
the last ones first): denoising steps 4 -> 8, classifier-free guidance off, frames
9 -> 17, batch 1 -> 2, First-Block Cache (:data:`FBC_THRESHOLD`) at 8 steps, VAE tiling. Figures per trial:
outcome, p50 latency (s) and its CV, allocator and device peak (GB, 1e9 bytes), PSNR
(dB) of the video against the reference setting's at the trial's frame count (``reference_shape.per``: the
17-frame setting against the reference setting at 17 frames, measured once) -- with random weights that is
agreement with the reference output of an untrained network, not image quality -- and
the weights identity and ``compared_with`` (the reference trial and its shape) the trial recorded;
``like_with_like`` is true when every OK trial was compared with a reference of its own frame count (the
phase is ``ok`` only then). One prompt (the shipped spec's first case): the phase times settings within the
device budget. Ratios: each variant's p50 over the base setting's (or, for the cache, over 8 steps uncached).

Every setting is measured with ``measurement.bare_twin`` (:data:`MEASUREMENT`): after the tuner's repeats the
same loaded call is timed bare in the same worker (CUDA events, no sampler), giving per setting ``bare_p50_s``
and ``twin_ratio`` (tuner p50 / bare p50; the goal :data:`TWIN_GOAL` is a figure, ``twin_within_goal``, not a
condition of ``ok``, which needs a ratio for every OK setting). The memory sampler's NVML reads give per setting
``gpu_util_mean_pct`` / ``gpu_util_peak_pct`` (%), ``gpu_power_mean_w`` (W, the window's mean, warm-up
included) and ``energy_per_output_j``, here ``joules_per_video`` (the pipeline's outputs are videos: mean power
x p50 / videos per call); on the CPU each is unavailable with NVML's reason, kept under ``unavailable``.

``--cpu-plumbing`` runs the same code on the ``tiny`` architecture at 32x32 with three
settings (fp32): it proves the phase's plumbing and diffusers under the image guard, and
says nothing about a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from gpu_check_study import PhaseContext, failures, metric_figures, study_rows

ROOT = Path(__file__).resolve().parents[1]

BASE: dict[str, Any] = {
    "num_frames": 9,
    "num_inference_steps": 4,
    "guidance_scale": 5.0,
    "batch_size": 1,
    "cache": "none",
    "cache_threshold": 0.1,
    "vae_tiling": False,
}
"""The base setting of the GPU run (480p, bf16); every variant changes one knob of it."""

FBC_THRESHOLD = 0.4
"""First-Block Cache threshold of the cache setting: the random 1.3B network skipped no block at 0.1 or 0.2
(64x64, 5 frames, 8 steps, bf16 on a CPU), most at 0.4; a cache that never skips measures only its overhead."""

CUDA_SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("reference: more steps", {**BASE, "num_inference_steps": 8}),
    ("base", BASE),
    ("cfg off", {**BASE, "guidance_scale": 1.0}),
    ("fbc at more steps", {**BASE, "num_inference_steps": 8, "cache": "fbc", "cache_threshold": FBC_THRESHOLD}),
    ("17 frames", {**BASE, "num_frames": 17}),
    ("batch 2", {**BASE, "batch_size": 2}),
    ("vae tiling", {**BASE, "vae_tiling": True}),
)
"""(label, setting) in the order they run: the first is the spec's reference (8 steps), the second its baseline
(the base: 4 steps)."""

CPU_SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (  # 2 and 1 steps, 5 frames: plumbing only
    ("reference: more steps", {**BASE, "num_frames": 5, "num_inference_steps": 2}),
    ("base", {**BASE, "num_frames": 5, "num_inference_steps": 1}),
    ("cfg off", {**BASE, "num_frames": 5, "num_inference_steps": 1, "guidance_scale": 1.0}),
)

MEASUREMENT = {"warmup": 1, "min_repeats": 2, "max_repeats": 2, "bare_twin": 2}
"""The phase's measurement block: the tuner's repeats, then as many bare calls (the calls of the 7 settings and the
17-frame reference fit the phase's cap on a GPU with room left)."""
TWIN_GOAL = 1.03
"""Largest tuner / bare p50 ratio the tuner aims at on a GPU (issue 40)."""
TRIAL_METRICS = (
    "latency_p50_s",
    "latency_cv",
    "bare_p50_s",
    "twin_ratio",
    "peak_vram_gb",
    "peak_vram_device_gb",
    "psnr_db",
    "gpu_util_mean_pct",
    "gpu_util_peak_pct",
    "gpu_power_mean_w",
    "energy_per_output_j",
    "gpu_sm_clock_mean_mhz",
    "prepare_s",
    "model_s",
    "postprocess_s",
    "outside_spans_s",
)  # the spans: where the p50 goes
"""The metrics each trial's figures keep (with the reason of those unavailable)."""

RATIOS: dict[str, tuple[str, str]] = {
    "more_steps_over_base": ("reference: more steps", "base"),
    "cfg_on_over_off": ("base", "cfg off"),
    "frames_17_over_9": ("17 frames", "base"),
    "batch_2_over_1": ("batch 2", "base"),
    "fbc_over_uncached_at_more_steps": ("fbc at more steps", "reference: more steps"),
    "vae_tiling_over_untiled": ("vae tiling", "base"),
}
"""Figure name -> (numerator label, denominator label), both p50 latencies of this run (None when either
setting did not run OK, or is not in the run: the CPU run has the first two and CFG off)."""


def _categorical(values: list[Any]) -> dict[str, Any]:
    return {"type": "categorical", "choices": sorted(set(values), key=str)}


def wan_phase_spec(cuda: bool) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """The phase's study spec (from ``search_spaces/wan_t2v_diffusers.yaml``) and its labelled settings, each a
    full parameter dict. Every parameter is a categorical over the values the settings use."""
    spec = yaml.safe_load((ROOT / "search_spaces" / "wan_t2v_diffusers.yaml").read_text())
    height, width = (480, 832) if cuda else (32, 32)
    fixed = {
        "height": height,
        "width": width,
        "flow_shift": 3.0,
        "scheduler": "unipc",
        "attention_backend": "native",
        "offload": "none",
        "compile": "none",
        "precision": "bf16" if cuda else "fp32",
    }
    settings = [(label, {**fixed, **values}) for label, values in (CUDA_SETTINGS if cuda else CPU_SETTINGS)]
    spec.pop("derived", None)
    first = spec.pop("cases", [{}])[0]  # one prompt: the phase times settings within the device budget
    spec["inputs"].update({key: value for key, value in first.items() if key != "name"})
    spec["parameters"] = {name: _categorical([s[name] for _, s in settings]) for name in settings[0][1]}
    spec["workload"].update(device="cuda" if cuda else "cpu", timeout_s=120 if cuda else 60, timeout_mode="fixed")
    spec["workload"]["python"]["kwargs"].update(
        architecture="wan2.1-t2v-1.3b" if cuda else "tiny", device="cuda" if cuda else "cpu"
    )
    if not cuda:
        spec["workload"]["torch_threads"] = 1
    spec["reference"], spec["baseline"] = settings[0][1], settings[1][1]
    spec["reference_shape"] = {"per": ["num_frames"]}  # the 17-frame setting against a 17-frame reference (issue 39)
    spec["objectives"] = [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "psnr_db", "direction": "maximize"},
    ]
    spec["report"] = ["peak_vram_gb"]
    spec["measurement"] = dict(MEASUREMENT)
    shapes = {s["num_frames"] for _, s in settings} - {settings[0][1]["num_frames"]}  # each: one reference run more
    spec["budget"], spec["sampler"] = {"trials": len(settings) + len(shapes)}, {"name": "random"}
    return spec, settings


def _label_of(params: dict[str, Any], settings: list[tuple[str, dict[str, Any]]]) -> str | None:
    for label, setting in settings:
        if all(params.get(name) == value for name, value in setting.items()):
            return label
    return None


def phase_wan21_diffusers(ctx: PhaseContext) -> dict[str, Any]:
    """Run the phase (module docs); ``ok`` when every setting ran OK with a twin ratio, each against a reference
    of its own frame count (and, on CUDA, CFG off was faster)."""
    spec, settings = wan_phase_spec(ctx.cuda)
    rows = [
        r
        for r in study_rows(
            spec, ctx, "gpu_wan21_diffusers", share=0.85, enqueue=[setting for _, setting in settings[2:]]
        )
        if r["duplicate_of"] is None
    ]
    trials = []
    for r in rows:
        figures = metric_figures(r, TRIAL_METRICS)
        figures["joules_per_video"] = figures.pop("energy_per_output_j")  # the outputs are videos
        if "energy_per_output_j" in figures["unavailable"]:
            figures["unavailable"]["joules_per_video"] = figures["unavailable"].pop("energy_per_output_j")
        trials.append(
            {
                "number": r["number"],
                "setting": _label_of(r["params"], settings),
                "outcome": r["outcome"],
                "reason": r["reason"],
                "params": r["params"],
                "weights": r.get("weights_identity"),
                "compared_with": r.get("compared_with"),
                "startup_s": r["phases_s"].get("startup"),
                **figures,
            }
        )
    ok_rows = [t for t in trials if t["outcome"] == "OK"]
    p50 = {t["setting"]: t["latency_p50_s"] for t in ok_rows if t["setting"]}
    ratios = {
        name: (p50[top] / p50[bottom] if p50.get(top) and p50.get(bottom) else None)
        for name, (top, bottom) in RATIOS.items()
    }
    like_with_like = all(
        (t["compared_with"] or {}).get("shape") == {"num_frames": t["params"]["num_frames"]} for t in ok_rows
    )  # each video against a reference of its frames
    twins = [t["twin_ratio"] for t in ok_rows]
    twin_worst = max(twins) if twins and None not in twins else None
    cfg = ratios["cfg_on_over_off"]
    return {
        "device": ctx.device,
        "architecture": spec["workload"]["python"]["kwargs"]["architecture"],
        "resolution": f"{settings[0][1]['width']}x{settings[0][1]['height']}",
        "precision": settings[0][1]["precision"],
        "measurement": spec["measurement"],
        "trials": trials,
        "ok_trials": len(ok_rows),
        "settings_planned": len(settings),
        "latency_ratios": ratios,
        "twin_ratios": {t["setting"]: t["twin_ratio"] for t in ok_rows},
        "twin_ratio_worst": twin_worst,
        "twin_goal": TWIN_GOAL,
        "twin_within_goal": None if twin_worst is None else twin_worst <= TWIN_GOAL,
        "joules_per_video": {t["setting"]: t["joules_per_video"] for t in ok_rows},
        "activity_recorded": bool(ok_rows)
        and all(t["gpu_util_mean_pct"] is not None and t["gpu_power_mean_w"] is not None for t in ok_rows),
        "failures": failures(rows),
        "like_with_like": like_with_like,
        "quality_note": "psnr_db with random weights: agreement with the reference setting's output of an "
        "untrained network, not image quality",
        "ok": len(ok_rows) == len(settings)
        and like_with_like
        and twin_worst is not None
        and (not ctx.cuda or (cfg is not None and cfg > 1.0)),
    }
