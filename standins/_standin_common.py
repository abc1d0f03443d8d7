"""Shared parts of the stand-in CLIs (SIMULATED): memory model, fake GPU memory, frame rendering.

A stand-in estimates the device memory the real program would need for a
setting with :func:`simulated_vram_gb` (a rough model: resolution x frames per
clip, quadratic in frames because the DiT attends over all frames of a clip;
offload and fp8 lower it). When the estimate exceeds ``STANDIN_GPU_MEMORY_GB``
(default 24, an RTX 4090) it fails the way PyTorch does: a
``torch.OutOfMemoryError: CUDA out of memory`` traceback on stderr and exit
status 1. Otherwise it holds ``STANDIN_HOST_MB_PER_GB`` MB of host memory per
simulated GB (default 4) while it "generates", so a process-tree memory sampler
has something real to see, sleeps a small simulated compute time and writes
frames rendered from the seed and setting.
"""

from __future__ import annotations

import math
import os
import sys
import time
import wave
from pathlib import Path

import numpy as np

FPS = 25


def simulated_vram_gb(width: int, height: int, infer_frames: int, offload_model: bool = False,
                      offload_kv_cache: bool = False, fp8: bool = False, model_gb: float = 14.0) -> float:
    """Rough device memory (GB) the real program needs for one clip (SIMULATED model)."""
    activations = 6.0 * (width * height) / (688 * 368) * (infer_frames / 48) ** 2
    weights = model_gb * (0.5 if fp8 else 1.0) * (0.25 if offload_model else 1.0)
    kv = 2.0 * (infer_frames / 48) * (0.2 if offload_kv_cache else 1.0)
    return weights + activations + kv


def fail_out_of_memory(needed_gb: float) -> None:
    """Print PyTorch's CUDA OOM traceback shape on stderr and exit 1 (as the real programs die)."""
    capacity = float(os.environ.get("STANDIN_GPU_MEMORY_GB", "24"))
    tried = max(0.5, needed_gb - capacity * 0.9)
    print("Traceback (most recent call last):\n"
          '  File "minimal_inference/s2v_streaming_interact.py", line 512, in <module>\n'
          "    generate(args, training_settings)\n"
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
          f"{tried:.2f} GiB. GPU 0 has a total capacity of {capacity:.2f} GiB of which 1.02 GiB is free. "
          "Including non-PyTorch memory, this process has "
          f"{capacity - 1.02:.2f} GiB memory in use. (stand-in: simulated)", file=sys.stderr)
    sys.exit(1)


def check_memory(needed_gb: float) -> None:
    if needed_gb > float(os.environ.get("STANDIN_GPU_MEMORY_GB", "24")):
        fail_out_of_memory(needed_gb)


def hold_host_memory(needed_gb: float) -> bytearray:
    """Touch ``STANDIN_HOST_MB_PER_GB`` MB per simulated GB of host memory (kept by the caller)."""
    per_gb = float(os.environ.get("STANDIN_HOST_MB_PER_GB", "4"))
    block = bytearray(int(needed_gb * per_gb * 2**20))
    for index in range(0, len(block), 4096):
        block[index] = 1
    return block


def audio_seconds(path: str | None, default: float = 2.0) -> float:
    """Duration of a WAV file (``default`` when none is given)."""
    if not path:
        return default
    with wave.open(path, "rb") as handle:
        return handle.getnframes() / float(handle.getframerate())


def render_frames(width: int, height: int, frames: int, seed: int, steps: int, scale: int = 8) -> np.ndarray:
    """Deterministic uint8 RGB frames (T, H/scale, W/scale, 3): a face-like blob whose mouth moves,
    with noise that shrinks as ``steps`` grows (fewer steps, rougher frames)."""
    w, h = max(16, (width // scale) // 2 * 2), max(16, (height // scale) // 2 * 2)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([120 + 60 * xx / w, 90 + 40 * yy / h, 150 + 0 * xx], axis=-1)
    face = ((xx - w / 2) / (w / 4)) ** 2 + ((yy - h / 2) / (h / 3)) ** 2 < 1
    video = np.empty((frames, h, w, 3), dtype=np.uint8)
    for t in range(frames):
        frame = base.copy()
        frame[face] = (210, 170, 140)
        opening = 0.5 + 0.5 * math.sin(2 * math.pi * t / 10.0)
        mouth = (np.abs(xx - w / 2) < w / 10) & (np.abs(yy - h * 0.62) < 1 + opening * h / 20)
        frame[mouth] = (60, 20, 20)
        frame += rng.normal(0, 24.0 / max(1, steps), frame.shape)
        video[t] = np.clip(frame, 0, 255).astype(np.uint8)
    return video


def write_video(path: str, video: np.ndarray, fps: int = FPS) -> None:
    """``.npz`` (array ``video``) or an mp4 written by OpenCV."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".npz":
        np.savez_compressed(target, video=video)
        return
    import cv2

    writer = cv2.VideoWriter(str(target), cv2.VideoWriter.fourcc(*"mp4v"), fps, (video.shape[2], video.shape[1]))
    for frame in video:
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()


def simulate_compute(seconds: float) -> None:
    """Stand-in compute time (sleep)."""
    time.sleep(max(0.0, seconds))


def str2bool(text: str) -> bool:
    """Like the real programs' ``str2bool``."""
    lowered = text.lower()
    if lowered in ("yes", "true", "t", "y", "1"):
        return True
    if lowered in ("no", "false", "f", "n", "0"):
        return False
    raise ValueError(f"boolean value expected, got {text!r}")
