"""Procedural audio-visual QA data: moving, flashing shapes with beeping audio.

Every clip is a pure function of its integer ``clip_id`` (numpy
``default_rng([clip_id, salt])``), so two processes asking for the same clip get
the same bytes.

A clip (:class:`ClipFacts`, rendered by :func:`render_clip`)
------------------------------------------------------------
* Video at :data:`NATIVE_FPS` (8 frames/s), :data:`FRAME_SIZE` x
  :data:`FRAME_SIZE` RGB uint8, ``clip_seconds`` long: one shape (circle /
  square / triangle) of one colour (red / green / blue / yellow) moving in a
  straight line (left / right / up / down) over a noisy grey background. The
  shape *flashes* (vanishes for :data:`FLASH_FRAMES` native frames = 0.25 s)
  zero to three times.
* Audio at :data:`NATIVE_AUDIO_RATE` (16 kHz) mono float32 in [-1, 1]: two to
  four beeps at random times (>= 0.3 s apart), whose pitch steps up or down by
  a factor 1.25-1.6 per beep (a rising series can end above 4 kHz, where 8 kHz
  audio has nothing), over faint noise. Flashes and beeps are placed by
  :func:`spread_starts`, so their timing does not give their number away.

Questions (:data:`QUESTION_TYPES`) and what each needs
------------------------------------------------------
``shape`` / ``colour``: one visible frame. ``direction``: two visible frames
far enough apart. ``pitch``: two beeps heard (enough audio seconds, and a
sample rate whose Nyquist frequency covers the beeps). ``beeps``: all the
audio (beeps fall anywhere in the clip). ``flashes``: frames dense enough
in time to catch 0.25 s gaps (>= 4 frames/s after the ``max_frames`` cap).
Answers are one lowercase word each (see :data:`ANSWERS`).

Splits
------
Training clips use ids in ``[0, HELDOUT_BASE)``; the held-out question set
uses clip ids ``HELDOUT_BASE + i`` for question ``i``, whose type is
``QUESTION_TYPES[i % 6]`` (so any 6 consecutive questions cover every type).
:func:`ground_truth` lists the answers of a held-out range; run
``python -m tuner.workloads.avqa.data --num-questions 12`` to print them as a
YAML list for a spec's ``inputs.ground_truth``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

NATIVE_FPS = 8
"""Frames per second of a rendered clip."""
FRAME_SIZE = 32
"""Side of a rendered frame, pixels."""
NATIVE_AUDIO_RATE = 16_000
"""Sample rate of a rendered clip's audio, Hz."""
DEFAULT_CLIP_SECONDS = 4.0
"""Clip length used by the held-out set unless told otherwise, seconds."""
CLIP_SECONDS_RANGE = (2.0, 6.0)
"""Clip lengths accepted, seconds (the committed model was trained on 3-5 s)."""
FLASH_FRAMES = 2
"""Native frames the shape stays hidden per flash (0.25 s)."""
HELDOUT_BASE = 10_000_000
"""Clip ids at and above this belong to the held-out split."""

SHAPES = ("circle", "square", "triangle")
COLOURS = ("red", "green", "blue", "yellow")
DIRECTIONS = ("left", "right", "up", "down")
PITCHES = ("up", "down")
NUMBER_WORDS = ("zero", "one", "two", "three", "four")
BEEP_COUNTS = (2, 3, 4)
FLASH_COUNTS = (0, 1, 2, 3)

QUESTION_TYPES = ("shape", "colour", "direction", "pitch", "beeps", "flashes")
QUESTION_TEXT: dict[str, str] = {
    "shape": "what shape is it?",
    "colour": "what colour is the shape?",
    "direction": "which way does it move?",
    "pitch": "do the beeps go up or down?",
    "beeps": "how many beeps are there?",
    "flashes": "how many times does it flash?",
}
ANSWERS: dict[str, tuple[str, ...]] = {
    "shape": SHAPES,
    "colour": COLOURS,
    "direction": DIRECTIONS,
    "pitch": PITCHES,
    "beeps": tuple(NUMBER_WORDS[n] for n in BEEP_COUNTS),
    "flashes": tuple(NUMBER_WORDS[n] for n in FLASH_COUNTS),
}
"""Possible answers per question type (chance = 1 / len)."""

_RGB = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (50, 80, 235), "yellow": (230, 220, 40)}
_STEP = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0)}


@dataclass(frozen=True)
class ClipFacts:
    """The ground truth of one clip (answers) plus the nuisance values that render it."""

    clip_id: int
    shape: str
    colour: str
    direction: str
    pitch: str
    beeps: int
    flashes: int
    radius_px: float
    travel_px: float
    start_xy: tuple[float, float]
    rgb: tuple[int, int, int]
    background: int
    flash_spread: tuple[float, ...]
    beep_spread: tuple[float, ...]
    base_hz: float
    pitch_ratio: float
    beep_seconds: float

    def answer(self, question_type: str) -> str:
        """The one-word ground-truth answer to ``question_type``."""
        values = {
            "shape": self.shape,
            "colour": self.colour,
            "direction": self.direction,
            "pitch": self.pitch,
            "beeps": NUMBER_WORDS[self.beeps],
            "flashes": NUMBER_WORDS[self.flashes],
        }
        return values[question_type]


@dataclass(frozen=True)
class Question:
    """One QA item: which clip, which question type, the text and the answer."""

    clip_id: int
    question_type: str
    text: str
    answer: str


@dataclass(frozen=True)
class Clip:
    """A rendered clip: ``frames`` uint8 (T, H, W, 3) at NATIVE_FPS, ``audio`` float32 at 16 kHz."""

    frames: np.ndarray
    audio: np.ndarray
    seconds: float


def clip_facts(clip_id: int) -> ClipFacts:
    """Draw the facts of clip ``clip_id`` (independent of the clip's length)."""
    rng = np.random.default_rng([int(clip_id), 0xA7A])
    shape = SHAPES[rng.integers(len(SHAPES))]
    colour = COLOURS[rng.integers(len(COLOURS))]
    direction = DIRECTIONS[rng.integers(len(DIRECTIONS))]
    radius = float(rng.uniform(4.5, 6.5))
    travel = float(rng.uniform(10.0, 15.0))
    margin = radius + 1.0
    dx, dy = _STEP[direction]
    lo_x, hi_x = margin - min(dx, 0) * travel, FRAME_SIZE - margin - max(dx, 0) * travel
    lo_y, hi_y = margin - min(dy, 0) * travel, FRAME_SIZE - margin - max(dy, 0) * travel
    start = (float(rng.uniform(lo_x, hi_x)), float(rng.uniform(lo_y, hi_y)))
    jitter = rng.integers(-25, 26, size=3)
    rgb = tuple(int(np.clip(c + j, 0, 255)) for c, j in zip(_RGB[colour], jitter))
    flashes = int(FLASH_COUNTS[rng.integers(len(FLASH_COUNTS))])
    beeps = int(BEEP_COUNTS[rng.integers(len(BEEP_COUNTS))])
    return ClipFacts(
        clip_id=int(clip_id),
        shape=shape,
        colour=colour,
        direction=direction,
        pitch=PITCHES[rng.integers(len(PITCHES))],
        beeps=beeps,
        flashes=flashes,
        radius_px=radius,
        travel_px=travel,
        start_xy=start,
        rgb=(rgb[0], rgb[1], rgb[2]),
        background=int(rng.integers(20, 90)),
        flash_spread=tuple(float(p) for p in rng.dirichlet(np.ones(flashes + 1))),
        beep_spread=tuple(float(p) for p in rng.dirichlet(np.ones(beeps + 1))),
        base_hz=float(rng.uniform(350.0, 1300.0)),
        pitch_ratio=float(rng.uniform(1.25, 1.6)),
        beep_seconds=float(rng.uniform(0.12, 0.22)),
    )


def spread_starts(spread: tuple[float, ...], total: float, item: float, gap: float, margin: float) -> list[float]:
    """Starts of ``len(spread) - 1`` items of length ``item`` placed in ``[margin, total - margin]``.

    Items keep at least ``gap`` between them; the slack is shared out in the
    proportions ``spread`` (one more than the items, summing to 1), so where
    the items fall says nothing about how many there are.
    """
    count = len(spread) - 1
    slack = max(0.0, total - 2 * margin - count * item - (count - 1) * gap)
    cumulative = np.cumsum(spread[:count]) * slack
    return [margin + float(cumulative[k]) + k * (item + gap) for k in range(count)]


def _flash_starts(facts: ClipFacts, frames: int) -> list[int]:
    """First native frame of each flash: >= 3 visible frames apart, never the first or last frame."""
    starts = spread_starts(facts.flash_spread, frames, FLASH_FRAMES, 3, 1)
    return [int(np.floor(start + 1e-9)) for start in starts]


def render_clip(facts: ClipFacts, seconds: float = DEFAULT_CLIP_SECONDS) -> Clip:
    """Render ``facts`` as a ``seconds``-long clip (video at NATIVE_FPS, audio at 16 kHz)."""
    if not CLIP_SECONDS_RANGE[0] <= seconds <= CLIP_SECONDS_RANGE[1]:
        raise ValueError(f"clip_seconds={seconds} outside {CLIP_SECONDS_RANGE}")
    rng = np.random.default_rng([facts.clip_id, 0xF12A, int(round(seconds * 1000))])
    count = int(round(seconds * NATIVE_FPS))
    progress = np.arange(count) / max(count - 1, 1)
    dx, dy = _STEP[facts.direction]
    cx = facts.start_xy[0] + dx * facts.travel_px * progress
    cy = facts.start_xy[1] + dy * facts.travel_px * progress
    grid = np.arange(FRAME_SIZE) + 0.5
    x = grid[None, None, :] - cx[:, None, None]
    y = grid[None, :, None] - cy[:, None, None]
    r = facts.radius_px
    if facts.shape == "circle":
        mask = x * x + y * y <= r * r
    elif facts.shape == "square":
        mask = (np.abs(x) <= 0.82 * r) & (np.abs(y) <= 0.82 * r)
    else:  # triangle pointing up: apex at -r, base at +0.8 r
        mask = (y >= -r) & (y <= 0.8 * r) & (np.abs(x) <= (y + r) * 0.6)
    hidden = np.zeros(count, dtype=bool)
    for start in _flash_starts(facts, count):
        hidden[start : start + FLASH_FRAMES] = True
    mask &= ~hidden[:, None, None]
    noise = rng.normal(0.0, 7.0, size=(count, FRAME_SIZE, FRAME_SIZE, 3))
    frames = np.full((count, FRAME_SIZE, FRAME_SIZE, 3), float(facts.background)) + noise
    frames[mask] = np.asarray(facts.rgb, dtype=np.float64) + noise[mask] * 0.5
    video = np.clip(np.round(frames), 0, 255).astype(np.uint8)
    return Clip(frames=video, audio=_render_audio(facts, seconds, rng), seconds=float(seconds))


def _render_audio(facts: ClipFacts, seconds: float, rng: np.random.Generator) -> np.ndarray:
    total = int(round(seconds * NATIVE_AUDIO_RATE))
    audio = rng.normal(0.0, 0.01, size=total)
    length = int(facts.beep_seconds * NATIVE_AUDIO_RATE)
    t = np.arange(length) / NATIVE_AUDIO_RATE
    ramp = min(int(0.01 * NATIVE_AUDIO_RATE), length // 2)
    envelope = np.ones(length)
    envelope[:ramp] = np.linspace(0.0, 1.0, ramp)
    envelope[length - ramp :] = np.linspace(1.0, 0.0, ramp)
    ratio = facts.pitch_ratio if facts.pitch == "up" else 1.0 / facts.pitch_ratio
    first_hz = facts.base_hz if facts.pitch == "up" else facts.base_hz * facts.pitch_ratio ** (facts.beeps - 1)
    starts = spread_starts(facts.beep_spread, seconds, facts.beep_seconds, 0.3, 0.1)
    for k, start_s in enumerate(starts):
        start = min(int(start_s * NATIVE_AUDIO_RATE), total - length)
        tone = np.sin(2 * np.pi * first_hz * ratio**k * t + rng.uniform(0, 2 * np.pi))
        audio[start : start + length] += rng.uniform(0.3, 0.5) * envelope * tone
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


def heldout_questions(num_questions: int, first: int = 0) -> list[Question]:
    """Held-out questions ``first .. first + num_questions - 1`` (see module docs)."""
    if num_questions < 1 or first < 0:
        raise ValueError(f"need num_questions >= 1 and first >= 0, got {num_questions}, {first}")
    questions = []
    for index in range(first, first + num_questions):
        question_type = QUESTION_TYPES[index % len(QUESTION_TYPES)]
        facts = clip_facts(HELDOUT_BASE + index)
        questions.append(
            Question(facts.clip_id, question_type, QUESTION_TEXT[question_type], facts.answer(question_type))
        )
    return questions


def ground_truth(num_questions: int, first: int = 0) -> list[str]:
    """Ground-truth answers of the held-out questions the workload answers for these inputs."""
    return [question.answer for question in heldout_questions(num_questions, first)]


def sample_frame_indices(clip_seconds: float, video_fps: float, max_frames: int) -> np.ndarray:
    """Native frame indices read at ``video_fps`` (frames at t = i / fps), capped to ``max_frames``.

    Over the cap, ``max_frames`` of those times are kept, evenly spaced from the
    first to the last (the whole clip stays covered, more sparsely). Returns
    int64 indices into a clip of ``round(clip_seconds * NATIVE_FPS)`` frames.
    """
    if not 0 < video_fps <= NATIVE_FPS:
        raise ValueError(f"video_fps={video_fps} outside (0, {NATIVE_FPS}]")
    if max_frames < 1:
        raise ValueError(f"max_frames={max_frames} is below 1")
    native = int(round(clip_seconds * NATIVE_FPS))
    count = max(1, int(math.floor(clip_seconds * video_fps + 1e-9)))
    indices = np.minimum(np.round(np.arange(count) / video_fps * NATIVE_FPS).astype(np.int64), native - 1)
    if count > max_frames:
        keep = np.round(np.linspace(0, count - 1, max_frames)).astype(np.int64)
        indices = indices[keep]
    return indices


def _main() -> None:
    parser = argparse.ArgumentParser(description="Print held-out ground truth as a YAML list.")
    parser.add_argument("--num-questions", type=int, default=12)
    parser.add_argument("--first", type=int, default=0)
    args = parser.parse_args()
    for question in heldout_questions(args.num_questions, args.first):
        print(f"    - {question.answer}    # {question.question_type}, clip {question.clip_id}")


if __name__ == "__main__":
    _main()
