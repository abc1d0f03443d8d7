"""A SYNTHETIC speech-like test tone as a WAV file, for tests and benches that feed audio to a program."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np


def write_tone_wav(path: Path, seconds: float, rate: int = 16000) -> Path:
    """Write ``seconds`` of a 220 Hz tone, amplitude-modulated at 3 Hz (syllable-like), as 16-bit PCM
    mono at ``rate`` Hz to ``path``; return ``path``."""
    t = np.arange(int(seconds * rate)) / rate
    samples = (0.3 * np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(samples.tobytes())
    return path
