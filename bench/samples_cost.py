"""What a trial's worker spends besides the workload: its output samples, and the fork server's imports (issue 27).

Two figures, each a ratio measured in this run:

1. **Samples** (:func:`tuner.runner.measure.samples.write_samples`, written while the trial's slot is held): CPU
   milliseconds per trial for three videos — the no-op fleet's tiny one (4 frames of 16x16), a smooth
   33-frame 256x256 clip (a gradient that moves) and a noisy one (the same with uniform noise: the worst
   case for a GIF palette) — with the tuner's encoding (each GIF frame quantized by Pillow's fast
   octree, the contact sheet at zlib level 1) against Pillow's defaults (the adaptive palette Pillow's
   GIF writer converts each RGB frame with, zlib level 6): the encoding before this bench.
2. **Fork server start-up**: CPU seconds of a fresh ``python`` importing the modules every fork server
   preloads (:data:`tuner.runner.subprocess.WORKER_MODULES`), then the same plus the video metrics'
   warm-up (scikit-image's PSNR / SSIM, which only a study asking for ``psnr_db`` / ``ssim`` preloads
   now; before, every fork server imported it). Child process CPU from ``resource.getrusage``.

Usage: ``python bench/samples_cost.py [--repeats 5]``; raw figures in ``bench/results/samples_cost.json``.
``--report`` prints the same lines from the committed raw figures (docs/benchmarks.md quotes them), measuring nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "samples_cost.json"


def videos() -> dict[str, np.ndarray]:
    """The three videos (B, F, H, W, 3) uint8, seeded."""
    rng = np.random.default_rng(0)
    tiny = np.broadcast_to(np.linspace(0, 255, 16 * 16 * 3).reshape(1, 1, 16, 16, 3), (1, 4, 16, 16, 3))
    y, x = np.mgrid[0:256, 0:256]
    smooth = np.stack(
        [np.stack([(x + 4 * f) % 256, (y + 2 * f) % 256, (x + y) // 2 % 256], axis=-1) for f in range(33)]
    )[None]
    noisy = np.clip(smooth + rng.uniform(-40, 40, smooth.shape), 0, 255)
    return {
        "tiny 4x16x16": tiny.astype(np.uint8),
        "smooth 33x256x256": smooth.astype(np.uint8),
        "noisy 33x256x256": noisy.astype(np.uint8),
    }


def pillow_defaults(video: np.ndarray, folder: Path) -> None:
    """The encoding before: the same frames, saved with Pillow's own defaults (adaptive palette, zlib 6)."""
    from PIL import Image

    from tuner.runner.measure import samples

    frames = samples.first_item_frames(video)
    Image.fromarray(samples.contact_sheet(frames)).save(folder / "contact_sheet.png")
    factor = samples.enlargement(frames.shape[2])
    images = [
        Image.fromarray(samples._upscale(frames[i], factor))
        for i in samples.evenly_spaced(len(frames), samples.GIF_FRAMES)
    ]
    images[0].save(
        folder / "sample.gif", save_all=True, append_images=images[1:], duration=samples.GIF_FRAME_MS, loop=0
    )


def tuner_encoding(video: np.ndarray, folder: Path) -> None:
    """The tuner's samples (:func:`tuner.runner.measure.samples.write_samples`)."""
    from tuner.runner.measure.samples import write_samples
    from tuner.workloads.base import WorkloadOutput

    written = write_samples(WorkloadOutput(video=video, items=1), folder)
    assert not written.problems, written.problems


def cpu_ms(write: Callable[[np.ndarray, Path], None], video: np.ndarray, repeats: int) -> float:
    """Median CPU milliseconds of ``write`` (one warm-up call first: imports)."""
    spent = []
    with tempfile.TemporaryDirectory() as tmp:
        write(video, Path(tmp))
        for _ in range(repeats):
            started = time.process_time()
            write(video, Path(tmp))
            spent.append(time.process_time() - started)
    return 1e3 * statistics.median(spent)


def import_cpu_s(modules: list[str], warm_video: bool) -> float:
    """CPU seconds a fresh interpreter spends importing ``modules`` (and the video warm-up)."""
    code = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\n"
    if warm_video:
        code += "import tuner.evaluators.video as v; v.warm_up()\n"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code, *modules], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _sample_line(row: dict[str, Any]) -> str:
    return (
        f"samples, {row['video']:18s}: Pillow defaults {row['pillow_defaults_cpu_ms']:8.1f} CPU ms, tuner "
        f"{row['tuner_cpu_ms']:6.1f} CPU ms (ratio {row['ratio']:.3f})"
    )


def _closing(rows: list[dict[str, Any]], plain: float, warmed: float) -> list[str]:
    noisy = rows[-1]
    return [
        f"fork server imports: {plain:.2f} CPU-s; with the video metrics' warm-up (as every fork server did "
        f"before) {warmed:.2f} CPU-s (ratio {plain / warmed:.2f})",
        f"samples of a noisy 256 px clip: {noisy['tuner_cpu_ms']:.0f} CPU ms per trial, {noisy['ratio']:.3f} of "
        f"Pillow's defaults",
    ]


def report(path: Path = RESULTS) -> str:
    """What the bench printed, from its committed raw results (docs/benchmarks.md quotes it); measures nothing."""
    result = json.loads(path.read_text())
    return "\n".join(
        [
            f"{result['command'].strip()} ({result['measured_at']}, {result['cores']} cores, load average "
            f"{result['load_average'][0]:.1f}; median of {result['repeats']} calls per video)",
            *(_sample_line(row) for row in result["samples"]),
            *_closing(
                result["samples"],
                result["forkserver_import_cpu_s"],
                result["forkserver_import_with_video_warm_up_cpu_s"],
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--report",
        action="store_true",
        help="print the figures from bench/results/samples_cost.json (committed), run nothing",
    )
    args = parser.parse_args()
    if args.report:
        print(report())
        return
    from tuner.runner.subprocess import WORKER_MODULES

    rows: list[dict[str, Any]] = []
    for name, video in videos().items():
        before, after = cpu_ms(pillow_defaults, video, args.repeats), cpu_ms(tuner_encoding, video, args.repeats)
        rows.append(
            {
                "video": name,
                "pillow_defaults_cpu_ms": round(before, 2),
                "tuner_cpu_ms": round(after, 2),
                "ratio": round(after / before, 4),
            }
        )
        print(_sample_line(rows[-1]), flush=True)
    plain = statistics.median(import_cpu_s(WORKER_MODULES, False) for _ in range(3))
    warmed = statistics.median(import_cpu_s(WORKER_MODULES, True) for _ in range(3))
    closing = _closing(rows, plain, warmed)
    print(closing[0])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "command": "python bench/samples_cost.py " + " ".join(sys.argv[1:]),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "cores": os.cpu_count(),
                "load_average": os.getloadavg(),
                "repeats": args.repeats,
                "samples": rows,
                "forkserver_import_cpu_s": round(plain, 3),
                "forkserver_import_with_video_warm_up_cpu_s": round(warmed, 3),
            },
            indent=1,
        )
        + "\n"
    )
    print(closing[1])


if __name__ == "__main__":
    main()
