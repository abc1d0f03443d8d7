"""Train the avatar DiT on procedural talking heads and save the weights file.

Usage::

    python -m tuner.workloads.avatar_dit.train [--out PATH] [--steps N] [--threads T] [--seed S]

Objective (rectified flow, the sampler's convention): for ground-truth clip
latents ``x``, noise ``n`` and ``t ~ U(0, 1)`` per clip, the network sees
``x_t = (1 - t) x + t n`` with the reference portrait, the motion frames (the
two ground-truth frames before the clip, slightly noised, or the reference for
a first clip) and the clip's audio windows, and regresses the velocity
``n - x``: squared error over all latent values, weighted ``1 + mouth_weight``
inside the portrait's mouth box and 1 elsewhere (the mouth is a few percent of
the frame but all of the lip-sync), normalised by the sum of the weights.

Every step draws one (resolution, frames) bucket and as many clips as fit a
token budget (:class:`TrainingPlan`), so all resolutions and clip lengths the
workload offers are trained. The run is deterministic for a seed and a thread
count on one machine: fixed seeds, ``torch.use_deterministic_algorithms(True)``
and the thread count set here (default 1: on a shared two-core machine one
thread per job avoids OpenMP oversubscription, which slowed a 2-thread run
about 20x next to another training job). The default plan (3000 steps) takes
about 11 minutes on one core of the development machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from tuner.workloads.avatar_dit.checkpoint import DEFAULT_WEIGHTS, save_checkpoint
from tuner.workloads.avatar_dit.data import TrainingClip, TrainingData
from tuner.workloads.avatar_dit.model import AvatarDiT, AvatarDiTConfig
from tuner.workloads.training import deterministic_torch, warmup_cosine_lr


@dataclass(frozen=True)
class Bucket:
    """Clips of 1..``max_frames`` frames at ``resolution`` pixels, drawn with ``weight``."""

    resolution: int
    max_frames: int
    weight: float


@dataclass(frozen=True)
class TrainingPlan:
    """Everything that decides a training run besides the architecture.

    ``token_budget``: tokens (context + generated, summed over the batch) per
    step; the batch is ``max(1, token_budget // tokens_per_clip)`` clips.
    ``learning_rate``: AdamW peak, linear warm-up over ``warmup_steps`` then
    cosine decay to 5 %. ``mouth_weight``: extra loss weight inside the mouth
    box (see module docs). ``motion_noise``: the largest std of the Gaussian noise
    added to ground-truth motion frames (drawn uniformly per clip), so the
    model tolerates its own slightly wrong frames when clips are chained.
    """

    steps: int = 3000
    seed: int = 0
    threads: int = 1
    learning_rate: float = 2e-3
    warmup_steps: int = 100
    token_budget: int = 2048
    motion_noise: float = 0.05
    mouth_weight: float = 8.0
    log_every: int = 50
    audio_pool: int = 192
    buckets: tuple[Bucket, ...] = (Bucket(32, 32, 0.5), Bucket(48, 16, 0.3), Bucket(64, 8, 0.2))


@dataclass
class TrainingResult:
    """The trained model, the loss of every step and the run's metadata."""

    model: AvatarDiT
    losses: list[float]
    metadata: dict[str, object] = field(default_factory=dict)


def learning_rate_at(step: int, plan: TrainingPlan) -> float:
    """Learning rate of ``step`` (0-based) under the plan's warm-up + cosine schedule."""
    return warmup_cosine_lr(step, plan.learning_rate, plan.warmup_steps, plan.steps)


def flow_matching_loss(
    model: AvatarDiT, clip: TrainingClip, generator: torch.Generator, motion_noise: float, mouth_weight: float
) -> torch.Tensor:
    """Weighted mean squared error of the predicted velocity against ``noise - x`` (see module docs)."""
    x = clip.frames
    b = x.shape[0]
    noise = torch.randn(x.shape, generator=generator)
    t = torch.rand(b, generator=generator)
    x_t = (1.0 - t)[:, None, None, None, None] * x + t[:, None, None, None, None] * noise
    motion_std = torch.rand(b, generator=generator)[:, None, None, None, None] * motion_noise
    motion = clip.motion + motion_std * torch.randn(clip.motion.shape, generator=generator)
    predicted = model(x_t, torch.cat([clip.reference, motion], dim=2), t, clip.audio)
    weights = (1.0 + mouth_weight * clip.mouth).expand_as(x)
    return (weights * (predicted - (noise - x)) ** 2).sum() / weights.sum()


def _draw_bucket(rng: np.random.Generator, plan: TrainingPlan, config: AvatarDiTConfig) -> tuple[int, int, int]:
    """(resolution, frames, batch size) of one step."""
    weights = np.array([bucket.weight for bucket in plan.buckets], dtype=np.float64)
    bucket = plan.buckets[int(rng.choice(len(plan.buckets), p=weights / weights.sum()))]
    frames = int(rng.integers(1, bucket.max_frames + 1))
    batch = max(1, plan.token_budget // config.tokens_per_clip(bucket.resolution, frames))
    return bucket.resolution, frames, batch


def train(config: AvatarDiTConfig, plan: TrainingPlan, log: Callable[[str], None] = print) -> TrainingResult:
    """Train a fresh DiT under ``plan``; deterministic for (config, plan) on one machine.

    Sets torch's thread count to ``plan.threads`` and turns deterministic
    algorithms on for the run, restoring both afterwards. ``log`` receives one
    line every ``plan.log_every`` steps (mean loss of those steps).
    """
    with deterministic_torch(plan.threads, skip_memory_fill=True):  # the fill: a 15 % cost, no effect here
        return _train(config, plan, log)


def _train(config: AvatarDiTConfig, plan: TrainingPlan, log: Callable[[str], None]) -> TrainingResult:
    started = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(plan.seed)
        model = AvatarDiT(config)
    data = TrainingData(plan.seed, config.audio_window, config.motion_frames, audio_pool=plan.audio_pool)
    rng = np.random.default_rng([plan.seed, 1])
    generator = torch.Generator().manual_seed(plan.seed + 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=plan.learning_rate, weight_decay=0.01)
    losses: list[float] = []
    model.train()
    for step in range(plan.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, plan)
        resolution, frames, batch = _draw_bucket(rng, plan, config)
        clip = data.batch(resolution, frames, batch)
        loss = flow_matching_loss(model, clip, generator, plan.motion_noise, plan.mouth_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        if (step + 1) % plan.log_every == 0 or step + 1 == plan.steps:
            window = losses[-plan.log_every :]
            log(
                f"step {step + 1:5d}/{plan.steps}  loss {np.mean(window):.4f}  "
                f"lr {learning_rate_at(step, plan):.2e}  {time.perf_counter() - started:7.1f} s"
            )
    model.eval()
    tail = losses[-min(len(losses), 100) :]
    metadata: dict[str, object] = {
        "steps": plan.steps,
        "seed": plan.seed,
        "threads": plan.threads,
        "final_loss": float(np.mean(tail)),
        "final_loss_steps": len(tail),
        "wall_time_s": round(time.perf_counter() - started, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": str(torch.__version__),
        "plan": {**asdict(plan), "buckets": [asdict(bucket) for bucket in plan.buckets]},
    }
    return TrainingResult(model, losses, metadata)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: train with the default plan and architecture, save the checkpoint."""
    defaults = TrainingPlan()
    parser = argparse.ArgumentParser(
        prog="python -m tuner.workloads.avatar_dit.train", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_WEIGHTS, help="checkpoint path (default: the committed one)"
    )
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--threads", type=int, default=defaults.threads, help="torch threads (fixes the result)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)
    plan = TrainingPlan(steps=args.steps, seed=args.seed, threads=args.threads)
    result = train(AvatarDiTConfig(), plan, log=lambda line: print(line, flush=True))
    save_checkpoint(args.out, result.model, result.metadata)
    print(
        f"saved {args.out} ({args.out.stat().st_size / 1e6:.2f} MB): final loss {result.metadata['final_loss']:.4f}, "
        f"{result.metadata['wall_time_s']} s, {result.metadata['parameters']} parameters",
        flush=True,
    )


if __name__ == "__main__":
    main()
