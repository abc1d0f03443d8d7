"""Measure the AVQA model card's tables: ``python -m tuner.workloads.avqa.card``.

Prints markdown: a header (date, machine, torch threads, weights metadata),
then accuracy tables (exact match against the ground truth of held-out
questions, overall and per question type) and cost tables (latency and peak
memory of one workload call that answers ``--cost-questions`` questions).

Accuracy rows change one knob from a *full* setting (every frame at 8 fps, all
audio at 16 kHz, greedy, ``max_new_tokens`` 16); they are decoded in batches of
``--accuracy-batch`` questions. Cost rows change one knob from the DOMAIN.md
defaults (:data:`~tuner.workloads.avqa.workload.DEFAULT_PARAMS`) and are timed
with :func:`tuner.evaluators.latency.measure_latency` (1 warmup call, 5-9 timed
repeats, median reported). Memory is measured on one extra, untimed call:
``peak tensor MB`` is the peak of live tensor bytes created during the call
(torch profiler memory timeline: every CPU tensor allocation and free, weights
and cached clips excluded as they exist before); ``RSS rise`` is the host RSS
high-water mark over the timed calls (:class:`tuner.evaluators.memory.PeakMemoryMonitor`)
minus the RSS just before them, which page-granular RSS and the allocator's
reuse of freed memory mostly hide at this model's size.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import platform
import tempfile
import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil
import torch

from tuner.evaluators.latency import LatencySettings, measure_latency
from tuner.evaluators.memory import PeakMemoryMonitor
from tuner.workloads.avqa.checkpoint import load_checkpoint
from tuner.workloads.avqa.data import ANSWERS, QUESTION_TYPES, heldout_questions
from tuner.workloads.avqa.workload import AVQAWorkload
from tuner.workloads.base import RunContext

FULL: Mapping[str, Any] = {
    "video_fps": 8.0,
    "max_frames": 64,
    "audio_sample_rate": 16000,
    "max_audio_seconds": 10.0,
    "max_new_tokens": 16,
}
"""The setting accuracy rows start from: nothing the model could use is dropped."""

ACCURACY_ROWS: dict[str, list[dict[str, Any]]] = {
    "video_fps (max_frames 64)": [{"video_fps": f} for f in (8.0, 4.0, 2.0, 1.0, 0.5)],
    "max_frames (video_fps 8)": [{"max_frames": n} for n in (32, 16, 8, 4, 2, 1)],
    "audio": [{"max_audio_seconds": s} for s in (4.0, 3.0, 2.0, 1.0, 0.5)] + [{"audio_sample_rate": 8000}],
    "max_new_tokens": [{"max_new_tokens": n} for n in (16, 6, 5, 4, 3, 2, 1)],
    "decoding": [
        {},
        {"num_beams": 3},
        {"do_sample": True, "temperature": 0.7},
        {"do_sample": True, "temperature": 1.5},
        {"precision": "bf16"},
    ],
    "DOMAIN.md defaults": [{"video_fps": 2.0, "max_frames": 16}],
}

COST_ROWS: dict[str, list[dict[str, Any]]] = {
    "media tokens (video_fps, max_frames)": [
        {"video_fps": 0.5},
        {"video_fps": 1.0},
        {},
        {"video_fps": 4.0},
        {"video_fps": 8.0, "max_frames": 64},
        {"video_fps": 8.0, "max_frames": 8},
        {"max_audio_seconds": 1.0},
        {"audio_sample_rate": 8000},
    ],
    "max_new_tokens": [{"max_new_tokens": n} for n in (1, 4, 16, 64)],
    "num_beams": [{"num_beams": n} for n in (1, 3, 5)],
    "use_cache": [
        {"use_cache": True},
        {"use_cache": False},
        {"use_cache": True, "num_beams": 3},
        {"use_cache": False, "num_beams": 3},
    ],
    "batch_size": [{"batch_size": n} for n in (1, 2, 4, 12)],
    "precision": [{"precision": "fp32"}, {"precision": "bf16"}],
}


_CREATE, _DESTROY = 2, 4  # torch.profiler._memory_profiler.Action values in the raw export


def peak_tensor_bytes(call: Callable[[], object], workdir: Path) -> int:
    """Peak bytes of CPU tensors alive during ``call`` that it created (profiler memory timeline)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as profiler:
        call()
    path = workdir / "memory.raw.json.gz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # export_memory_timeline is deprecated (still the CPU route)
        profiler.export_memory_timeline(str(path), device="cpu")
    with gzip.open(path, "rt") as handle:
        events = json.load(handle)
    live = peak = 0
    for _, action, size, _ in sorted(events, key=lambda event: event[0]):
        if action in (_CREATE, _DESTROY):  # destroy events carry negative sizes
            live += size
            peak = max(peak, live)
    return peak


def _context(num_questions: int, workdir: Path) -> RunContext:
    return RunContext(device="cpu", seed=0, inputs={"num_questions": num_questions}, workdir=workdir)


def _label(change: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in change.items()) or "(base)"


def accuracy_table(num_questions: int, batch: int, workdir: Path) -> str:
    """Markdown: exact match overall and per question type for every row of :data:`ACCURACY_ROWS`."""
    questions = heldout_questions(num_questions)
    context = _context(num_questions, workdir)
    workload = AVQAWorkload()
    workload.setup({}, context)
    chance = sum(1 / len(ANSWERS[t]) for t in QUESTION_TYPES) / len(QUESTION_TYPES)
    lines = [
        f"Held-out questions: {num_questions} ({num_questions // len(QUESTION_TYPES)} per type); "
        f"chance (uniform guess per type, averaged): {chance:.2f}.",
        "",
        "| group | change from full | overall | " + " | ".join(QUESTION_TYPES) + " | truncated | frames | audio s |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in QUESTION_TYPES) + " | ---: | ---: | ---: |",
    ]
    for group, rows in ACCURACY_ROWS.items():
        for change in rows:
            params = {**FULL, "batch_size": batch, **change}
            output = workload.run(params, context)
            assert output.text is not None
            per_type: dict[str, list[bool]] = defaultdict(list)
            for question, answer in zip(questions, output.text):
                per_type[question.question_type].append(answer.strip().lower() == question.answer)
            overall = sum(sum(v) for v in per_type.values()) / len(questions)
            cells = " | ".join(f"{sum(per_type[t]) / len(per_type[t]):.2f}" for t in QUESTION_TYPES)
            counters = output.counters
            lines.append(
                f"| {group} | {_label(change)} | {overall:.3f} | {cells} | "
                f"{counters['max_new_tokens_hit'] / len(questions):.2f} | "
                f"{counters['frames_used']:.0f} | {counters['audio_seconds_used']:.1f} |"
            )
    workload.teardown()
    return "\n".join(lines)


def cost_table(num_questions: int, workdir: Path) -> str:
    """Markdown: latency and peak RSS of one call per row of :data:`COST_ROWS`."""
    context = _context(num_questions, workdir)
    settings = LatencySettings(warmup=1, min_repeats=5, max_repeats=9, cv_target=0.03, noisy_cv=0.10)
    lines = [
        f"One call answers {num_questions} held-out questions; changes are from the DOMAIN.md defaults "
        "(video_fps 2, max_frames 16, 16 kHz, max_audio_seconds 10, max_new_tokens 16, greedy, "
        "1 beam, cache on, batch 1, fp32).",
        "",
        "| group | change | p50 s / call | ms / question | CV | peak tensor MB | RSS rise MB | "
        "media tokens | decode calls | decoded tokens |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    process = psutil.Process()
    for group, rows in COST_ROWS.items():
        for change in rows:
            workload = AVQAWorkload()
            workload.setup(change, context)
            workload.run(change, context)  # render clips, fill caches before the window
            with PeakMemoryMonitor() as monitor:  # entry resets the RSS high-water mark to the RSS now
                start_rss = process.memory_info().rss
                stats, output = measure_latency(lambda: workload.run(change, context), workload.synchronize, settings)
            peak = next(m.value for m in monitor.metrics() if m.name == "peak_rss_gb")
            tensors_mb = peak_tensor_bytes(lambda: workload.run(change, context), workdir) / 1e6
            workload.teardown()
            counters = output.counters
            rise_mb = (peak * 1e9 - start_rss) / 1e6 if peak is not None else float("nan")
            lines.append(
                f"| {group} | {_label(change)} | {stats.p50_s:.3f} | {1000 * stats.p50_s / num_questions:.1f} | "
                f"{stats.cv or 0:.3f} | {tensors_mb:.2f} | {rise_mb:.1f} | {counters['media_tokens']:.0f} | "
                f"{counters['decode_calls']:.0f} | {counters['decoded_tokens']:.0f} |"
            )
    return "\n".join(lines)


def header(threads: int) -> str:
    """Date, machine and weights provenance."""
    loaded = load_checkpoint()
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    meta = loaded.training
    parameters = sum(p.numel() for p in loaded.model.parameters())
    return (
        f"Measured {datetime.date.today().isoformat()} on {cpu} ({psutil.cpu_count()} logical CPUs, "
        f"torch {torch.__version__}, {threads} torch thread(s), shared machine). Weights: "
        f"{parameters} parameters, {meta.get('steps')} steps, seed {meta.get('seed')}, "
        f"final loss {meta.get('final_loss', float('nan')):.4f}."
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Measure the AVQA model card tables (markdown to stdout).")
    parser.add_argument("--questions", type=int, default=600, help="held-out questions for accuracy")
    parser.add_argument("--accuracy-batch", type=int, default=30)
    parser.add_argument("--cost-questions", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        print(header(args.threads), "\n", flush=True)
        print("### Accuracy (exact match vs ground truth)\n", flush=True)
        print(accuracy_table(args.questions, args.accuracy_batch, Path(tmp)), "\n", flush=True)
        if not args.skip_cost:
            print("### Cost\n", flush=True)
            print(cost_table(args.cost_questions, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
