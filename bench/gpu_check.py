"""One prepared run of every CUDA path of the tuner on a real GPU; figures to ``gpu_check.json``.

Run through ``bench/gpu_check.sh`` (which finds the interpreter, says so in one
line and exits 0 on a machine without an NVIDIA GPU, and bounds the whole run
to 8 minutes). The checks, each in its own study under a temporary home,
through the public API (``tuner.create_study`` / ``tuner.run_study``, real
fork-server workers), each recorded even when it fails:

1. ``gpu_tests`` -- ``pytest -m gpu`` (pass / fail / skip counts).
2. ``latency_truth`` -- :class:`gpu_check_workloads.CudaSleepWorkload` at 20 and
   100 ms: the reported ``latency_p50_s`` against the kernel's CUDA-event
   duration; ``error`` = |reported - true| / true (target <= 2 %).
3. ``vram_spike`` -- :class:`gpu_check_workloads.VramSpikeWorkload` holding 2 GiB
   for 50 ms, next to a 0 GiB baseline: caught when the allocator peak
   (``peak_vram_gb``) and the NVML process-tree peak above the baseline
   (``peak_vram_nvml_gb``) both reach 90 % of 2 GiB.
4. ``avatar_cuda`` -- the avatar demo on ``cuda`` (objectives latency and PSNR),
   precision fp32 / bf16 / fp16, streams 1 / 2 and 4 / 8 steps in the space (grid), 8
   trials; the reference (fp32) and the baseline (the same setting in bf16) give the
   fp32 / bf16 latency ratio, "distinct" when it is off 1 by more than 3 % and twice
   the larger latency CV.
5. ``slot_pinning`` -- the Live Avatar stand-in study (``command.gpus: 1``): every
   trial ran on a one-GPU slot whose ``CUDA_VISIBLE_DEVICES`` the worker saw.

``--cpu-plumbing`` runs checks 2, 4 and 5 on the CPU with host stand-ins (a sleep, 3
small trials) so a test exercises this script's own code without a GPU; its figures
say nothing about a GPU. Units: ms milliseconds, GB 1e9 bytes, GiB 2**30 bytes.
Usage: ``python bench/gpu_check.py [--out DIR] [--cpu-plumbing]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
LATENCY_TARGET = 0.02
SPIKE_GIB = 2.0
SPIKE_MS = 50
GIB_IN_GB = 2**30 / 1e9


def study_metrics(spec: dict[str, Any], home: Path, name: str) -> list[dict[str, Any]]:
    """Run ``spec`` as study ``name`` under ``home`` (no MLflow); one dict per trial: number, role,
    outcome, reason, params, slot, env's CUDA_VISIBLE_DEVICES, metric values (None when unavailable)."""
    import tuner

    home.mkdir(parents=True, exist_ok=True)
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    opened = tuner.create_study(path, study_name=name, home=home)
    tuner.run_study(opened, home=home, use_mlflow=False)
    rows = []
    for trial in opened.study.get_trials():
        attrs = trial.user_attrs
        rows.append({"number": trial.number, "role": attrs.get("role"), "outcome": attrs.get("outcome"),
                     "reason": attrs.get("reason"), "params": dict(trial.params), "slot": attrs.get("slot"),
                     "cuda_visible_devices": (attrs.get("env") or {}).get("CUDA_VISIBLE_DEVICES"),
                     "metrics": {key: entry.get("value") for key, entry in dict(attrs.get("metrics", {})).items()},
                     "duplicate_of": attrs.get("duplicate_of")})
    return rows


def check_gpu_tests(timeout_s: float) -> dict[str, Any]:
    """``pytest -m gpu`` over the whole suite; the summary line's counts."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)
    tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
    counts = {kind: int(number) for number, kind in re.findall(r"(\d+) (passed|failed|skipped|error|deselected)",
                                                                 tail[-1] if tail else "")}
    return {"exit_code": done.returncode, "counts": counts, "tail": tail,
            "ok": done.returncode == 0 and counts.get("passed", 0) > 0}


def check_latency_truth(home: Path, device: str) -> dict[str, Any]:
    """Reported p50 against the kernel's own duration, at two kernel lengths."""
    workload = "CudaSleepWorkload" if device == "cuda" else "HostSleepWorkload"
    spec = {"name": "gpu_latency_truth", "workload": {"class": f"gpu_check_workloads:{workload}", "device": device,
                                                      "timeout_s": 120},
            "parameters": {"kernel_ms": {"type": "categorical", "choices": [20, 100]}},
            "objectives": [{"metric": "latency_p50_s", "direction": "minimize"}],
            "measurement": {"warmup": 2, "min_repeats": 7, "max_repeats": 15, "cv_target": 0.01},
            "budget": {"trials": 2}, "sampler": {"name": "grid"}, "seed": 0}
    rows = study_metrics(spec, home, "gpu_latency_truth")
    figures = []
    for row in rows:
        reported, true = row["metrics"].get("latency_p50_s"), row["metrics"].get("count_kernel_ms_previous")
        error = abs(reported * 1000 - true) / true if reported is not None and true else None
        figures.append({"kernel_ms": row["params"].get("kernel_ms"), "outcome": row["outcome"],
                        "reported_ms": None if reported is None else reported * 1000, "true_ms": true,
                        "error": error, "cv": row["metrics"].get("latency_cv"), "reason": row["reason"]})
    errors = [f["error"] for f in figures]
    return {"trials": figures, "max_error": max(errors) if errors and None not in errors else None,
            "ok": bool(figures) and all(e is not None and e <= LATENCY_TARGET for e in errors)}


def check_vram_spike(home: Path) -> dict[str, Any]:
    """A 2 GiB, 50 ms spike against a 0 GiB baseline: allocator and NVML peaks."""
    spec = {"name": "gpu_vram_spike", "workload": {"class": "gpu_check_workloads:VramSpikeWorkload", "device": "cuda",
                                                   "timeout_s": 120},
            "parameters": {"spike_gib": {"type": "categorical", "choices": [0, SPIKE_GIB]},
                           "spike_ms": {"type": "categorical", "choices": [SPIKE_MS]}},
            "objectives": [{"metric": "latency_p50_s", "direction": "minimize"}],
            "measurement": {"warmup": 0, "min_repeats": 3, "max_repeats": 3},
            "budget": {"trials": 2}, "sampler": {"name": "grid"}, "seed": 0}
    rows = {float(row["params"]["spike_gib"]): row for row in study_metrics(spec, home, "gpu_vram_spike")}
    spike, base = rows.get(SPIKE_GIB), rows.get(0.0)
    want_gb = 0.9 * SPIKE_GIB * GIB_IN_GB

    def value(row: dict[str, Any] | None, name: str) -> float | None:
        return None if row is None else row["metrics"].get(name)

    allocator, nvml, nvml_base = value(spike, "peak_vram_gb"), value(spike, "peak_vram_nvml_gb"), value(
        base, "peak_vram_nvml_gb")
    nvml_rise = nvml - nvml_base if nvml is not None and nvml_base is not None else None
    return {"spike_gib": SPIKE_GIB, "spike_ms": SPIKE_MS, "allocator_peak_gb": allocator,
            "nvml_peak_gb": nvml, "nvml_baseline_gb": nvml_base, "nvml_rise_gb": nvml_rise,
            "nvml_sample_hz": value(spike, "memory_sample_hz"),
            "outcomes": {str(k): (r["outcome"], r["reason"]) for k, r in rows.items()},
            "caught_by_allocator": allocator is not None and allocator >= want_gb,
            "caught_by_nvml": nvml_rise is not None and nvml_rise >= want_gb,
            "ok": allocator is not None and allocator >= want_gb and nvml_rise is not None and nvml_rise >= want_gb}


def avatar_spec(device: str) -> dict[str, Any]:
    """The avatar demo reduced to precision x streams x steps (cuda) or a 3-trial CPU run (plumbing)."""
    spec = yaml.safe_load((ROOT / "search_spaces" / "avatar_demo.yaml").read_text())
    cuda = device == "cuda"
    resolution, batch = (96, 4) if cuda else (32, 1)
    spec["name"] = "gpu_avatar"
    spec["workload"].update(device=device, timeout_s=300)
    spec["parameters"] = {
        "infer_frames": {"type": "categorical", "choices": [24 if cuda else 6]},
        "sample_steps": {"type": "categorical", "choices": [4, 8] if cuda else [1]},
        "resolution": {"type": "categorical", "choices": [resolution]},
        "batch_size": {"type": "categorical", "choices": [batch]},
        "precision": {"type": "categorical", "choices": ["fp32", "bf16", "fp16"] if cuda else ["fp32", "bf16"]},
        "streams": {"type": "categorical", "choices": [1, 2]},
        "online_decode": {"type": "categorical", "choices": [True]}}
    fixed = {"infer_frames": 24 if cuda else 6, "sample_steps": 8 if cuda else 1, "resolution": resolution,
             "batch_size": batch, "streams": 1, "online_decode": True}
    spec["reference"] = {**fixed, "precision": "fp32"}
    spec["baseline"] = {**fixed, "precision": "bf16"}
    spec["budget"] = {"trials": 8 if cuda else 3}
    spec["sampler"] = {"name": "grid"}
    # PSNR and no report metrics: the perceptual models (stlpips, 64 MB of wheels) are not needed on a lent
    # GPU machine that must receive its missing packages with the working tree (bench/gpu_wheels.sh)
    spec["objectives"] = [{"metric": "latency_p50_s", "direction": "minimize"},
                          {"metric": "psnr_db", "direction": "maximize"}]
    spec["constraints"], spec["report"] = [], []
    if not cuda:
        spec["measurement"] = {"warmup": 0, "min_repeats": 1, "max_repeats": 1}
    return spec


def check_avatar(home: Path, device: str) -> dict[str, Any]:
    """The reduced avatar study: outcomes, latency per setting, bf16 against fp32 at the same setting."""
    rows = study_metrics(avatar_spec(device), home, "gpu_avatar")
    measured = [r for r in rows if r["duplicate_of"] is None]
    trials = [{"number": r["number"], "role": r["role"], "outcome": r["outcome"], "reason": r["reason"],
               "precision": r["params"].get("precision"), "streams": r["params"].get("streams"),
               "sample_steps": r["params"].get("sample_steps"), "latency_p50_s": r["metrics"].get("latency_p50_s"),
               "latency_cv": r["metrics"].get("latency_cv"), "peak_vram_gb": r["metrics"].get("peak_vram_gb"),
               "psnr_db": r["metrics"].get("psnr_db")} for r in measured]
    by_role = {t["role"]: t for t in trials if t["role"] in ("reference", "baseline")}
    fp32, bf16 = (by_role.get("reference") or {}).get("latency_p50_s"), (by_role.get("baseline") or {}).get(
        "latency_p50_s")
    ratio = fp32 / bf16 if fp32 and bf16 else None
    spread = max((by_role[r].get("latency_cv") or 0.0) for r in by_role) if by_role else 0.0
    distinct = ratio is not None and abs(ratio - 1.0) > max(0.03, 2 * spread)
    ok_trials = sum(1 for t in trials if t["outcome"] == "OK")
    want = 8 if device == "cuda" else 3
    return {"device": device, "trials": trials, "ok_trials": ok_trials, "fp32_over_bf16_latency": ratio,
            "bf16_distinct_from_fp32": distinct, "ok": ok_trials >= want and (distinct or device != "cuda")}


def check_slot_pinning(home: Path, device: str) -> dict[str, Any]:
    """The Live Avatar stand-in with ``gpus: 1``: each trial's slot and the CUDA_VISIBLE_DEVICES it ran with."""
    from tuner.testing.audio import write_tone_wav

    spec = yaml.safe_load((ROOT / "search_spaces" / "live_avatar.yaml").read_text())
    argv = spec["workload"]["command"]["argv"]
    argv[argv.index("{checkout}/minimal_inference/s2v_streaming_interact.py")] = str(
        ROOT / "standins" / "live_avatar_s2v_standin.py")
    argv[0:1] = [sys.executable, str(ROOT / "standins" / "torchrun_standin.py")]
    spec["workload"].update(device=device, timeout_s=120)
    spec["workload"]["command"]["gpus"] = 1
    home.mkdir(parents=True, exist_ok=True)
    audio = write_tone_wav(home / "speech.wav", 2.0, 16000)
    spec["inputs"].update(checkout=str(home), ckpt_dir=str(home / "ckpt"), audio=str(audio), audio_seconds=2.0)
    spec["name"] = "gpu_slot_pinning"
    spec["objectives"] = [{"metric": "latency_p50_s", "direction": "minimize"},
                          {"metric": "psnr_db", "direction": "maximize"}]
    spec["constraints"], spec["report"] = [], []
    spec["budget"], spec["sampler"] = {"trials": 3}, {"name": "random"}
    rows = [r for r in study_metrics(spec, home, "gpu_slot_pinning") if r["duplicate_of"] is None]
    ran = [r for r in rows if r["outcome"] in ("OK", "OOM")]  # the stand-in simulates OOM for large settings
    pinned = [r for r in ran if r["cuda_visible_devices"] not in (None, "") and "," not in str(r["cuda_visible_devices"])]
    trials = [{k: r[k] for k in ("number", "outcome", "reason", "slot", "cuda_visible_devices")} for r in rows]
    return {"device": device, "trials": trials, "ran_trials": len(ran), "pinned_trials": len(pinned),
            "ok": len(rows) >= 3 and len(ran) == len(rows) and (len(pinned) == len(ran) or device != "cuda")}


def device_facts() -> dict[str, Any]:
    """The GPU and stack the figures come from (``tuner.gpu.fingerprint`` and torch)."""
    import torch

    from tuner.gpu import fingerprint

    facts: dict[str, Any] = {"fingerprint": fingerprint(), "torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        facts["device_name"] = torch.cuda.get_device_name(0)
    return facts


def run_check(name: str, check: Callable[[], dict[str, Any]], report: dict[str, Any]) -> None:
    """Run one check, store its figures (or the error) under ``name``, print one line."""
    started = time.perf_counter()
    try:
        result = check()
    except Exception as error:  # noqa: BLE001 - a failing check is a figure too; the others still run
        result = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
    result["seconds"] = round(time.perf_counter() - started, 1)
    report["checks"][name] = result
    shown = {k: v for k, v in result.items() if not isinstance(v, (list, dict)) and k != "traceback"}
    print(f"gpu_check: {name}: {'OK' if result.get('ok') else 'FAILED'} {json.dumps(shown, default=str)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="Directory of gpu_check.json (default $OUT, else "
                                                                  "./gpu_check_out).")
    parser.add_argument("--cpu-plumbing", action="store_true", help="Run the script's plumbing on the CPU (tests).")
    args = parser.parse_args(argv)
    out = args.out or Path(os.environ.get("OUT") or "gpu_check_out")
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), str(ROOT), os.environ.get("PYTHONPATH")]))
    sys.path[:0] = [str(BENCH), str(ROOT)]
    import torch

    device = "cpu" if args.cpu_plumbing else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: an NVIDIA GPU is present but torch {torch.__version__} sees no CUDA device; nothing checked")
        return 1
    report: dict[str, Any] = {"mode": "cpu-plumbing" if args.cpu_plumbing else "gpu",
                              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "device": device_facts(), "checks": {}}
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as scratch:
        home = Path(scratch)
        if not args.cpu_plumbing:
            run_check("gpu_tests", lambda: check_gpu_tests(150.0), report)
        run_check("latency_truth", lambda: check_latency_truth(home / "latency", device), report)
        if not args.cpu_plumbing:
            run_check("vram_spike", lambda: check_vram_spike(home / "spike"), report)
        run_check("avatar_cuda" if device == "cuda" else "avatar_cpu", lambda: check_avatar(home / "avatar", device),
                  report)
        run_check("slot_pinning", lambda: check_slot_pinning(home / "slots", device), report)
    report["ok"] = all(check.get("ok") for check in report["checks"].values())
    path = out / "gpu_check.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    failed = [name for name, check in report["checks"].items() if not check.get("ok")]
    print(f"gpu_check: {'all checks OK' if not failed else 'FAILED: ' + ', '.join(failed)}; figures in {path}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
