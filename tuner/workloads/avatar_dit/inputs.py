"""Procedural inputs of the avatar workload: speech-like audio, per-frame audio
features and a reference portrait.

Everything here is plain numpy and a pure function of its arguments (a seed
included), so two processes that ask for the same inputs get the same bytes.

* :func:`synth_speech_audio` — mono float32 samples in [-1, 1] at
  :data:`AUDIO_RATE_HZ`: voiced syllable bursts (a gliding pitch with
  formant-shaped harmonics, some with a noisy consonant onset) separated by
  short gaps and the odd longer pause.
* :func:`frame_audio_features` — one feature vector per video frame (log RMS and
  log energies in :data:`FEATURE_BANDS_HZ`, standardised over the real audio,
  plus the loudness-normalised envelope) and a mouth opening in [0, 1] that
  follows the RMS envelope.
* :func:`windowed_audio_features` — the centred window of frame features each
  generated video frame listens to (what the DiT is conditioned on).
* :func:`render_portraits` — a cartoon face (seeded background, skin, hair, face
  shape and feature placement) drawn once per requested mouth opening.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

AUDIO_RATE_HZ = 16_000
"""Sample rate of the synthetic audio, in Hz."""

FEATURE_BANDS_HZ: tuple[tuple[float, float], ...] = (
    (80.0, 300.0),
    (300.0, 1000.0),
    (1000.0, 3000.0),
    (3000.0, 8000.0),
)
"""Frequency bands (Hz, low inclusive, high exclusive) whose energies are features."""

AUDIO_FEATURES_PER_FRAME = 2 + len(FEATURE_BANDS_HZ)
"""Length of one frame's feature vector: log RMS, envelope, then one log energy per band."""

ENVELOPE_CAP = 1.5
"""Ceiling of the envelope feature (RMS over the loud level, see :func:`frame_audio_features`)."""

_FEATURE_CLIP = 3.0  # standardised features are clipped to +-this many std
_LOG_FLOOR = 1e-6


def synth_speech_audio(seconds: float, seed: int, rate_hz: int = AUDIO_RATE_HZ) -> np.ndarray:
    """Speech-like mono audio of ``seconds`` seconds at ``rate_hz``.

    Returns float32 samples of length ``round(seconds * rate_hz)`` with peak
    amplitude 0.8 (all zeros only when the length is too short for a syllable).
    """
    if seconds <= 0:
        raise ValueError(f"audio length must be positive, got {seconds} s")
    rng = np.random.default_rng(seed)
    total = int(round(seconds * rate_hz))
    audio = np.zeros(total, dtype=np.float64)
    speaker_f0_hz = rng.uniform(95.0, 210.0)
    position = int(rng.uniform(0.03, 0.12) * rate_hz)
    while position < total:
        duration_s = rng.uniform(0.09, 0.26)
        length = min(int(duration_s * rate_hz), total - position)
        if length > 0:
            audio[position : position + length] += _syllable(rng, length, duration_s, speaker_f0_hz, rate_hz)
        pause_s = rng.uniform(0.25, 0.45) if rng.random() < 0.15 else rng.uniform(0.03, 0.16)
        position += length + int(pause_s * rate_hz)
    peak = float(np.max(np.abs(audio))) if total else 0.0
    if peak > 0:
        audio *= 0.8 / peak
    return audio.astype(np.float32)


def _syllable(
    rng: np.random.Generator, length: int, duration_s: float, speaker_f0_hz: float, rate_hz: int
) -> np.ndarray:
    """One voiced burst of ``length`` samples (float64, unnormalised)."""
    time_s = np.arange(length) / rate_hz
    glide = rng.uniform(-0.15, 0.15)
    f0_hz = speaker_f0_hz * rng.uniform(0.85, 1.2) * (1.0 + glide * time_s / duration_s)
    phase = 2.0 * math.pi * np.cumsum(f0_hz) / rate_hz
    formants_hz = (rng.uniform(300.0, 900.0), rng.uniform(900.0, 2500.0))
    mean_f0_hz = float(np.mean(f0_hz))
    voiced = np.zeros(length)
    for harmonic in range(1, int(7000.0 / mean_f0_hz) + 1):
        frequency_hz = harmonic * mean_f0_hz
        weight = 0.03 + sum(math.exp(-(((frequency_hz - f) / 180.0) ** 2)) for f in formants_hz)
        voiced += weight * np.sin(harmonic * phase)
    envelope = np.sin(math.pi * np.clip(time_s / duration_s, 0.0, 1.0)) ** 0.6
    burst = voiced * envelope * rng.uniform(0.5, 1.0)
    if rng.random() < 0.5:
        onset = min(length, int(rng.uniform(0.015, 0.04) * rate_hz))
        hiss = np.diff(rng.standard_normal(onset + 1))
        burst[:onset] += 0.3 * hiss * np.linspace(1.0, 0.0, onset)
    return burst


@dataclass(frozen=True)
class FrameAudioFeatures:
    """Per-video-frame audio description.

    ``features``: float32 (frames, :data:`AUDIO_FEATURES_PER_FRAME`): column 0 the
    log RMS and columns 2.. the log band energies, each standardised over the
    frames that lie inside the audio and clipped to +-3; column 1 the envelope,
    ``min(rms / loud, ENVELOPE_CAP)`` with ``loud`` the 95th percentile of the
    frame RMS inside the audio. Frames past the end of the audio describe
    silence. ``mouth_open``: float32 (frames,) in [0, 1], ``min(rms / loud, 1)``.
    """

    features: np.ndarray
    mouth_open: np.ndarray


def frame_audio_features(audio: np.ndarray, rate_hz: int, fps: float, num_frames: int) -> FrameAudioFeatures:
    """Features of ``num_frames`` video frames at ``fps`` over ``audio`` (zero-padded).

    Normalisation statistics come from the frames inside the audio only, so the
    features of frame ``i`` do not depend on ``num_frames``.
    """
    if num_frames < 1:
        raise ValueError(f"need at least one frame, got {num_frames}")
    samples_per_frame = rate_hz / fps
    audio_frames = max(1, int(len(audio) // samples_per_frame))
    computed_frames = max(num_frames, audio_frames)
    bounds = np.round(np.arange(computed_frames + 1) * samples_per_frame).astype(np.int64)
    window_len = max(1, int(round(samples_per_frame)))
    padded = np.zeros(max(int(bounds[-1]) + window_len, len(audio)), dtype=np.float64)
    padded[: len(audio)] = audio
    frequencies_hz = np.fft.rfftfreq(window_len, d=1.0 / rate_hz)
    band_masks = [(frequencies_hz >= low) & (frequencies_hz < high) for low, high in FEATURE_BANDS_HZ]
    taper = np.hanning(window_len)
    raw = np.zeros((computed_frames, 1 + len(FEATURE_BANDS_HZ)))
    rms = np.zeros(computed_frames)
    for frame in range(computed_frames):
        window = padded[int(bounds[frame]) : int(bounds[frame]) + window_len]
        rms[frame] = math.sqrt(float(np.mean(window**2)))
        power = np.abs(np.fft.rfft(window * taper)) ** 2 / window_len
        band_energies = [float(power[mask].mean()) if mask.any() else 0.0 for mask in band_masks]
        raw[frame] = np.log(np.array([rms[frame]] + band_energies) + _LOG_FLOOR)
    mean = raw[:audio_frames].mean(axis=0)
    std = raw[:audio_frames].std(axis=0) + 1e-3
    standardised = np.clip((raw - mean) / std, -_FEATURE_CLIP, _FEATURE_CLIP)
    loud = float(np.percentile(rms[:audio_frames], 95))
    envelope = rms / loud if loud > 0 else np.zeros(computed_frames)
    features = np.concatenate(
        [standardised[:, :1], np.minimum(envelope, ENVELOPE_CAP)[:, None], standardised[:, 1:]], axis=1
    )[:num_frames]
    mouth_open = np.clip(envelope, 0.0, 1.0)
    return FrameAudioFeatures(features.astype(np.float32), mouth_open[:num_frames].astype(np.float32))


def windowed_audio_features(features: np.ndarray, total_frames: int, window: int) -> np.ndarray:
    """The ``window`` frame features centred on each of ``total_frames`` video frames.

    ``features``: (at least ``total_frames + window // 2``, F) from
    :func:`frame_audio_features`. Returns float32 (total_frames, window, F):
    entry ``[i, k]`` is frame ``i + k - window // 2``, clamped at frame 0.
    """
    reach = window // 2
    if len(features) < total_frames + reach:
        raise ValueError(f"need features for {total_frames + reach} frames, got {len(features)}")
    offsets = np.arange(window) - reach
    index = np.maximum(np.arange(total_frames)[:, None] + offsets[None, :], 0)
    return np.ascontiguousarray(features[index], dtype=np.float32)


@dataclass(frozen=True)
class PortraitStyle:
    """Seeded look of the portrait. Colours are RGB in [0, 1]; geometry is in
    image coordinates where both axes run over [-1, 1] (y downwards)."""

    background_top: tuple[float, float, float]
    background_bottom: tuple[float, float, float]
    skin: tuple[float, float, float]
    hair: tuple[float, float, float]
    lips: tuple[float, float, float]
    face_radii: tuple[float, float]
    face_center_y: float
    eye_y: float
    eye_dx: float
    eye_radius: float
    mouth_y: float
    mouth_half_width: float
    mouth_max_half_height: float

    @staticmethod
    def from_seed(seed: int) -> PortraitStyle:
        rng = np.random.default_rng(seed)

        def colour(low: float, high: float) -> tuple[float, float, float]:
            red, green, blue = rng.uniform(low, high, size=3)
            return float(red), float(green), float(blue)

        skin_tone = rng.uniform(0.35, 0.95)
        skin = (skin_tone, skin_tone * rng.uniform(0.7, 0.85), skin_tone * rng.uniform(0.55, 0.75))
        return PortraitStyle(
            background_top=colour(0.1, 0.9),
            background_bottom=colour(0.05, 0.6),
            skin=skin,
            hair=colour(0.02, 0.45),
            lips=(rng.uniform(0.5, 0.8), rng.uniform(0.1, 0.3), rng.uniform(0.15, 0.3)),
            face_radii=(rng.uniform(0.48, 0.62), rng.uniform(0.62, 0.78)),
            face_center_y=rng.uniform(0.0, 0.12),
            eye_y=rng.uniform(-0.22, -0.08),
            eye_dx=rng.uniform(0.18, 0.28),
            eye_radius=rng.uniform(0.06, 0.1),
            mouth_y=rng.uniform(0.3, 0.42),
            mouth_half_width=rng.uniform(0.16, 0.26),
            mouth_max_half_height=rng.uniform(0.1, 0.16),
        )


def _ellipse_alpha(
    x: np.ndarray,
    y: np.ndarray,
    center: tuple[float, float],
    radii: tuple[float | np.ndarray, float | np.ndarray],
    pixel: float,
) -> np.ndarray:
    """Coverage in [0, 1] of an ellipse, with a one-pixel soft edge.

    The signed distance to the edge is measured along the ray from the centre
    (exact on the axes, never too small elsewhere), so a very flat ellipse stays
    a thin sliver instead of bleeding along its major axis.
    """
    radius_x, radius_y = radii
    dx, dy = x - center[0], y - center[1]
    norm = np.sqrt((dx / radius_x) ** 2 + (dy / radius_y) ** 2)
    reach = np.sqrt(dx**2 + dy**2)
    edge = np.where(norm > 1e-9, reach / np.maximum(norm, 1e-9), np.minimum(radius_x, radius_y))
    return np.clip(0.5 - (reach - edge) / pixel, 0.0, 1.0)


def render_portraits(size: int, seed: int, mouth_open: np.ndarray) -> np.ndarray:
    """The seeded face at ``size`` x ``size`` pixels, once per mouth opening.

    ``mouth_open``: (N,) values in [0, 1] (0 = lips nearly closed).
    Returns float32 RGB images (N, size, size, 3) in [0, 1].
    """
    style = PortraitStyle.from_seed(seed)
    pixel = 2.0 / size
    axis = (np.arange(size) + 0.5) * pixel - 1.0
    y, x = np.meshgrid(axis, axis, indexing="ij")
    y, x = y[None], x[None]  # (1, H, W): broadcast over the mouth openings
    top, bottom = np.array(style.background_top), np.array(style.background_bottom)
    image = top + (bottom - top) * ((y[0] + 1.0) / 2.0)[..., None]
    image = np.broadcast_to(image, (len(mouth_open), size, size, 3)).copy()

    def paint(alpha: np.ndarray, rgb: tuple[float, float, float]) -> None:
        image[...] = image * (1.0 - alpha[..., None]) + np.asarray(rgb) * alpha[..., None]

    face_x_radius, face_y_radius = style.face_radii
    paint(
        _ellipse_alpha(x, y, (0.0, style.face_center_y - 0.12), (face_x_radius * 1.12, face_y_radius * 1.05), pixel),
        style.hair,
    )
    paint(_ellipse_alpha(x, y, (0.0, style.face_center_y), style.face_radii, pixel), style.skin)
    for side in (-1.0, 1.0):
        eye_center = (side * style.eye_dx, style.eye_y)
        paint(_ellipse_alpha(x, y, eye_center, (style.eye_radius * 1.5, style.eye_radius), pixel), (0.95, 0.95, 0.95))
        paint(
            _ellipse_alpha(x, y, eye_center, (style.eye_radius * 0.6, style.eye_radius * 0.6), pixel),
            (0.05, 0.05, 0.08),
        )
    opening = np.clip(np.asarray(mouth_open, dtype=np.float64), 0.0, 1.0)[:, None, None]
    lip_half_height = style.mouth_max_half_height * (0.35 + 0.65 * opening)
    paint(_ellipse_alpha(x, y, (0.0, style.mouth_y), (style.mouth_half_width, lip_half_height), pixel), style.lips)
    inner = (style.mouth_half_width * 0.8, np.maximum((lip_half_height - 0.04) * opening, 1e-3))
    paint(_ellipse_alpha(x, y, (0.0, style.mouth_y), inner, pixel), (0.12, 0.02, 0.04))
    return image.astype(np.float32)
