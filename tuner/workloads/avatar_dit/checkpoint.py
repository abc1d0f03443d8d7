"""Reading and writing the avatar DiT's weights file.

A checkpoint is one ``torch.save`` dict: ``format`` (:data:`CHECKPOINT_FORMAT`),
``config`` (:meth:`AvatarDiTConfig.to_dict`), ``state_dict`` (fp32 tensors) and
``training`` (steps, seed, threads, final loss, wall time in seconds, ...).
It loads with ``weights_only=True``: no code runs when a file is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tuner.errors import WorkloadError
from tuner.workloads.avatar_dit.model import AvatarDiT, AvatarDiTConfig

CHECKPOINT_FORMAT = "tuner.avatar_dit/v1"
"""Value of the ``format`` key of every checkpoint this module writes."""

DEFAULT_WEIGHTS = Path(__file__).resolve().parent / "weights" / "avatar_dit.pt"
"""The committed weights, made by ``python -m tuner.workloads.avatar_dit.train``."""


class WeightsMissing(WorkloadError, FileNotFoundError):
    """The weights file does not exist (with the command that makes it)."""


def save_checkpoint(path: Path, model: AvatarDiT, training: dict[str, Any]) -> None:
    """Write ``model``'s config and fp32 weights with the ``training`` metadata to ``path``."""
    state = {name: tensor.detach().float().cpu().contiguous() for name, tensor in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "format": CHECKPOINT_FORMAT,
            "config": model.config.to_dict(),
            "state_dict": state,
            "training": dict(training),
        },
        path,
    )


def load_checkpoint(path: Path) -> tuple[AvatarDiT, dict[str, Any]]:
    """The model stored at ``path`` (eval mode, CPU) and its training metadata.

    Raises :class:`WeightsMissing` when the file does not exist and ValueError
    when it is not a checkpoint of this format.
    """
    if not path.is_file():
        raise WeightsMissing(
            f"avatar DiT weights not found at {path}; make them with "
            "`python -m tuner.workloads.avatar_dit.train --out <path>` or point inputs['weights'] at a file"
        )
    stored = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(stored, dict) or stored.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a {CHECKPOINT_FORMAT} checkpoint")
    model = AvatarDiT(AvatarDiTConfig.from_dict(stored["config"]))
    model.load_state_dict(stored["state_dict"], strict=True)
    return model.eval(), dict(stored.get("training", {}))
