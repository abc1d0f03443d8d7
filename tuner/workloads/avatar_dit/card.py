"""Measure the avatar DiT for its model card: quality and cost per knob, as markdown.

Usage::

    python -m tuner.workloads.avatar_dit.card [--weights PATH] [--seeds N] [--repeats R] [--threads T]

Quality is measured on the held-out split (:data:`~.data.HELD_OUT_SEEDS`:
portrait and audio seeds never used in training) against the ground-truth
video of each (portrait, audio) pair at the presentation size, with the
project's evaluators: ST-LPIPS (AlexNet, :func:`tuner.evaluators.perceptual.stlpips_alex`),
PSNR / SSIM (:mod:`tuner.evaluators.video`, whole frame and mouth box), and the
lip-sync proxy (:mod:`tuner.evaluators.lipsync`) on the generated video with its own
audio and with the audio of another held-out pair (mismatched). Cost is
measured on this machine's CPU, each setting in a fresh process: median latency
of ``repeats`` timed runs after one warm-up, the process's RSS after ``setup``
and its peak over the warm-up and timed runs
(:class:`tuner.evaluators.memory.PeakMemoryMonitor`); their difference is the
generation's working memory.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import platform
import statistics
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from tuner.evaluators.lipsync import (
    frame_audio_rms,
    lag_correlation,
    mouth_aperture,
    mouth_box_from_fractions,
    sync_stats,
)
from tuner.evaluators.memory import PeakMemoryMonitor
from tuner.evaluators.perceptual import stlpips_alex
from tuner.evaluators.video import psnr_db, ssim
from tuner.workloads.avatar_dit.checkpoint import DEFAULT_WEIGHTS
from tuner.workloads.avatar_dit.data import HELD_OUT_SEEDS, ground_truth_video, mouth_box
from tuner.workloads.avatar_dit.inputs import AUDIO_RATE_HZ, synth_speech_audio
from tuner.workloads.avatar_dit.workload import AvatarDiTWorkload
from tuner.workloads.base import RunContext, WorkloadOutput

CARD_INPUTS: Mapping[str, Any] = {"audio_seconds": 3.0, "fps": 12, "output_size": 64}
"""Inputs of every measured run: 36 frames at 12 fps (enough for the lip-sync proxy's 31)."""


@dataclass(frozen=True)
class Quality:
    """Means over held-out pairs: ST-LPIPS (1, lower better), PSNR (dB), SSIM (1), mouth-box PSNR (dB)."""

    stlpips: float
    psnr_db: float
    ssim: float
    psnr_mouth_db: float


def context_for(seed: int, weights: Path, workdir: Path) -> RunContext:
    """The run context of held-out pair ``seed`` (portrait and audio both from it)."""
    return RunContext(device="cpu", seed=seed, inputs={**CARD_INPUTS, "weights": str(weights)}, workdir=workdir)


def generate(params: Mapping[str, Any], seed: int, weights: Path, workdir: Path) -> WorkloadOutput:
    """One run of the workload for held-out pair ``seed``."""
    workload = AvatarDiTWorkload()
    context = context_for(seed, weights, workdir)
    workload.setup(params, context)
    try:
        return workload.run(params, context)
    finally:
        workload.teardown()


def truth_for(seed: int, frames: int) -> np.ndarray:
    """Ground-truth uint8 video (frames, S, S, 3) of held-out pair ``seed`` at the card's inputs."""
    audio = synth_speech_audio(float(CARD_INPUTS["audio_seconds"]), seed)
    return ground_truth_video(seed, audio, float(CARD_INPUTS["fps"]), frames, int(CARD_INPUTS["output_size"]))


def quality(params: Mapping[str, Any], seeds: Sequence[int], weights: Path, workdir: Path) -> Quality:
    """Fidelity of the first request's video to the ground truth, averaged over ``seeds``."""
    scores: list[tuple[float, float, float, float]] = []
    for seed in seeds:
        video = generate(params, seed, weights, workdir).video
        assert video is not None
        truth = truth_for(seed, video.shape[1])
        box = mouth_box(seed)
        scores.append(
            (
                stlpips_alex(video, truth),
                psnr_db(video, truth),
                ssim(video, truth),
                psnr_db(video, truth, mouth_box=box),
            )
        )
    means = np.mean(np.array(scores), axis=0)
    return Quality(*(float(value) for value in means))


def lipsync(video: np.ndarray, audio: np.ndarray, seed: int) -> tuple[int, float, float]:
    """(best lag in frames, peak correlation, margin) of RMS vs mouth aperture in ``seed``'s mouth box."""
    frames = video[0] if video.ndim == 5 else video
    fps = float(CARD_INPUTS["fps"])
    n = min(len(frames), int(len(audio) * fps / AUDIO_RATE_HZ))
    box = mouth_box_from_fractions(mouth_box(seed), frames.shape[1], frames.shape[2])
    stats = sync_stats(*lag_correlation(frame_audio_rms(audio, AUDIO_RATE_HZ, fps, n), mouth_aperture(frames[:n], box)))
    return stats.lag_frames, stats.peak_corr, stats.margin


@dataclass(frozen=True)
class Cost:
    """One setting's cost: median latency (s) of the timed runs; RSS (GB) of a fresh process
    after ``setup`` and its peak over the warm-up and timed runs; DiT GFLOPs; frames made."""

    latency_s: float
    setup_rss_gb: float
    peak_rss_gb: float
    gflops: float
    frames: int


def _measure_cost(params: Mapping[str, Any], weights: Path, repeats: int, threads: int) -> Cost:
    """Runs in a fresh process (see :func:`cost`)."""
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        workload = AvatarDiTWorkload()
        context = context_for(HELD_OUT_SEEDS[0], weights, Path(tmp))
        workload.setup(params, context)
        setup_rss = psutil.Process().memory_info().rss
        try:
            with PeakMemoryMonitor() as monitor:
                output = workload.run(params, context)
                times = []
                for _ in range(repeats):
                    started = time.perf_counter()
                    workload.run(params, context)
                    times.append(time.perf_counter() - started)
        finally:
            workload.teardown()
    peak = next(m.value for m in monitor.metrics() if m.name == "peak_rss_gb")
    frames = output.video.shape[1] if output.video is not None else 0
    return Cost(
        statistics.median(times),
        setup_rss / 1e9,
        float(peak if peak is not None else "nan"),
        output.counters["dit_gflops"],
        frames,
    )


def cost(params: Mapping[str, Any], weights: Path, repeats: int, threads: int) -> Cost:
    """Cost of ``params`` measured in a fresh (spawned) process: one warm-up run, then
    ``repeats`` timed runs, all inside one :class:`PeakMemoryMonitor` window."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_measure_cost, dict(params), weights, repeats, threads).result()


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def quality_tables(seeds: Sequence[int], weights: Path, workdir: Path) -> str:
    """Markdown: quality vs sample_steps x resolution, then vs infer_frames and precision."""
    rows = []
    for resolution in (32, 48, 64):
        for steps in (1, 2, 4, 8):
            q = quality({"sample_steps": steps, "resolution": resolution}, seeds, weights, workdir)
            rows.append(
                (resolution, steps, f"{q.stlpips:.4f}", f"{q.psnr_db:.2f}", f"{q.ssim:.4f}", f"{q.psnr_mouth_db:.2f}")
            )
    grid = _table(("resolution", "sample_steps", "ST-LPIPS ↓", "PSNR dB ↑", "SSIM ↑", "mouth PSNR dB ↑"), rows)
    other = []
    for params in (
        {"infer_frames": 6},
        {"infer_frames": 12},
        {"infer_frames": 18},
        {"infer_frames": 36},
        {"precision": "bf16"},
        {"online_decode": False},
    ):
        full = {"sample_steps": 4, "resolution": 48, **params}
        q = quality(full, seeds, weights, workdir)
        other.append(
            (
                ", ".join(f"{k}={v}" for k, v in full.items()),
                f"{q.stlpips:.4f}",
                f"{q.psnr_db:.2f}",
                f"{q.ssim:.4f}",
                f"{q.psnr_mouth_db:.2f}",
            )
        )
    knobs = _table(("setting", "ST-LPIPS ↓", "PSNR dB ↑", "SSIM ↑", "mouth PSNR dB ↑"), other)
    return grid + "\n\n" + knobs


def steps_table(resolution: int, seeds: Sequence[int], weights: Path, workdir: Path) -> str:
    """Markdown: ST-LPIPS to ground truth over 1 / 2 / 4 / 8 steps at ``resolution``, paired per held-out pair.

    Each doubling of the steps is compared pair by pair: the mean drop of ST-LPIPS
    with a 95 % confidence interval (1.96 standard errors of the paired
    differences) and the number of pairs where it dropped.
    """
    step_counts = (1, 2, 4, 8)

    def distance(steps: int, seed: int) -> float:
        video = generate({"sample_steps": steps, "resolution": resolution}, seed, weights, workdir).video
        assert video is not None
        return stlpips_alex(video, truth_for(seed, video.shape[1]))

    scores = np.array([[distance(steps, seed) for steps in step_counts] for seed in seeds])
    rows = []
    for index in range(len(step_counts) - 1):
        drop = scores[:, index] - scores[:, index + 1]
        half_width = 1.96 * drop.std(ddof=1) / np.sqrt(len(drop)) if len(drop) > 1 else float("nan")
        rows.append(
            (
                f"{step_counts[index]} -> {step_counts[index + 1]}",
                f"{scores[:, index].mean():.5f}",
                f"{scores[:, index + 1].mean():.5f}",
                f"{drop.mean():+.5f} ± {half_width:.5f}",
                f"{int((drop > 0).sum())}/{len(drop)}",
            )
        )
    return _table(("steps", "ST-LPIPS before", "ST-LPIPS after", "mean drop (95 % CI)", "pairs that dropped"), rows)


def lipsync_table(seeds: Sequence[int], weights: Path, workdir: Path) -> str:
    """Markdown: lip-sync proxy on generated videos with their own and with mismatched audio."""
    rows = []
    for params in (
        {"sample_steps": 1, "resolution": 32},
        {"sample_steps": 4, "resolution": 32},
        {"sample_steps": 4, "resolution": 64},
        {"sample_steps": 8, "resolution": 64},
        None,
    ):
        own, mismatched = [], []
        for index, seed in enumerate(seeds):
            other_audio = synth_speech_audio(float(CARD_INPUTS["audio_seconds"]), seeds[(index + 1) % len(seeds)])
            if params is None:
                audio = synth_speech_audio(float(CARD_INPUTS["audio_seconds"]), seed)
                video = truth_for(seed, int(CARD_INPUTS["audio_seconds"] * CARD_INPUTS["fps"]))
            else:
                output = generate(params, seed, weights, workdir)
                assert output.video is not None and output.audio is not None
                video, audio = output.video, output.audio
            own.append(lipsync(video, audio, seed))
            mismatched.append(lipsync(video, other_audio, seed))
        label = "ground truth" if params is None else ", ".join(f"{k}={v}" for k, v in params.items())
        lags = [lag for lag, _, _ in own]
        rows.append(
            (
                label,
                " ".join(f"{lag:+d}" for lag in lags),
                f"{sum(abs(lag) <= 1 for lag in lags)}/{len(lags)}",
                f"{np.mean([p for _, p, _ in own]):.3f}",
                f"{np.mean([m for _, _, m in own]):.3f}",
                f"{np.mean([m for _, _, m in mismatched]):.3f}",
            )
        )
    return _table(
        (
            "video",
            "best lag per pair (frames)",
            "pairs with abs(lag) <= 1",
            "peak corr",
            "margin",
            "margin, mismatched audio",
        ),
        rows,
    )


def cost_table(weights: Path, repeats: int, threads: int) -> str:
    """Markdown: latency, memory and DiT GFLOPs vs one knob at a time around the default."""
    base: dict[str, Any] = {"infer_frames": 12, "sample_steps": 4, "resolution": 32, "batch_size": 1}
    varied: list[tuple[str, Any]] = [("infer_frames", v) for v in (6, 12, 18, 36)]
    varied += [("resolution", v) for v in (32, 48, 64)] + [("sample_steps", v) for v in (1, 2, 4, 8)]
    varied += [("batch_size", v) for v in (1, 2, 4)] + [("precision", "bf16"), ("online_decode", False)]
    rows = []
    for name, value in varied:
        measured = cost({**base, name: value}, weights, repeats, threads)
        rows.append(
            (
                f"{name}={value}",
                measured.frames,
                f"{measured.latency_s:.3f}",
                f"{(measured.peak_rss_gb - measured.setup_rss_gb) * 1000:.0f}",
                f"{measured.peak_rss_gb:.3f}",
                f"{measured.gflops:.2f}",
            )
        )
    return _table(
        (
            "setting (others at default)",
            "frames",
            "latency p50 s",
            "peak RSS over setup MB",
            "peak RSS GB",
            "DiT GFLOPs",
        ),
        rows,
    )


def cpu_description() -> str:
    """``<model name> x <logical CPUs>`` from /proc/cpuinfo (the platform's machine name elsewhere)."""
    try:
        names = [
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ]
    except OSError:
        names = []
    return f"{names[0]} x {len(names)}" if names else platform.machine()


def main(argv: Sequence[str] | None = None) -> None:
    """Print the card's tables (markdown) with the date and machine."""
    parser = argparse.ArgumentParser(prog="python -m tuner.workloads.avatar_dit.card")
    parser.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS)
    parser.add_argument("--seeds", type=int, default=len(HELD_OUT_SEEDS), help="held-out pairs to average over")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per cost setting")
    parser.add_argument("--threads", type=int, default=2, help="torch threads while measuring")
    parser.add_argument("--skip-quality", action="store_true", help="print the cost table only")
    parser.add_argument("--skip-cost", action="store_true", help="print the quality tables only")
    parser.add_argument(
        "--steps-pairs",
        type=int,
        default=32,
        help="held-out pairs (seeds 100...) of the paired steps tables at 48 and 64 px; 0 skips them",
    )
    parser.add_argument("--steps-only", action="store_true", help="print the paired steps tables only")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    seeds = HELD_OUT_SEEDS[: args.seeds]
    print(
        f"Measured {datetime.date.today().isoformat()} on {cpu_description()} "
        f"({torch.get_num_threads()} torch threads, torch {torch.__version__}); "
        f"weights {args.weights.name}; held-out seeds {list(seeds)}; inputs {dict(CARD_INPUTS)}\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if args.steps_pairs:
            pairs = [HELD_OUT_SEEDS[0] + offset for offset in range(args.steps_pairs)]
            for resolution in (64, 48):
                print(
                    f"### ST-LPIPS over sample_steps at {resolution} px, paired over {len(pairs)} held-out pairs "
                    f"(seeds {pairs[0]}..{pairs[-1]})\n"
                )
                print(steps_table(resolution, pairs, args.weights, workdir) + "\n")
        if args.steps_only:
            return
        if not args.skip_quality:
            print("### Quality vs knobs (held-out pairs, against ground truth at 64 x 64)\n")
            print(quality_tables(seeds, args.weights, workdir) + "\n")
            print("### Lip-sync proxy (RMS vs mouth aperture, per-portrait mouth box)\n")
            print(lipsync_table(seeds, args.weights, workdir) + "\n")
        if not args.skip_cost:
            print(f"### Cost vs knobs (CPU, median of {args.repeats} runs after a warm-up)\n")
            print(cost_table(args.weights, args.repeats, args.threads) + "\n")


if __name__ == "__main__":
    main()
