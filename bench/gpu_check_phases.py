"""The phases of ``bench/gpu_check.py``: what each one runs and the figures it keeps.

:data:`gpu_check_plan.PLAN` lists them in order of value, with their caps and the prepared run each
belongs to; ``gpu_check.py`` runs each one in a child process of its own (``python
bench/gpu_check_phases.py PHASE ...``, this module's :func:`main`) that it kills,
workers and all, at the phase's cap. A phase returns ``{"ok": bool, ...figures}``;
the child writes it (or the error and traceback) to ``--result`` as JSON.

Every study runs through the public API (``tuner.create_study`` / ``tuner.run_study``,
no MLflow, no memory model: every setting runs) under the phase's home, which is
kept. ``device`` is ``cuda``, or ``cpu`` for ``--cpu-plumbing``, where host
stand-ins replace the CUDA workloads (a sleep, host memory) so the script's own code
runs without a GPU; such figures say nothing about a GPU. Units: ms milliseconds,
s seconds, GB 1e9 bytes, GiB 2**30 bytes, Hz samples per second.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpu_check_avatar import phase_avatar, phase_slot_pinning
from gpu_check_omni import phase_av_llm_omni
from gpu_check_study import PhaseContext, die_with_parent, failures, study_rows, write_json_atomically
from gpu_check_wan import phase_wan21_diffusers

ROOT = Path(__file__).resolve().parents[1]
LATENCY_TARGET = 0.02
"""Largest relative error of a reported p50 latency against the kernel's CUDA-event duration."""
GIB_IN_GB = 2**30 / 1e9
SPIKE = {"cuda": 2.0, "cpu": 0.25}
"""GiB held by the ``vram_spike`` phase's spike (host memory on the CPU)."""
CARRY = {"cuda": (8.0, 1.0), "cpu": (0.5, 0.05)}
"""GiB of the carry-over probe's large then small trial."""


def _sleep_workload(ctx: PhaseContext, timeout_s: float = 60) -> dict[str, Any]:
    name = "CudaSleepWorkload" if ctx.cuda else "HostSleepWorkload"
    return {
        "class": f"gpu_check_workloads:{name}",
        "device": ctx.device,
        "timeout_s": timeout_s,
        "timeout_mode": "fixed",
    }


def phase_device_facts(ctx: PhaseContext) -> dict[str, Any]:
    """NVML's view of the GPUs and of the processes on them (``coordinator_on_gpu``: the check's own
    coordinator holds a CUDA context, which it must not), and torch's build, without a CUDA context of
    its own (``PYTORCH_NVML_BASED_CUDA_CHECK=1``: ``is_available`` asks NVML)."""
    from tuner.gpu import (
        NvmlUnavailable,
        all_device_handles,
        device_process_memory,
        fingerprint,
        list_gpus,
        nvml_session,
    )

    facts: dict[str, Any] = {
        "fingerprint": fingerprint(),
        "gpus": [asdict(gpu) for gpu in list_gpus()],
        "python": sys.version.split()[0],
    }
    try:
        with nvml_session() as pynvml:
            on_gpus = [
                {str(pid): used for pid, used in device_process_memory(pynvml, h).items()}
                for h in all_device_handles(pynvml)
            ]
        facts["processes_on_gpus"] = on_gpus
        facts["coordinator_on_gpu"] = any(str(os.getppid()) in device for device in on_gpus)
    except NvmlUnavailable as error:
        facts["processes_on_gpus"] = f"unavailable ({error})"
    git = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    facts["git_commit"] = git.stdout.strip() if git.returncode == 0 else f"unavailable ({git.stderr.strip()[:200]})"
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        import torch
    except ImportError as error:
        return {**facts, "ok": False, "error": f"torch cannot be imported: {error}"}
    facts.update(
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        torch_sees_cuda=torch.cuda.is_available(),
        torch_device_count=torch.cuda.device_count(),
        cuda_initialised=torch.cuda.is_initialized(),
    )
    facts["ok"] = (
        not facts["cuda_initialised"]
        and not facts.get("coordinator_on_gpu")
        and (not ctx.cuda or (bool(facts["gpus"]) and facts["torch_sees_cuda"]))
    )
    return facts


def phase_latency_truth(ctx: PhaseContext) -> dict[str, Any]:
    """Reported p50 against the kernel's own duration (counter ``kernel_ms_previous``) at 20 and 100 ms."""
    spec = {
        "workload": _sleep_workload(ctx),
        "parameters": {"kernel_ms": {"type": "categorical", "choices": [20, 100]}},
        "objectives": [{"metric": "latency_p50_s", "direction": "minimize"}],
        "measurement": {"warmup": 2, "min_repeats": 7, "max_repeats": 15, "cv_target": 0.01},
        "budget": {"trials": 2},
        "sampler": {"name": "grid"},
        "seed": 0,
    }
    rows = study_rows(spec, ctx, "gpu_latency_truth")
    trials = []
    for row in rows:
        reported, true = row["metrics"].get("latency_p50_s"), row["metrics"].get("count_kernel_ms_previous")
        error = abs(reported * 1000 - true) / true if reported is not None and true else None
        trials.append(
            {
                "kernel_ms": row["params"].get("kernel_ms"),
                "outcome": row["outcome"],
                "reported_ms": None if reported is None else reported * 1000,
                "true_ms": true,
                "error": error,
                "cv": row["metrics"].get("latency_cv"),
                "reason": row["reason"],
            }
        )
    errors = [t["error"] for t in trials]
    return {
        "trials": trials,
        "failures": failures(rows),
        "target": LATENCY_TARGET,
        "max_error": max(errors) if errors and None not in errors else None,
        **latency_verdict(errors, ctx.cuda),
    }


def latency_verdict(errors: list[float | None], cuda: bool) -> dict[str, bool]:
    """``ok`` of ``latency_truth`` from its two relative errors: on a GPU each within :data:`LATENCY_TARGET`
    (``judged``); on host stand-ins only that both were measured, since a sleep's overshoot there is the
    host scheduler's (several percent on a loaded machine), not the tuner's timing."""
    measured = len(errors) == 2 and None not in errors
    return {"judged": cuda, "ok": measured and (not cuda or all(e is not None and e <= LATENCY_TARGET for e in errors))}


def _spike_workload(ctx: PhaseContext) -> dict[str, Any]:
    name = "VramSpikeWorkload" if ctx.cuda else "HostMemorySpikeWorkload"
    return {"class": f"gpu_check_workloads:{name}", "device": ctx.device, "timeout_s": 60, "timeout_mode": "fixed"}


def phase_vram_spike(ctx: PhaseContext) -> dict[str, Any]:
    """A spike of ``SPIKE`` GiB for 50 ms against a 0 GiB baseline: allocator and NVML peaks (RSS on the CPU)."""
    spike_gib = SPIKE[ctx.device]
    spec = {
        "workload": _spike_workload(ctx),
        "parameters": {
            "spike_gib": {"type": "categorical", "choices": [0, spike_gib]},
            "spike_ms": {"type": "categorical", "choices": [50]},
        },
        "objectives": [{"metric": "latency_p50_s", "direction": "minimize"}],
        "measurement": {"warmup": 0, "min_repeats": 3, "max_repeats": 3},
        "budget": {"trials": 2},
        "sampler": {"name": "grid"},
        "seed": 0,
    }
    rows = study_rows(spec, ctx, "gpu_vram_spike")
    by_size = {float(row["params"]["spike_gib"]): row["metrics"] for row in rows}
    spike, base = by_size.get(spike_gib, {}), by_size.get(0.0, {})
    want_gb = 0.9 * spike_gib * GIB_IN_GB

    def rise(name: str) -> float | None:
        return spike[name] - base[name] if spike.get(name) is not None and base.get(name) is not None else None

    figures = {
        "spike_gib": spike_gib,
        "spike_ms": 50,
        "allocator_peak_gb": spike.get("peak_vram_gb"),
        "nvml_peak_gb": spike.get("peak_vram_nvml_gb"),
        "nvml_rise_gb": rise("peak_vram_nvml_gb"),
        "rss_rise_gb": rise("peak_rss_gb"),
        "sample_hz": spike.get("memory_sample_hz"),
        "failures": failures(rows),
    }
    caught = [figures["allocator_peak_gb"], figures["nvml_rise_gb"]] if ctx.cuda else [figures["rss_rise_gb"]]
    return {**figures, "ok": len(rows) == 2 and all(v is not None and v >= want_gb for v in caught)}


def phase_carry_over(ctx: PhaseContext) -> dict[str, Any]:
    """One warm worker: a large trial (the reference), then a small one (the baseline); the small one's
    reserved and NVML peaks (RSS on the CPU) must be under half the large one's. The spike's block stays
    in the caching allocator (``release: false``), as a model's would."""
    large, small = CARRY[ctx.device]
    fixed = {"spike_ms": 50, "release": False}
    spec = {
        "workload": {**_spike_workload(ctx), "worker": "warm"},
        "parameters": {
            "spike_gib": {"type": "categorical", "choices": [large, small]},
            "spike_ms": {"type": "categorical", "choices": [50]},
            "release": {"type": "categorical", "choices": [False]},
        },
        "objectives": [{"metric": "latency_p50_s", "direction": "minimize"}],
        "measurement": {"warmup": 0, "min_repeats": 3, "max_repeats": 3},
        "reference": {"spike_gib": large, **fixed},
        "baseline": {"spike_gib": small, **fixed},
        "budget": {"trials": 2},
        "sampler": {"name": "grid"},
        "seed": 0,
    }
    rows = study_rows(spec, ctx, "gpu_carry_over")
    names = ("peak_vram_gb", "peak_vram_reserved_gb", "peak_vram_nvml_gb", "peak_rss_gb")
    trials = [
        {
            "number": r["number"],
            "role": r["role"],
            "spike_gib": r["params"].get("spike_gib"),
            "outcome": r["outcome"],
            "warm_worker_pid": r["warm_worker_pid"],
            **{n: r["metrics"].get(n) for n in names},
        }
        for r in rows
    ]
    first = next((t for t in trials if t["role"] == "reference"), {})
    second = next((t for t in trials if t["role"] == "baseline"), {})
    compared = ("peak_vram_reserved_gb", "peak_vram_nvml_gb") if ctx.cuda else ("peak_rss_gb",)
    ratios = {n: second[n] / first[n] if second.get(n) is not None and first.get(n) else None for n in compared}
    one_worker = first.get("warm_worker_pid") is not None and first.get("warm_worker_pid") == second.get(
        "warm_worker_pid"
    )
    return {
        "large_gib": large,
        "small_gib": small,
        "trials": trials,
        "one_worker": one_worker,
        "small_over_large": ratios,
        "failures": failures(rows),
        "ok": one_worker and all(v is not None and v < 0.5 for v in ratios.values()),
    }


def phase_sampler_cost(ctx: PhaseContext) -> dict[str, Any]:
    """The same sleep workload with ``measurement.memory_sample_hz`` 0 (off), then 100: p50 per setting and
    the on/off ratio, for one long kernel (GPU-bound) and many short ones (bound by the launch path)."""
    from tuner.spec.measure.measurement import MeasurementSpec

    if "memory_sample_hz" not in MeasurementSpec.model_fields:
        return {
            "ok": False,
            "error": "this tuner's spec has no measurement.memory_sample_hz (the switch of the "
            "process-tree sampler); nothing measured",
        }
    launches = 4000 if ctx.cuda else 50  # 5 µs kernels: the launch path, not the GPU, sets the pace
    spec = {
        "workload": _sleep_workload(ctx),
        "parameters": {
            "kernel_ms": {"type": "categorical", "choices": [20]},
            "launches": {"type": "categorical", "choices": [1, launches]},
        },
        "objectives": [{"metric": "latency_p50_s", "direction": "minimize"}],
        "budget": {"trials": 2},
        "sampler": {"name": "grid"},
        "seed": 0,
    }
    p50: dict[str, dict[int, float | None]] = {}
    rows_all: list[dict[str, Any]] = []
    achieved: dict[str, Any] = {}
    for hz in (0, 100):
        measurement = {"warmup": 2, "min_repeats": 10, "max_repeats": 20, "cv_target": 0.01, "memory_sample_hz": hz}
        rows = study_rows({**spec, "measurement": measurement}, ctx, f"gpu_sampler_{hz}hz", share=0.35)
        rows_all += rows
        p50[str(hz)] = {int(r["params"]["launches"]): r["metrics"].get("latency_p50_s") for r in rows}
        achieved[str(hz)] = [r["metrics"].get("memory_sample_hz") for r in rows]
    ratio: dict[str, float | None] = {}
    for n in (1, launches):
        on, off = p50["100"].get(n), p50["0"].get(n)
        ratio[str(n)] = on / off if on and off else None
    measured = [v for v in ratio.values() if v is not None]
    return {
        "p50_s": p50,
        "on_over_off": ratio,
        "achieved_sample_hz": achieved,
        "order": "0 Hz first, then 100 Hz",
        "max_cost": max(measured) - 1 if measured else None,
        "cost_within_2_percent": bool(measured) and max(measured) <= 1.02,
        "failures": failures(rows_all),
        "ok": len(measured) == 2,
    }


def phase_gpu_tests(ctx: PhaseContext) -> dict[str, Any]:
    """``pytest -m gpu`` on the test files that mark a GPU test (the rest of the suite imports packages the
    GPU machine lacks); the summary line's counts. On the CPU every one of them skips."""
    files = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if "pytest.mark.gpu" in path.read_text(errors="replace")
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-m",
        "gpu",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(ROOT),
        "--continue-on-collection-errors",
        *files,
    ]
    try:
        done = subprocess.run(
            command,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=max(5.0, ctx.cap_s - 10),
            check=False,
            preexec_fn=die_with_parent,
        )
    except subprocess.TimeoutExpired as error:
        output = (
            (error.stdout or b"").decode(errors="replace") if isinstance(error.stdout, bytes) else (error.stdout or "")
        )
        return {
            "files": files,
            "ok": False,
            "error": f"pytest ran past {ctx.cap_s - 10:.0f} s",
            "tail": output.strip().splitlines()[-15:],
        }
    tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
    counts = {
        kind: int(number)
        for number, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", tail[-1] if tail else "")
    }
    bad = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
    return {
        "files": files,
        "exit_code": done.returncode,
        "counts": counts,
        "tail": tail,
        "ok": bad == 0
        and (done.returncode == 0 and counts.get("passed", 0) > 0 if ctx.cuda else done.returncode in (0, 5)),
    }


PHASES: dict[str, Callable[[PhaseContext], dict[str, Any]]] = {
    "device_facts": phase_device_facts,
    "latency_truth": phase_latency_truth,
    "vram_spike": phase_vram_spike,
    "carry_over": phase_carry_over,
    "sampler_cost": phase_sampler_cost,
    "avatar": phase_avatar,
    "wan21_diffusers": phase_wan21_diffusers,
    "av_llm_omni": phase_av_llm_omni,
    "slot_pinning": phase_slot_pinning,
    "gpu_tests": phase_gpu_tests,
}


def main(argv: list[str] | None = None) -> int:
    """Child entry: run one phase, write ``{"ok", "figures" | "error", "traceback", "seconds"}`` to --result."""
    parser = argparse.ArgumentParser(description="One phase of bench/gpu_check.py (run by it, in a child).")
    parser.add_argument("phase", choices=sorted(PHASES))
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--cap-s", type=float, required=True)
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
    started = time.perf_counter()
    try:
        figures = PHASES[args.phase](PhaseContext(args.device, args.home, args.cap_s))
        result: dict[str, Any] = {"ok": bool(figures.pop("ok", False)), "figures": figures}
        if "error" in figures:
            result["error"] = figures.pop("error")
    except Exception as error:  # noqa: BLE001 - a failing phase is a figure too
        result = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
    result["child_seconds"] = round(time.perf_counter() - started, 1)
    write_json_atomically(args.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
