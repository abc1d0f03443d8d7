"""The memory model (issue 14) on the Live Avatar stand-in: the same study with and without it.

The shipped ``search_spaces/live_avatar.yaml`` is pointed at the SIMULATED stand-ins
(``standins/torchrun_standin.py`` + ``live_avatar_s2v_standin.py``) on the CPU, as the
adapter tests do. The stand-in estimates the memory the real 14B model would need for a
setting and dies with PyTorch's CUDA OOM past ``STANDIN_GPU_MEMORY_GB`` (the simulated
GPU, ``--gpu-memory-gb``, default 24 GB, an RTX 4090). Scenarios:

* ``oom``: the spec as shipped. On a CPU host its ``peak_vram_nvml_gb`` constraint is
  disabled (its bound needs ``gpu_memory_gb``): the model learns from OOM outcomes only.
* ``peaks``: a GPU's measured peaks, emulated: the stand-in holds
  ``STANDIN_HOST_MB_PER_GB`` MB of host memory per simulated GB (set here to
  :data:`MB_PER_GB`), so ``peak_rss_gb`` tracks the simulated VRAM, and the constraint
  ``0.85 x GPU`` is put on ``peak_rss_gb`` in those units (+ :data:`BASE_RSS_GB` for the
  processes themselves).
* ``warm``: as ``peaks``, warm-started from a finished study of the same spec on a larger
  simulated GPU (``--source-gpu-memory-gb``, default 32 GB): its front runs first, its
  OOMs and peaks are the model's prior. Both runs are warm-started; one has no model.

Each pair uses the same spec, seed, sampler and budget and differs only in
``memory_model``. The default sampler is random: its proposals do not depend on what it
is told, so both runs walk the same sequence of settings and the model-on run simply gets
further down it (skips are free); with ``--sampler tpe`` the runs part ways at the first
differing value (latencies are noisy), so one pair says little. Printed, measured in this
one run (no timed assertion): trials run, OOM trials run, trials skipped as predicted OOM,
wrong skips (settings the stand-in's own estimate puts within 0.85 x the GPU), wall time,
front size and the front's hypervolume — latency (minimised) x PSNR to the
reference (maximised), normalised by the union of the pair's feasible points (reference
point: worst + 10 % of the range). Latency differences between stand-in settings are small
next to process-start noise, so the hypervolume moves by chance too; the OOM and skip
counts are the point.
Usage: ``python bench/memory_model.py [--trials 24] [--sampler random|tpe] [--scenario oom peaks warm]``: raw
figures to ``bench/results/memory_model.json``; ``--report`` prints the same table from them and runs nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import raw_results
import yaml
from raw_results import provenance

from tuner.testing.audio import write_tone_wav

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "standins"


def write_wav(path: Path, seconds: float, rate: int = 16000) -> Path:
    """A speech-like test tone (16-bit PCM mono): :func:`tuner.testing.audio.write_tone_wav`."""
    return write_tone_wav(path, seconds, rate)


MB_PER_GB = 64  # host MB the stand-in holds per simulated GB in the peaks / warm scenarios
BASE_RSS_GB = 0.18  # what torchrun's stand-in and the script hold besides (python, numpy, frames)


def emulated_limit_gb(gpu_memory_gb: float) -> float:
    """``0.85 x gpu_memory_gb`` simulated GB, as the peak_rss_gb the stand-in then holds (GB = 1e9 bytes)."""
    return round(0.85 * gpu_memory_gb * MB_PER_GB * 2**20 / 1e9 + BASE_RSS_GB, 3)


def standin_spec(directory: Path, trials: int, emulated_gpu_gb: float | None = None, sampler: str = "random") -> Path:
    """live_avatar.yaml on the stand-ins, on the CPU, latency x PSNR (as tests/adapters/adapter_helpers.py);
    with ``emulated_gpu_gb``, its memory constraint is on peak_rss_gb (the ``peaks`` scenario)."""
    spec: dict[str, Any] = yaml.safe_load((ROOT / "search_spaces" / "live_avatar.yaml").read_text())
    argv = spec["workload"]["command"]["argv"]
    argv[argv.index("{checkout}/minimal_inference/s2v_streaming_interact.py")] = str(
        STANDINS / "live_avatar_s2v_standin.py"
    )
    argv[0:1] = [sys.executable, str(STANDINS / "torchrun_standin.py")]
    spec["workload"].update(device="cpu", timeout_s=120)
    audio = write_wav(directory / "speech.wav", 2.0)
    spec["inputs"].update(
        checkout=str(directory), ckpt_dir=str(directory / "ckpt"), audio=str(audio), audio_seconds=2.0
    )
    spec["objectives"] = [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "psnr_db", "direction": "maximize"},
    ]
    if emulated_gpu_gb is not None:
        spec["constraints"] = [{"metric": "peak_rss_gb", "max": emulated_limit_gb(emulated_gpu_gb)}]
    spec["report"] = []
    spec["budget"] = {"trials": trials}
    spec["sampler"] = {"name": sampler}
    path = directory / f"live_avatar_standin_{emulated_gpu_gb or 'vram'}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_once(
    spec_path: Path, home: Path, name: str, memory_model: bool, gpu_memory_gb: float, warm_start: str | None = None
) -> dict[str, Any]:
    import tuner
    from tuner.pareto import front_trials, is_measured_feasible, minimised

    os.environ["STANDIN_GPU_MEMORY_GB"] = f"{gpu_memory_gb:g}"
    opened = tuner.create_study(spec_path, study_name=name, home=home, warm_start=warm_start)
    started = time.perf_counter()
    summary = tuner.run_study(opened, home=home, use_mlflow=False, memory_model=memory_model)
    elapsed = time.perf_counter() - started
    trials = opened.study.get_trials()
    directions = [d.name.lower() for d in opened.study.directions]
    ran = [t for t in trials if t.user_attrs.get("measured")]
    skipped = [t for t in trials if t.user_attrs.get("outcome") == "SKIPPED_PREDICTED_OOM"]
    return {
        "name": name,
        "memory_model": memory_model,
        "ran": len(ran),
        "wall_s": elapsed,
        "oom_run": sum(1 for t in ran if t.user_attrs.get("outcome") == "OOM"),
        "ok_run": sum(1 for t in ran if t.user_attrs.get("outcome") == "OK"),
        "skipped": len(skipped),
        "wrong": sum(1 for t in skipped if fits(t.params, gpu_memory_gb)),
        "recorded": summary.recorded,
        "stopped": summary.stopped_because,
        "feasible": [minimised(t.values, directions) for t in trials if is_measured_feasible(t)],
        "front": [minimised(t.values, directions) for t in front_trials(trials, directions)],
    }


def fits(params: dict[str, Any], gpu_memory_gb: float) -> bool:
    """Whether the stand-in's own estimate keeps ``params`` within 0.85 x the GPU (a skip of it was wrong)."""
    sys.path.insert(0, str(STANDINS))
    from _standin_common import simulated_vram_gb

    width, height = (int(v) for v in str(params["size"]).split("*"))
    needed = simulated_vram_gb(
        width, height, params["infer_frames"], params["offload_model"], params["offload_kv_cache"], params["fp8"]
    )
    return needed <= 0.85 * gpu_memory_gb


def normalised_hypervolumes(runs: list[dict[str, Any]]) -> list[float]:
    from tuner.pareto import hypervolume, hypervolume_reference

    union = [p for run in runs for p in run["feasible"]]
    if not union:
        return [0.0 for _ in runs]
    reference = hypervolume_reference(union)
    best = [min(column) for column in zip(*union)]
    box = float(np.prod([r - b for r, b in zip(reference, best)]))
    return [hypervolume(run["front"], reference) / box if box > 0 else 0.0 for run in runs]


def scenario(kind: str, directory: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The two runs (with and without the model) of one scenario."""
    home = directory / kind
    home.mkdir()
    if kind == "oom":
        os.environ.pop("STANDIN_HOST_MB_PER_GB", None)
        spec_path = standin_spec(home, args.trials, sampler=args.sampler)
        return [
            run_once(spec_path, home, f"{kind}_{name}", model, args.gpu_memory_gb)
            for name, model in (("with", True), ("without", False))
        ]
    os.environ["STANDIN_HOST_MB_PER_GB"] = str(MB_PER_GB)
    spec_path = standin_spec(home, args.trials, args.gpu_memory_gb, args.sampler)
    source = None
    if kind == "warm":
        source_spec = standin_spec(home, args.trials, args.source_gpu_memory_gb, args.sampler)
        run_once(source_spec, home, "source", True, args.source_gpu_memory_gb)
        source = "source"
    return [
        run_once(spec_path, home, f"{kind}_{name}", model, args.gpu_memory_gb, source)
        for name, model in (("with", True), ("without", False))
    ]


def report_lines(result: dict[str, Any]) -> list[str]:
    """The table docs/benchmarks.md quotes, from one run's figures (measured now or read back)."""
    lines = [
        provenance(result),
        "",
        f"Live Avatar stand-in on the CPU, {result['trials']} trials, {result['sampler']} sampler seed 420, "
        f"simulated GPU {result['gpu_memory_gb']:g} GB (warm start from {result['source_gpu_memory_gb']:g} GB); "
        f"wrong: a skipped setting the stand-in's own estimate puts within 0.85 x the GPU",
        "",
        "| run | ran | OK | OOM run | skipped | wrong | front | HV (norm.) | wall s | stopped |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in result["runs"]:
        lines.append(
            f"| {run['name'].replace('_', ', ')} | {run['ran']} | {run['ok_run']} | {run['oom_run']} | "
            f"{run['skipped']} | {run['wrong']} | {run['front_size']} | {run['hv_normalised']:.3f} | "
            f"{run['wall_s']:.1f} | {run['stopped']} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--gpu-memory-gb", type=float, default=24.0, help="The stand-in's simulated GPU memory.")
    parser.add_argument("--source-gpu-memory-gb", type=float, default=32.0, help="The warm start's simulated GPU.")
    parser.add_argument(
        "--sampler",
        choices=["random", "tpe"],
        default="random",
        help="random (default): both runs see the same proposals, so the counts differ only by the "
        "model; tpe: they part ways with the first different value told",
    )
    parser.add_argument("--keep", type=Path, default=None, help="Keep the studies in this (new) directory.")
    parser.add_argument("--scenario", nargs="+", choices=["oom", "peaks", "warm"], default=["oom", "peaks", "warm"])
    raw_results.main(parser, "memory_model.py", measure, report_lines)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every scenario's pair of runs; what :func:`report_lines` and the raw results file take."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tuner-memory-model-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for kind in args.scenario:
            runs = scenario(kind, root, args)
            for run, volume in zip(runs, normalised_hypervolumes(runs)):
                rows.append(
                    {
                        **{k: v for k, v in run.items() if k not in ("feasible", "front")},
                        "front_size": len(run["front"]),
                        "front": run["front"],
                        "hv_normalised": volume,
                    }
                )
                print(
                    f"{run['name']}: ran {run['ran']}, OOM {run['oom_run']}, skipped {run['skipped']}, "
                    f"HV {volume:.3f}, {run['wall_s']:.1f} s",
                    flush=True,
                )
    return {
        "trials": args.trials,
        "sampler": args.sampler,
        "gpu_memory_gb": args.gpu_memory_gb,
        "source_gpu_memory_gb": args.source_gpu_memory_gb,
        "runs": rows,
    }


if __name__ == "__main__":
    main()
