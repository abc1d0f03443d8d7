"""A small, browsable sample of one trial's output, written by the worker.

For video: ``contact_sheet.png`` (up to 8 frames of the first item, evenly
spaced, side by side) and ``sample.gif`` (up to 24 frames at 12.5 fps, at most
256 px wide). For text: ``answer.txt`` (the answers, one per line, at most 4000
characters). Files go into the trial's workdir under ``sample/``; the tracker
logs them as artifacts of the trial's MLflow run.

Cost: the worker writes them while its slot is held, so they are cheap by design. Each GIF frame
gets its own 256-colour palette by Pillow's fast octree quantizer (:func:`gif_frames`) and the
contact sheet is saved at zlib level 1: a 24-frame 256 px GIF of noisy video took 6.9 CPU-s with
Pillow's default (adaptive) conversion and takes about 0.06 s (``bench/samples_cost.py``).

:func:`write_samples` never raises: a sample that cannot be written is
reported in the returned ``problems`` with the reason, and the trial's result
is unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SAMPLE_DIR = "sample"
SHEET_FRAMES = 8
GIF_FRAMES = 24
GIF_FRAME_MS = 80
MIN_TILE_PX = 128
MAX_GIF_WIDTH_PX = 256
MAX_ANSWER_CHARS = 4000
PNG_COMPRESS_LEVEL = 1  # zlib level of the contact sheet: fast, a preview (Pillow's default is 6)


@dataclass
class Samples:
    """Written sample files (name -> absolute path) and the samples that could not be written."""

    files: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


def first_item_frames(video: np.ndarray) -> np.ndarray:
    """(frames, H, W, 3) uint8 of the first batch item; accepts (B, F, H, W, 3) or (F, H, W, 3)."""
    frames = video[0] if video.ndim == 5 else video
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"video of shape {video.shape} is neither (B, F, H, W, 3) nor (F, H, W, 3)")
    return np.ascontiguousarray(np.clip(frames, 0, 255).astype(np.uint8))


def evenly_spaced(count: int, limit: int) -> list[int]:
    """Up to ``limit`` indices from ``range(count)``, first and last included."""
    if count <= limit:
        return list(range(count))
    return sorted({round(i * (count - 1) / (limit - 1)) for i in range(limit)})


def enlargement(width: int) -> int:
    """Whole factor that makes a frame ``width`` px wide at least :data:`MIN_TILE_PX` (1 if already)."""
    return max(1, -(-MIN_TILE_PX // max(1, width)))


def _upscale(frame: np.ndarray, factor: int) -> np.ndarray:
    return frame if factor <= 1 else np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)


def contact_sheet(frames: np.ndarray) -> np.ndarray:
    """Up to :data:`SHEET_FRAMES` frames side by side (tiny frames enlarged to >= 128 px, nearest)."""
    chosen = [frames[i] for i in evenly_spaced(len(frames), SHEET_FRAMES)]
    factor = enlargement(frames.shape[2])
    gap = np.full((frames.shape[1] * factor, 4, 3), 255, dtype=np.uint8)
    tiles: list[np.ndarray] = []
    for index, frame in enumerate(chosen):
        if index:
            tiles.append(gap)
        tiles.append(_upscale(frame, factor))
    return np.concatenate(tiles, axis=1)


def _write_video_samples(video: np.ndarray, folder: Path, samples: Samples, prefix: str = "") -> None:
    from PIL import Image

    frames = first_item_frames(video)
    if len(frames) == 0:
        samples.problems["video"] = "the output video has no frames"
        return
    sheet = folder / f"{prefix}contact_sheet.png"
    Image.fromarray(contact_sheet(frames)).save(sheet, compress_level=PNG_COMPRESS_LEVEL)
    samples.files[sheet.name] = str(sheet)
    factor = enlargement(frames.shape[2])
    images = [Image.fromarray(_upscale(frames[i], factor)) for i in evenly_spaced(len(frames), GIF_FRAMES)]
    if images[0].width > MAX_GIF_WIDTH_PX:
        height = round(images[0].height * MAX_GIF_WIDTH_PX / images[0].width)
        images = [image.resize((MAX_GIF_WIDTH_PX, max(1, height))) for image in images]
    gif = folder / f"{prefix}sample.gif"
    paletted = gif_frames(images)
    paletted[0].save(gif, save_all=True, append_images=paletted[1:], duration=GIF_FRAME_MS, loop=0)
    samples.files[gif.name] = str(gif)


def gif_frames(images: list[Any]) -> list[Any]:
    """``images`` (RGB ``PIL.Image``) as paletted frames for a GIF: each its own 256 colours, by the fast
    octree quantizer (Pillow's save would otherwise convert each frame with its adaptive palette, about
    100x slower on noisy frames)."""
    from PIL import Image

    return [image.quantize(colors=256, method=Image.Quantize.FASTOCTREE) for image in images]


def write_samples(output: Any, workdir: Path, prefix: str = "") -> Samples:
    """Write the samples of ``output`` (a :class:`~tuner.workloads.base.WorkloadOutput`) under ``workdir``;
    ``prefix`` starts each file's name (one input's of several: ``city.contact_sheet.png``)."""
    samples = Samples()
    folder = workdir / SAMPLE_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        samples.problems["folder"] = f"cannot create {folder}: {error}"
        return samples
    if getattr(output, "video", None) is not None:
        try:
            _write_video_samples(np.asarray(output.video), folder, samples, prefix)
        except Exception as error:  # noqa: BLE001 - a sample never fails a trial
            samples.problems["video"] = f"{type(error).__name__}: {error}"
    if getattr(output, "text", None):
        try:
            answer = folder / f"{prefix}answer.txt"
            answer.write_text("\n".join(str(t) for t in output.text)[:MAX_ANSWER_CHARS] + "\n")
            samples.files[answer.name] = str(answer)
        except Exception as error:  # noqa: BLE001
            samples.problems["text"] = f"{type(error).__name__}: {error}"
    return samples
