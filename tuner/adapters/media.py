"""Readers for the files a command writes: video, audio and text, as :class:`WorkloadOutput` fields.

* video: ``.npz`` with an array ``video`` (uint8, (T, H, W, 3) or (B, T, H, W, 3)),
  ``.npy``, or any container OpenCV decodes (``.mp4``, ``.avi``, ...), returned as
  uint8 RGB (T, H, W, 3);
* audio: ``.wav`` (8/16/32-bit PCM, mixed to mono) or ``.npz`` (``audio``,
  ``audio_rate``), returned as float32 in [-1, 1] and the rate in Hz;
* the audio track of a video container (``.mp4``, ``.mkv``, ``.mov``, ...):
  :func:`read_container_audio` decodes its first audio stream with PyAV (FFmpeg's
  decoders: AAC, MP3, Opus, PCM ...), mixed to mono, in the same form as audio
  files; ``None`` when the container has no audio stream (OpenCV, which reads the
  frames, drops audio);
* text: UTF-8, one answer per line (blank lines dropped).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from tuner.errors import WorkloadError


class MediaError(WorkloadError, ValueError):
    """An output file that cannot be read as the declared kind."""


def read_video(path: Path) -> np.ndarray:
    """The frames of ``path`` as uint8 RGB (see module docs)."""
    if path.suffix == ".npz":
        with np.load(path) as data:
            if "video" not in data:
                raise MediaError(f"{path}: no array named 'video' (has {sorted(data.files)})")
            video = np.asarray(data["video"])
    elif path.suffix == ".npy":
        video = np.load(path)
    else:
        video = _decode_with_opencv(path)
    if video.dtype != np.uint8 or video.ndim not in (4, 5) or video.shape[-1] != 3:
        raise MediaError(
            f"{path}: video must be uint8 (T, H, W, 3) or (B, T, H, W, 3), got {video.dtype} {video.shape}"
        )
    return video


def _decode_with_opencv(path: Path) -> np.ndarray:
    import cv2

    capture = cv2.VideoCapture(str(path))
    frames = []
    try:
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    finally:
        capture.release()
    if not frames:
        raise MediaError(f"{path}: OpenCV decoded no frames")
    return np.stack(frames).astype(np.uint8)


def read_audio(path: Path) -> tuple[np.ndarray, int]:
    """Mono float32 samples in [-1, 1] and the rate in Hz."""
    if path.suffix == ".npz":
        with np.load(path) as data:
            return np.clip(np.asarray(data["audio"], dtype=np.float32), -1, 1), int(data["audio_rate"])
    try:
        with wave.open(str(path), "rb") as handle:
            width, channels, rate = handle.getsampwidth(), handle.getnchannels(), handle.getframerate()
            raw = handle.readframes(handle.getnframes())
    except (wave.Error, EOFError) as error:
        raise MediaError(f"{path}: not a PCM WAV file: {error}") from None
    kinds = {1: (np.uint8, 128.0, 128.0), 2: (np.int16, 0.0, 32768.0), 4: (np.int32, 0.0, 2147483648.0)}
    if width not in kinds:
        raise MediaError(f"{path}: {8 * width}-bit samples are not supported (8, 16 or 32-bit PCM)")
    dtype, offset, scale = kinds[width]
    samples = (np.frombuffer(raw, dtype=dtype).astype(np.float32) - offset) / scale
    mono = samples.reshape(-1, channels).mean(axis=1)
    return np.clip(mono, -1, 1).astype(np.float32), rate


NOT_CONTAINERS = (".npz", ".npy")
"""Video suffixes that are numpy arrays, not media containers: they hold no audio track."""


def is_container(path: Path) -> bool:
    """Whether ``path`` is a media container that may hold an audio track (not ``.npz`` / ``.npy``)."""
    return path.suffix.lower() not in NOT_CONTAINERS


def read_container_audio(path: Path) -> tuple[np.ndarray, int] | None:
    """The first audio stream of the container ``path``: mono float32 samples in [-1, 1] and the rate in Hz.

    Every sample format FFmpeg decodes is converted to float; channels are mixed to
    mono as their mean (as :func:`read_audio` mixes a WAV file). Encoder priming is
    dropped by FFmpeg (the container's edit list); the padding an encoder adds to
    fill its last frame (AAC: up to 1023 samples) is cut to the stream's declared
    duration when the container records one, so sample 0 is the video's time 0.
    Returns ``None`` when the container has no audio stream; raises
    :class:`MediaError` when it cannot be opened or its audio cannot be decoded.
    """
    import av  # PyAV, bundling FFmpeg's libraries; imported here: only containers need it

    try:
        container = av.open(str(path))
    except (av.FFmpegError, OSError) as error:
        raise MediaError(f"{path}: not a media container PyAV can open: {error}") from None
    try:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        rate = int(stream.rate or stream.codec_context.sample_rate or 0)
        if rate <= 0:
            raise MediaError(f"{path}: the audio stream declares no sample rate")
        to_float = av.AudioResampler(format="fltp")  # planar float, same layout and rate
        chunks: list[np.ndarray] = []
        try:
            for frame in container.decode(stream):
                chunks.extend(part.to_ndarray() for part in to_float.resample(frame))
            chunks.extend(part.to_ndarray() for part in to_float.resample(None))
        except av.FFmpegError as error:
            raise MediaError(f"{path}: its audio stream cannot be decoded: {error}") from None
        samples = np.concatenate(chunks, axis=1).mean(axis=0) if chunks else np.zeros(0, dtype=np.float32)
        if stream.duration is not None and stream.time_base is not None:
            declared = int(round(float(stream.duration * stream.time_base) * rate))
            if 0 < declared < len(samples):
                samples = samples[:declared]
    finally:
        container.close()
    return np.clip(samples, -1, 1).astype(np.float32), rate


def read_text(path: Path) -> list[str]:
    """One answer per non-blank line."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
