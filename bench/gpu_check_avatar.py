"""The ``avatar`` and ``slot_pinning`` phases of ``bench/gpu_check.py``: the Live Avatar demo as a tuner study,
and one GPU slot per concurrent torchrun trial.

``avatar`` runs the avatar demo spec reduced to precision x streams x steps (6 trials on CUDA, 3 small ones on
the CPU) and keeps, per trial, :data:`AVATAR_METRICS`. ``slot_pinning`` runs the Live Avatar spec's stand-in
CLI (``standins/live_avatar_s2v_standin.py``, launched through ``standins/torchrun_standin.py``: SIMULATED
commands, said so in their names) in concurrent trials and reads which device each was pinned to. Both run
through the public API under the phase's home, as every phase does (``bench/gpu_check_phases.py``: the
contract, the units, the CPU plumbing mode).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from gpu_check_study import PhaseContext, failures, study_rows

ROOT = Path(__file__).resolve().parents[1]


AVATAR_METRICS = (
    "latency_p50_s",
    "latency_cv",
    "peak_vram_gb",
    "psnr_db",
    "sustained_throughput_per_hour",
    "sustained_latency_p95_s",
    "gpu_util_mean_pct",
    "model_s",
    "postprocess_s",
    "time_to_first_chunk_s",
    "real_time_factor",
)
"""The figures each avatar trial keeps: one-call latency, the sustained probe, utilization, spans, streaming."""


def phase_avatar(ctx: PhaseContext) -> dict[str, Any]:
    """The avatar demo reduced to precision x streams x steps (6 trials on CUDA, 3 small ones on the CPU):
    outcomes, latency per setting, bf16 (baseline) against fp32 (reference) at the same setting; each trial also
    runs the sustained-load probe (``measurement.sustained``, one stream for 2 s) and reports its spans."""
    spec = yaml.safe_load((ROOT / "search_spaces" / "avatar_demo.yaml").read_text())
    frames, steps, resolution, batch = (24, [4, 8], 96, 4) if ctx.cuda else (6, [1], 32, 1)
    spec["workload"].update(device=ctx.device, timeout_s=60, timeout_mode="fixed")
    spec["parameters"] = {
        "infer_frames": {"type": "categorical", "choices": [frames]},
        "sample_steps": {"type": "categorical", "choices": steps},
        "resolution": {"type": "categorical", "choices": [resolution]},
        "batch_size": {"type": "categorical", "choices": [batch]},
        "precision": {"type": "categorical", "choices": ["fp32", "bf16", "fp16"] if ctx.cuda else ["fp32", "bf16"]},
        "streams": {"type": "categorical", "choices": [1, 2]},
        "online_decode": {"type": "categorical", "choices": [True]},
    }
    fixed = {
        "infer_frames": frames,
        "sample_steps": steps[-1],
        "resolution": resolution,
        "batch_size": batch,
        "streams": 1,
        "online_decode": True,
    }
    spec["reference"], spec["baseline"] = {**fixed, "precision": "fp32"}, {**fixed, "precision": "bf16"}
    want = 6 if ctx.cuda else 3
    spec["budget"], spec["sampler"] = {"trials": want}, {"name": "grid"}
    # PSNR and no report metrics: no perceptual model (stlpips, 64 MB of wheels) travels to the GPU machine
    spec["objectives"] = [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "psnr_db", "direction": "maximize"},
    ]
    spec["constraints"], spec["report"] = [], []
    if not ctx.cuda:
        spec["measurement"] = {"warmup": 0, "min_repeats": 1, "max_repeats": 1}
    # the sustained-load probe: each setting driven back to back for a short window (one stream: the avatar's
    # calls share state), its throughput per hour beside the one-call figures, utilization under load
    spec["measurement"] = {
        **spec.get("measurement", {}),
        "sustained": {"streams": [1], "duration_s": 2.0 if ctx.cuda else 0.3},
    }
    rows = [r for r in study_rows(spec, ctx, "gpu_avatar") if r["duplicate_of"] is None]
    trials = [
        {
            "number": r["number"],
            "role": r["role"],
            "outcome": r["outcome"],
            "reason": r["reason"],
            **{k: r["params"].get(k) for k in ("precision", "streams", "sample_steps")},
            **{k: r["metrics"].get(k) for k in AVATAR_METRICS},
        }
        for r in rows
    ]
    by_role = {t["role"]: t for t in trials if t["role"] in ("reference", "baseline")}
    fp32, bf16 = (
        (by_role.get("reference") or {}).get("latency_p50_s"),
        (by_role.get("baseline") or {}).get("latency_p50_s"),
    )
    ratio = fp32 / bf16 if fp32 and bf16 else None
    spread = max((t.get("latency_cv") or 0.0) for t in by_role.values()) if by_role else 0.0
    distinct = ratio is not None and abs(ratio - 1.0) > max(0.03, 2 * spread)
    ok_trials = sum(1 for t in trials if t["outcome"] == "OK")
    return {
        "device": ctx.device,
        "trials": trials,
        "ok_trials": ok_trials,
        "fp32_over_bf16_latency": ratio,
        "bf16_distinct_from_fp32": distinct,
        "failures": failures(rows),
        "ok": ok_trials >= want and (distinct or not ctx.cuda),
    }


def _pinned_index(row: dict[str, Any]) -> str | None:
    """The one device a trial's slot exposed (``CUDA_VISIBLE_DEVICES`` of its record or environment)."""
    used = row["device_used"] if isinstance(row["device_used"], dict) else {}
    value = used.get("cuda_visible_devices", row["cuda_visible_devices"])
    return str(value) if value not in (None, "") and "," not in str(value) else None


def phase_slot_pinning(ctx: PhaseContext) -> dict[str, Any]:
    """The Live Avatar stand-in with ``gpus: 1`` (writes .npz, no PyAV): each trial's slot, the device it
    really used (trial attribute ``device_used``, read defensively) and the CUDA_VISIBLE_DEVICES it saw."""
    from tuner.testing.audio import write_tone_wav

    spec = yaml.safe_load((ROOT / "search_spaces" / "live_avatar.yaml").read_text())
    command = spec["workload"]["command"]
    argv = command["argv"]
    argv[argv.index("{checkout}/minimal_inference/s2v_streaming_interact.py")] = str(
        ROOT / "standins" / "live_avatar_s2v_standin.py"
    )
    argv[0:1] = [sys.executable, str(ROOT / "standins" / "torchrun_standin.py")]
    argv[argv.index("out.mp4")] = "out.npz"
    command["outputs"]["video"] = "out.npz"
    spec["workload"].update(device=ctx.device, timeout_s=60, timeout_mode="fixed")
    command["gpus"] = 1
    ctx.home.mkdir(parents=True, exist_ok=True)
    audio = write_tone_wav(ctx.home / "speech.wav", 2.0, 16000)
    spec["inputs"].update(checkout=str(ctx.home), ckpt_dir=str(ctx.home / "ckpt"), audio=str(audio), audio_seconds=2.0)
    spec["objectives"] = [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "psnr_db", "direction": "maximize"},
    ]
    spec["constraints"], spec["report"] = [], []
    spec["budget"], spec["sampler"] = {"trials": 3}, {"name": "random"}
    rows = [r for r in study_rows(spec, ctx, "gpu_slot_pinning") if r["duplicate_of"] is None]
    ran = [r for r in rows if r["outcome"] in ("OK", "OOM")]  # the stand-in simulates OOM for large settings
    trials = []
    for r in rows:
        used = r["device_used"] if isinstance(r["device_used"], dict) else {}
        nvml = used.get("nvml_indices", "not recorded")
        pinned = _pinned_index(r)
        trials.append(
            {
                "number": r["number"],
                "outcome": r["outcome"],
                "reason": r["reason"],
                "slot": r["slot"],
                "cuda_visible_devices": r["cuda_visible_devices"],
                "pinned_to": pinned,
                "cuda_device_order": used.get("cuda_device_order", "not recorded"),
                "torch_device": used.get("torch_device", "not recorded"),
                "nvml_indices": nvml,
                "on_its_device": not isinstance(nvml, list) or all(str(i) == pinned for i in nvml),
            }
        )
    pinned_ok = [
        t for t in trials if t["outcome"] in ("OK", "OOM") and t["pinned_to"] is not None and t["on_its_device"]
    ]
    return {
        "device": ctx.device,
        "trials": trials,
        "ran_trials": len(ran),
        "pinned_trials": len(pinned_ok),
        "device_used_recorded": sum(1 for r in rows if isinstance(r["device_used"], dict)),
        "failures": failures(rows),
        "ok": len(rows) >= 3 and len(ran) == len(rows) and (len(pinned_ok) == len(ran) or not ctx.cuda),
    }
