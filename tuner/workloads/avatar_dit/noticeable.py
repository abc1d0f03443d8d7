"""Measure the ST-LPIPS distance a viewer does not notice, on the avatar DiT (the demo's export bound).

Usage::

    python -m tuner.workloads.avatar_dit.noticeable [--seeds N] [--threads T] [--out PATH]

What it measures: ``stlpips_alex`` (:func:`tuner.evaluators.perceptual.stlpips_alex`,
ST-LPIPS AlexNet shift-tolerant, unit 1, 0 for identical videos, mean over aligned frames)
of the reference setting's video (:data:`REFERENCE`, the reference of
``search_spaces/avatar_demo.yaml``, rendered by :class:`~.workload.AvatarDiTWorkload` with
the demo's inputs :data:`~.card.CARD_INPUTS`) against

* edits a viewer does not see (``invisible``): the same video shifted right by one pixel
  (left column replicated), plus uniform integer noise in [-2, 2] (of 255) per pixel and
  channel (numpy generator seeded with the pair's seed), re-encoded as JPEG at quality 95
  frame by frame (Pillow, its default 4:2:0 chroma subsampling), and the bf16 (autocast)
  render of the same setting;
* settings with visible change (``visible``): resolution 48 and 32 (same steps), and
  ``sample_steps`` 1 at the reference resolution.

Each is measured per held-out pair (:data:`~.data.HELD_OUT_SEEDS`: portrait and audio seeds
never trained on); the JSON keeps every per-seed value, the printed table the mean and max.
The bound (:func:`choose_bound`) is the smallest of :data:`ROUND_BOUNDS` at or above the
largest invisible value and below the smallest visible value, or none when they overlap.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import io
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tuner.evaluators.perceptual import stlpips_alex
from tuner.host import host_fingerprint
from tuner.workloads.avatar_dit.card import CARD_INPUTS
from tuner.workloads.avatar_dit.checkpoint import DEFAULT_WEIGHTS
from tuner.workloads.avatar_dit.data import HELD_OUT_SEEDS
from tuner.workloads.avatar_dit.workload import AvatarDiTWorkload
from tuner.workloads.base import RunContext

REFERENCE: Mapping[str, Any] = {
    "infer_frames": 24,
    "sample_steps": 8,
    "resolution": 64,
    "batch_size": 1,
    "precision": "fp32",
    "online_decode": True,
}
"""The reference setting of ``search_spaces/avatar_demo.yaml``."""

ROUND_BOUNDS: tuple[float, ...] = (0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05)
"""Candidate export bounds on ``stlpips_alex``, smallest first."""

DEFAULT_OUT = Path("bench/results/avatar_noticeable_stlpips.json")

Video = np.ndarray
"""uint8 (requests, frames, H, W, 3), as the workload returns it."""


def shift_one_pixel(video: Video, seed: int) -> Video:
    """The video moved one pixel to the right; the leftmost column is replicated."""
    del seed
    shifted = video.copy()
    shifted[..., 1:, :] = video[..., :-1, :]
    return shifted


def uniform_noise(video: Video, seed: int) -> Video:
    """Plus integer noise drawn uniformly from {-2, ..., 2} per pixel and channel, clipped to 0..255."""
    noise = np.random.default_rng(seed).integers(-2, 3, size=video.shape)
    return np.clip(video.astype(np.int16) + noise, 0, 255).astype(np.uint8)


def jpeg_95(video: Video, seed: int) -> Video:
    """Every frame encoded as JPEG at quality 95 by Pillow (default 4:2:0 subsampling) and decoded."""
    from PIL import Image

    del seed
    frames = video.reshape(-1, *video.shape[-3:])
    decoded = []
    for frame in frames:
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="JPEG", quality=95)
        buffer.seek(0)
        decoded.append(np.asarray(Image.open(buffer).convert("RGB")))
    return np.stack(decoded).reshape(video.shape)


@dataclass(frozen=True)
class Edit:
    """One comparison: a copy edited by ``transform``, or the render of ``params`` over the reference."""

    name: str
    group: str  # "invisible" | "visible"
    description: str
    transform: Callable[[Video, int], Video] | None = None
    params: Mapping[str, Any] | None = None


def edits_for(reference: Mapping[str, Any]) -> tuple[Edit, ...]:
    """The four invisible edits and the three visible settings around ``reference``."""
    steps, resolution = reference["sample_steps"], reference["resolution"]
    return (
        Edit("shift_1px", "invisible", "shifted right by 1 px, edge column replicated", transform=shift_one_pixel),
        Edit(
            "noise_2of255",
            "invisible",
            "uniform integer noise in [-2, 2] / 255 per pixel and channel, seeded",
            transform=uniform_noise,
        ),
        Edit("jpeg_q95", "invisible", "JPEG quality 95 per frame (Pillow, 4:2:0)", transform=jpeg_95),
        Edit("bf16", "invisible", "bf16 autocast render of the same setting", params={"precision": "bf16"}),
        Edit("resolution_48", "visible", f"resolution 48, sample_steps {steps}", params={"resolution": 48}),
        Edit("resolution_32", "visible", f"resolution 32, sample_steps {steps}", params={"resolution": 32}),
        Edit("steps_1", "visible", f"sample_steps 1, resolution {resolution}", params={"sample_steps": 1}),
    )


def measure(
    seeds: Sequence[int],
    reference: Mapping[str, Any] = REFERENCE,
    inputs: Mapping[str, Any] = CARD_INPUTS,
    weights: Path = DEFAULT_WEIGHTS,
) -> dict[str, Any]:
    """Per edit: ``{"group", "description", "per_seed": {seed: ST-LPIPS}, "mean", "max"}`` (unit 1)."""
    edits = edits_for(reference)
    per_seed: dict[str, dict[str, float]] = {edit.name: {} for edit in edits}
    workload = AvatarDiTWorkload()  # one model load for every render
    with tempfile.TemporaryDirectory() as tmp:

        def render(params: Mapping[str, Any], seed: int) -> Video:
            context = RunContext(device="cpu", seed=seed, inputs={**inputs, "weights": str(weights)}, workdir=Path(tmp))
            workload.setup(params, context)
            video = workload.run(params, context).video
            assert video is not None
            return video

        try:
            for seed in seeds:
                base = render(reference, seed)
                for edit in edits:
                    if edit.transform is not None:
                        other = edit.transform(base, seed)
                    else:
                        other = render({**reference, **(edit.params or {})}, seed)
                    per_seed[edit.name][str(seed)] = stlpips_alex(other, base)
        finally:
            workload.teardown()
    return {
        edit.name: {
            "group": edit.group,
            "description": edit.description,
            "per_seed": per_seed[edit.name],
            "mean": float(np.mean(list(per_seed[edit.name].values()))),
            "max": max(per_seed[edit.name].values()),
        }
        for edit in edits
    }


def choose_bound(
    results: Mapping[str, Mapping[str, Any]], candidates: Sequence[float] = ROUND_BOUNDS
) -> dict[str, Any]:
    """Largest invisible and smallest visible per-seed value and the bound between them (``None`` if none).

    ``conservative_bound``: the largest candidate below every visible value (it admits no measured visible
    change, but may reject some invisible ones); ``invisible_within_conservative``: how many invisible
    per-seed values it admits, of how many.
    """

    def values(group: str) -> list[float]:
        return [v for r in results.values() if r["group"] == group for v in r["per_seed"].values()]

    invisible = values("invisible")
    largest, smallest = max(invisible), min(values("visible"))
    bound = next((c for c in candidates if largest <= c < smallest), None)
    conservative = max((c for c in candidates if c < smallest), default=None)
    admitted = sum(v <= conservative for v in invisible) if conservative is not None else 0
    return {
        "largest_invisible": largest,
        "smallest_visible": smallest,
        "separated": largest < smallest,
        "bound": bound,
        "conservative_bound": conservative,
        "invisible_within_conservative": [admitted, len(invisible)],
        "candidates": list(candidates),
    }


def table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """Markdown: one row per edit, mean and max over seeds."""
    lines = ["| edit | group | ST-LPIPS mean | ST-LPIPS max |", "|---|---|---|---|"]
    lines += [
        f"| {r['description']} (`{name}`) | {r['group']} | {r['mean']:.4f} | {r['max']:.4f} |"
        for name, r in results.items()
    ]
    return "\n".join(lines)


def _versions() -> dict[str, str]:
    found = {}
    for package in ("torch", "numpy", "pillow", "stlpips-pytorch", "tuner"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Measure, write the raw JSON to ``--out`` and print the markdown table and the bound."""
    parser = argparse.ArgumentParser(prog="python -m tuner.workloads.avatar_dit.noticeable")
    parser.add_argument("--seeds", type=int, default=len(HELD_OUT_SEEDS), help="held-out pairs (seeds 100...)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    seeds = [HELD_OUT_SEEDS[0] + offset for offset in range(args.seeds)]
    started = time.perf_counter()
    results = measure(seeds, weights=args.weights)
    bound = choose_bound(results)
    record = {
        "benchmark": "tuner.workloads.avatar_dit.noticeable",
        "command": " ".join(
            [
                ".venv/bin/python -m tuner.workloads.avatar_dit.noticeable",
                *(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)),
            ]
        ),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {**host_fingerprint(), "torch_threads": torch.get_num_threads(), "device": "cpu"},
        "versions": _versions(),
        "metric": "stlpips_alex",
        "unit": "1",
        "weights": args.weights.name,
        "inputs": dict(CARD_INPUTS),
        "reference": dict(REFERENCE),
        "seeds": seeds,
        "edits": results,
        "bound": bound,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"ST-LPIPS (AlexNet, shift-tolerant) against the reference {dict(REFERENCE)}; held-out seeds "
        f"{seeds[0]}..{seeds[-1]}; {record['wall_s']} s; raw values in {args.out}\n"
    )
    print(table(results) + "\n")
    verdict = (
        f"bound {bound['bound']}"
        if bound["bound"] is not None
        else f"no round bound separates them; the largest below every visible value is "
        f"{bound['conservative_bound']} (admits {bound['invisible_within_conservative'][0]} of "
        f"{bound['invisible_within_conservative'][1]} invisible values)"
    )
    print(
        f"largest invisible {bound['largest_invisible']:.4f}, smallest visible {bound['smallest_visible']:.4f}: "
        f"{verdict}"
    )
    return record


if __name__ == "__main__":
    main()
