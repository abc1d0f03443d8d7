"""How much of the tuner's latency is the tuner: its p50 over the bare twin's, per setting (issue 40).

Each setting runs as one trial in a fresh worker (``SubprocessRunner``) with ``measurement.bare_twin``: the
tuner's measurement (warm-up, timed repeats, the memory sampler at 100 Hz), then the same number of bare calls
of the same loaded call (:mod:`tuner.evaluators.runtime.bare_twin`). Settings: the simulated asynchronous device's
kernel of 20 ms and 5 ms (``tuner.testing.simulated_workloads``; a simulated device, not a GPU), the fake sleep
workload (10 ms), the built-in avatar (CPU, 32 px, 1 and 4 steps) and the tiny Wan pipeline through diffusers
(CPU, 32x32, 5 frames). The goal: ratio <= 1.05 on each. Beside it, where the workload splits its call
(:mod:`tuner.evaluators.runtime.spans`): the medians of its ``prepare`` / ``model`` / ``postprocess`` spans and
what lay outside them -- the attribution of the tuner's figure against a bare timing of the model call alone.

Usage: ``python bench/bare_twin.py [--repeats 7]``; raw figures in ``bench/results/bare_twin.json``;
``--report`` prints the table from them, measuring nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raw_results import main, provenance  # noqa: E402

AVATAR = "tuner.workloads.avatar_dit:AvatarDiTWorkload"
AVATAR_INPUTS = {"audio_seconds": 1.0, "fps": 12, "output_size": 32}
SETTINGS: list[tuple[str, str, dict[str, Any], dict[str, Any], str, list[str]]] = [
    (
        "simulated device, 20 ms kernel",
        "tuner.testing.simulated_workloads:SimulatedKernelWorkload",
        {"kernel_ms": 20},
        {},
        "cuda",
        ["tuner.testing.simulated_workloads"],
    ),
    (
        "simulated device, 5 ms kernel",
        "tuner.testing.simulated_workloads:SimulatedKernelWorkload",
        {"kernel_ms": 5},
        {},
        "cuda",
        ["tuner.testing.simulated_workloads"],
    ),
    ("fake sleep, 10 ms", "tuner.workloads.fake:FakeWorkload", {"sleep_s": 0.01}, {}, "cpu", []),
    (
        "avatar, 32 px, 1 step",
        AVATAR,
        {"infer_frames": 6, "sample_steps": 1, "resolution": 32},
        AVATAR_INPUTS,
        "cpu",
        [],
    ),
    (
        "avatar, 32 px, 4 steps",
        AVATAR,
        {"infer_frames": 6, "sample_steps": 4, "resolution": 32},
        AVATAR_INPUTS,
        "cpu",
        [],
    ),
]
SPANS = ("prepare_s", "model_s", "postprocess_s", "outside_spans_s")  # tuner.evaluators.runtime.spans
WAN = (
    "tiny Wan (diffusers), 32x32, 5 frames, 2 steps",
    "tuner.adapters.python:PythonAdapterWorkload",
    {"num_frames": 5, "height": 32, "width": 32, "num_inference_steps": 2, "guidance_scale": 5.0, "precision": "fp32"},
    {"prompt": "A cat walks on the grass."},
    "cpu",
    [],
)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tuner.runner.base import Slot, TrialRequest
    from tuner.runner.subprocess import SubprocessRunner

    rows = []
    settings = list(SETTINGS) + ([WAN] if importlib.util.find_spec("diffusers") else [])
    with tempfile.TemporaryDirectory() as tmp:
        for number, (label, workload, params, inputs, device, preload) in enumerate(settings):
            options = (
                {
                    "adapter": "python",
                    "factory": "tuner.adapters.factories.diffusers_video:make_video_pipeline",
                    "kwargs": {"weights": "random", "architecture": "tiny", "device": "cpu", "seed": 0},
                }
                if workload.startswith("tuner.adapters.python")
                else {}
            )
            request = TrialRequest(
                study_name="bare_twin",
                trial_number=number,
                workload_class=workload,
                settings=params,
                inputs=inputs,
                seed=0,
                device=device,
                workload_options=options,
                measurement={
                    "warmup": 2,
                    "min_repeats": args.repeats,
                    "max_repeats": args.repeats,
                    "bare_twin": args.repeats,
                },
                timeout_s=600.0,
                workdir=str(Path(tmp) / f"t{number}"),
            )
            runner = SubprocessRunner(preload=preload)
            try:
                result = runner.run(request, Slot(0, "0" if device == "cuda" else None, 1))
            finally:
                runner.close()
            figures = {
                name: result.metrics[name].value if name in result.metrics else None
                for name in ("latency_p50_s", "bare_p50_s", "twin_ratio", "latency_cv", *SPANS)
            }
            rows.append({"setting": label, "outcome": result.outcome.value, "reason": result.reason, **figures})
    return {"repeats": args.repeats, "rows": rows}


def report_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        provenance(result) + f"; {result['repeats']} tuner repeats and {result['repeats']} bare calls each",
        "",
        "| setting | tuner p50 s | bare p50 s | tuner / bare | prepare s | model s | postprocess s | outside s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        if row["outcome"] != "OK" or row["twin_ratio"] is None:
            lines.append(f"| {row['setting']} | {row['outcome']}: {row['reason']} | | | | | | |")
            continue
        split = " | ".join(f"{row[name]:.4f}" if row.get(name) is not None else "-" for name in SPANS)
        lines.append(
            f"| {row['setting']} | {row['latency_p50_s']:.4f} | {row['bare_p50_s']:.4f} | "
            f"{row['twin_ratio']:.3f} | {split} |"
        )
    worst = max((row["twin_ratio"] for row in result["rows"] if row["twin_ratio"] is not None), default=None)
    if worst is not None:
        lines += ["", f"worst ratio {worst:.3f} (goal <= 1.05)"]
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    main(parser, "bare_twin.py", measure, report_lines)
