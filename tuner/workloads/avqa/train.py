"""Train the AVQA model on procedural clips: ``python -m tuner.workloads.avqa.train``.

Options: ``--out PATH`` (default: the committed ``weights/avqa.pt``),
``--steps N``, ``--threads T`` (torch intra-op threads, default 1), ``--seed S``.

Objective: teacher-forced cross-entropy on the answer characters and ``<eos>``
(the prompt is not scored). Each step renders ``clips_per_step`` training clips
(ids below ``HELDOUT_BASE``) and asks all six question types about each, so the
media of a clip is encoded once for six answers. Each step draws one input
setting for its whole batch. A curriculum: the first ``full_only_fraction`` of
the steps see full clips (3-5 s, 8 fps, every frame, 16 kHz, all audio); after
that a step is full with probability ``full_fraction``, else it draws a random
frame rate, frame cap, sample rate and audio length. Labels are always the true
answers, so the model learns to answer from whatever it is given.

Determinism: the seed fixes numpy's and torch's generators, the thread count is
set here and deterministic algorithms are requested, so a rerun with the same
options and torch build reproduces the weights bit for bit (the wall time in
the metadata differs).
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tuner.workloads.avqa.checkpoint import DEFAULT_WEIGHTS, save_checkpoint
from tuner.workloads.avqa.data import (
    HELDOUT_BASE,
    NATIVE_AUDIO_RATE,
    NATIVE_FPS,
    QUESTION_TEXT,
    QUESTION_TYPES,
    clip_facts,
    render_clip,
)
from tuner.workloads.avqa.media import MediaBatch, build_media
from tuner.workloads.avqa.model import EOS, PAD, AVQAConfig, AVQAModel, CharTokenizer, parameter_count
from tuner.workloads.training import deterministic_torch, warmup_cosine_lr


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (stored in the checkpoint metadata)."""

    steps: int = 3000
    clips_per_step: int = 12
    learning_rate: float = 2e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    full_only_fraction: float = 0.4
    full_fraction: float = 0.4
    seed: int = 0
    threads: int = 1


@dataclass(frozen=True)
class InputSetting:
    """The input sizes of one training step."""

    clip_seconds: float
    video_fps: float
    max_frames: int
    audio_rate_hz: int
    audio_seconds: float


@dataclass
class TrainResult:
    model: AVQAModel
    losses: list[float]
    wall_s: float

    @property
    def final_loss(self) -> float:
        """Mean loss of the last 50 steps (or all, if fewer)."""
        tail = self.losses[-50:]
        return float(sum(tail) / len(tail))


def draw_setting(rng: np.random.Generator, full_fraction: float) -> InputSetting:
    """A random input setting (see module docs)."""
    clip_seconds = float(rng.choice([3.0, 3.5, 4.0, 4.5, 5.0]))
    if rng.random() < full_fraction:
        return InputSetting(clip_seconds, NATIVE_FPS, 64, NATIVE_AUDIO_RATE, clip_seconds)
    audio_seconds = clip_seconds if rng.random() < 0.5 else float(rng.uniform(0.5, clip_seconds))
    return InputSetting(
        clip_seconds=clip_seconds,
        video_fps=float(rng.choice([0.5, 1.0, 2.0, 4.0, 8.0])),
        max_frames=int(rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 40])),
        audio_rate_hz=int(rng.choice([8000, 16000])),
        audio_seconds=audio_seconds,
    )


def answer_sequences(
    tokenizer: CharTokenizer, questions: list[str], answers: list[str]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``(inputs, targets, scored)`` for teacher forcing.

    Each row is ``prompt + answer + <eos>`` shifted by one; ``scored`` marks the
    target positions that belong to the answer (and its ``<eos>``).
    """
    rows, prompt_lengths = [], []
    for question, answer in zip(questions, answers):
        prompt = tokenizer.prompt(question)
        rows.append(prompt + tokenizer.encode(answer) + [EOS])
        prompt_lengths.append(len(prompt))
    length = max(len(row) for row in rows)
    padded = torch.full((len(rows), length), PAD, dtype=torch.long)
    scored = torch.zeros((len(rows), length - 1), dtype=torch.bool)
    for index, (row, prompt_length) in enumerate(zip(rows, prompt_lengths)):
        padded[index, : len(row)] = torch.tensor(row)
        scored[index, prompt_length - 1 : len(row) - 1] = True
    return padded[:, :-1], padded[:, 1:], scored


def training_batch(
    rng: np.random.Generator, clips: int, setting: InputSetting, tokenizer: CharTokenizer
) -> tuple[MediaBatch, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Media of ``clips`` fresh training clips and the six questions about each (clip-major)."""
    ids = rng.integers(0, HELDOUT_BASE, size=clips)
    facts = [clip_facts(int(clip_id)) for clip_id in ids]
    media = build_media(
        [render_clip(f, setting.clip_seconds) for f in facts],
        setting.video_fps,
        setting.max_frames,
        setting.audio_rate_hz,
        setting.audio_seconds,
    )
    questions = [QUESTION_TEXT[q] for _ in facts for q in QUESTION_TYPES]
    answers = [f.answer(q) for f in facts for q in QUESTION_TYPES]
    return (media, *answer_sequences(tokenizer, questions, answers))


def sequence_loss(
    model: AVQAModel, media: MediaBatch, inputs: torch.Tensor, targets: torch.Tensor, scored: torch.Tensor
) -> torch.Tensor:
    """Mean cross-entropy over the scored target tokens (clip-major rows, six per clip)."""
    memory = model.encode_media(media.frames, media.frame_seconds, media.audio, media.audio_rate_hz)
    per_clip = inputs.shape[0] // memory.shape[0]
    media_index = torch.arange(memory.shape[0]).repeat_interleave(per_clip)
    positions = torch.arange(inputs.shape[1]).expand_as(inputs)
    logits = model.decode(inputs, positions, inputs != PAD, model.cross_keys_values(memory, media_index))
    return F.cross_entropy(logits[scored], targets[scored])


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warmup, then cosine decay to 5 % of the peak."""
    return warmup_cosine_lr(step, config.learning_rate, config.warmup_steps, config.steps)


def train(
    config: TrainConfig,
    model_config: AVQAConfig = AVQAConfig(),
    log: Callable[[str], None] | None = print,
    log_every: int = 50,
) -> TrainResult:
    """Train a fresh model under ``config`` (see module docs).

    Sets torch's thread count and deterministic mode for the run and restores
    both afterwards; seeds torch's global generator (not restored).
    """
    with deterministic_torch(config.threads):
        return _train(config, model_config, log, log_every)


def _train(
    config: TrainConfig, model_config: AVQAConfig, log: Callable[[str], None] | None, log_every: int
) -> TrainResult:
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    tokenizer = CharTokenizer()
    model = AVQAModel(model_config)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay, betas=(0.9, 0.98)
    )
    losses: list[float] = []
    start = time.perf_counter()
    model.train()
    for step in range(config.steps):
        full_only = step < config.full_only_fraction * config.steps
        setting = draw_setting(rng, 1.0 if full_only else config.full_fraction)
        media, inputs, targets, scored = training_batch(rng, config.clips_per_step, setting, tokenizer)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        loss = sequence_loss(model, media, inputs, targets, scored)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.item()))
        if log is not None and (step + 1) % log_every == 0:
            recent = losses[-log_every:]
            log(
                f"step {step + 1}/{config.steps} loss {sum(recent) / len(recent):.4f} "
                f"({time.perf_counter() - start:.0f} s)"
            )
    model.eval()
    return TrainResult(model, losses, time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train the AVQA model on procedural clips.")
    parser.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS)
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--threads", type=int, default=TrainConfig.threads)
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    args = parser.parse_args(argv)
    config = TrainConfig(steps=args.steps, threads=args.threads, seed=args.seed)
    result = train(config, log=lambda line: print(line, flush=True))
    metadata = {
        **asdict(config),
        "final_loss": result.final_loss,
        "wall_time_s": round(result.wall_s, 1),
        "loss_first_50": float(np.mean(result.losses[:50])),
        "parameters": parameter_count(result.model),
        "torch": str(torch.__version__),
        "machine": platform.processor() or platform.machine(),
        "command": f"python -m tuner.workloads.avqa.train --steps {args.steps} "
        f"--threads {args.threads} --seed {args.seed}",
    }
    save_checkpoint(args.out, result.model, CharTokenizer(), metadata)
    print(
        f"saved {args.out} ({args.out.stat().st_size / 1e6:.2f} MB): final loss "
        f"{result.final_loss:.4f}, {result.wall_s:.0f} s, {metadata['parameters']} parameters"
    )


if __name__ == "__main__":
    main()
