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
frames rendered from the seed and setting. A speech-to-video stand-in opens the
drawn mouth with the input audio's loudness (:func:`mouth_openings`) and writes
an mp4 with that audio as its AAC track (:func:`write_video`, PyAV), as the real
programs mux the input audio into their output.
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


def simulated_vram_gb(
    width: int,
    height: int,
    infer_frames: int,
    offload_model: bool = False,
    offload_kv_cache: bool = False,
    fp8: bool = False,
    model_gb: float = 14.0,
) -> float:
    """Rough device memory (GB) the real program needs for one clip (SIMULATED model)."""
    activations = 6.0 * (width * height) / (688 * 368) * (infer_frames / 48) ** 2
    weights = model_gb * (0.5 if fp8 else 1.0) * (0.25 if offload_model else 1.0)
    kv = 2.0 * (infer_frames / 48) * (0.2 if offload_kv_cache else 1.0)
    return weights + activations + kv


def fail_out_of_memory(needed_gb: float) -> None:
    """Print PyTorch's CUDA OOM traceback shape on stderr and exit 1 (as the real programs die)."""
    capacity = float(os.environ.get("STANDIN_GPU_MEMORY_GB", "24"))
    tried = max(0.5, needed_gb - capacity * 0.9)
    print(
        "Traceback (most recent call last):\n"
        '  File "minimal_inference/s2v_streaming_interact.py", line 512, in <module>\n'
        "    generate(args, training_settings)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        f"{tried:.2f} GiB. GPU 0 has a total capacity of {capacity:.2f} GiB of which 1.02 GiB is free. "
        "Including non-PyTorch memory, this process has "
        f"{capacity - 1.02:.2f} GiB memory in use. (stand-in: simulated)",
        file=sys.stderr,
    )
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


def read_wav(path: str) -> tuple[np.ndarray, int]:
    """Mono float32 samples in [-1, 1] of a 16-bit PCM WAV file (channels averaged) and its rate in Hz."""
    with wave.open(path, "rb") as handle:
        if handle.getsampwidth() != 2:
            raise ValueError(f"{path}: the stand-in reads 16-bit PCM WAV only")
        channels, rate = handle.getnchannels(), handle.getframerate()
        raw = handle.readframes(handle.getnframes())
    samples = np.frombuffer(raw, dtype="<i2").astype(np.float32).reshape(-1, channels).mean(axis=1) / 32768.0
    return samples.astype(np.float32), rate


def mouth_openings(audio: np.ndarray, rate: int, frames: int, fps: int = FPS) -> np.ndarray:
    """Per-frame mouth opening in [0, 1], float64 (frames,): the RMS of the audio in frame ``t``'s
    display interval ``[t / fps, (t + 1) / fps)`` over the 95th percentile of those RMS values
    (silence past the end of the audio: closed). The mouth opens with the sound, no lag."""
    bounds = np.round(np.arange(frames + 1) * (rate / fps)).astype(np.int64)
    rms = np.array(
        [
            math.sqrt(float(np.mean(np.square(audio[a:b], dtype=np.float64)))) if b > a and a < len(audio) else 0.0
            for a, b in zip(bounds[:-1], np.minimum(bounds[1:], len(audio)))
        ]
    )
    loud = float(np.percentile(rms, 95)) if frames else 0.0
    return np.clip(rms / loud, 0.0, 1.0) if loud > 0 else np.zeros(frames)


def render_frames(
    width: int, height: int, frames: int, seed: int, steps: int, scale: int = 8, openings: np.ndarray | None = None
) -> np.ndarray:
    """Deterministic uint8 RGB frames (T, H/scale, W/scale, 3): a face-like blob whose mouth moves,
    with noise that shrinks as ``steps`` grows (fewer steps, rougher frames). ``openings`` (T,) in
    [0, 1] opens the mouth per frame (:func:`mouth_openings`); without it the mouth cycles every 10 frames."""
    w, h = max(16, (width // scale) // 2 * 2), max(16, (height // scale) // 2 * 2)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([120 + 60 * xx / w, 90 + 40 * yy / h, 150 + 0 * xx], axis=-1)
    face = ((xx - w / 2) / (w / 4)) ** 2 + ((yy - h / 2) / (h / 3)) ** 2 < 1
    video = np.empty((frames, h, w, 3), dtype=np.uint8)
    for t in range(frames):
        frame = base.copy()
        frame[face] = (210, 170, 140)
        opening = float(openings[t]) if openings is not None else 0.5 + 0.5 * math.sin(2 * math.pi * t / 10.0)
        mouth = (np.abs(xx - w / 2) < w / 10) & (np.abs(yy - h * 0.62) < 1 + opening * h / 20)
        frame[mouth] = (60, 20, 20)
        frame += rng.normal(0, 24.0 / max(1, steps), frame.shape)
        video[t] = np.clip(frame, 0, 255).astype(np.uint8)
    return video


def write_video(path: str, video: np.ndarray, fps: int = FPS, audio: tuple[np.ndarray, int] | None = None) -> None:
    """``.npz`` (array ``video``; ``audio`` is not stored) or a container by suffix (``.mp4``) written
    with PyAV: H.264 video (yuv420p, CRF 12, ``fps`` frames per second) and, when ``audio`` =
    (mono float32 samples in [-1, 1], rate in Hz) is given, an AAC track starting at time 0,
    like the real programs' mux of the input audio into their output."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".npz":
        np.savez_compressed(target, video=video)
        return
    import av

    with av.open(str(target), "w") as container:
        stream = container.add_stream("libx264", rate=fps, options={"crf": "12", "preset": "veryfast"})
        stream.width, stream.height, stream.pix_fmt = video.shape[2], video.shape[1], "yuv420p"
        sound = None
        if audio is not None:
            sound = container.add_stream("aac", rate=audio[1])
            sound.layout = "mono"
        for frame in video:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")))
        container.mux(stream.encode(None))
        if sound is not None and audio is not None:
            samples = np.clip(np.asarray(audio[0], dtype=np.float32), -1, 1).reshape(1, -1)
            chunk = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
            chunk.sample_rate, chunk.pts = audio[1], 0
            container.mux(sound.encode(chunk))
            container.mux(sound.encode(None))


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
