"""Turning rendered clips into model inputs: frame sampling, audio truncation and resampling.

This is the request-side preprocessing a server does before the model runs, so
the workload runs it inside the timed call. Clips must share one length so
their frames and audio stack into one batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tuner.workloads.avqa.data import NATIVE_AUDIO_RATE, NATIVE_FPS, Clip, sample_frame_indices


@dataclass(frozen=True)
class MediaBatch:
    """Model inputs of a batch: ``frames`` uint8 (B, T, H, W, 3), ``frame_seconds`` (T,),
    ``audio`` float32 (B, S) at ``audio_rate_hz`` (S may be 0)."""

    frames: torch.Tensor
    frame_seconds: torch.Tensor
    audio: torch.Tensor
    audio_rate_hz: int

    @property
    def audio_seconds(self) -> float:
        return self.audio.shape[1] / self.audio_rate_hz


def resample_audio(audio: torch.Tensor, from_hz: int, to_hz: int) -> torch.Tensor:
    """Band-limited resampling of ``audio`` (B, S) along the last axis via the real FFT.

    Down-sampling drops every component at or above the new Nyquist frequency
    (an ideal low-pass); the output has ``round(S * to_hz / from_hz)`` samples.
    """
    if from_hz == to_hz or audio.shape[-1] == 0:
        return audio
    samples = audio.shape[-1]
    target = int(round(samples * to_hz / from_hz))
    spectrum = torch.fft.rfft(audio.double(), dim=-1)
    bins = target // 2 + 1
    if bins <= spectrum.shape[-1]:
        spectrum = spectrum[..., :bins]
    else:
        spectrum = torch.nn.functional.pad(spectrum, (0, bins - spectrum.shape[-1]))
    return (torch.fft.irfft(spectrum, n=target, dim=-1) * (target / samples)).float().clamp(-1.0, 1.0)


def build_media(
    clips: Sequence[Clip],
    video_fps: float,
    max_frames: int,
    audio_rate_hz: int,
    max_audio_seconds: float,
    device: torch.device | str = "cpu",
) -> MediaBatch:
    """Sample frames at ``video_fps`` (capped at ``max_frames``), keep the first
    ``max_audio_seconds`` of audio, resample it to ``audio_rate_hz``."""
    seconds = clips[0].seconds
    if any(clip.seconds != seconds for clip in clips):
        raise ValueError("clips of one batch must have the same length")
    indices = sample_frame_indices(seconds, video_fps, max_frames)
    frames = torch.from_numpy(np.stack([clip.frames[indices] for clip in clips])).to(device)
    frame_seconds = torch.from_numpy(indices.astype(np.float32) / NATIVE_FPS).to(device)
    keep = min(int(round(max_audio_seconds * NATIVE_AUDIO_RATE)), clips[0].audio.shape[0])
    audio = torch.from_numpy(np.stack([clip.audio[:keep] for clip in clips])).to(device)
    return MediaBatch(frames, frame_seconds, resample_audio(audio, NATIVE_AUDIO_RATE, audio_rate_hz), audio_rate_hz)
