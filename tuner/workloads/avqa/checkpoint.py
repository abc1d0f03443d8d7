"""Saving and loading AVQA weights: one ``torch.save`` file with everything needed.

File contents (a dict): ``state_dict`` (fp32 tensors), ``config``
(:class:`AVQAConfig` as a dict), ``vocab`` (list of tokens) and ``training``
(metadata: steps, seed, threads, final loss, wall time, torch version...). It is
loaded with ``weights_only=True``: only tensors and plain containers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tuner.workloads.avqa.model import AVQAConfig, AVQAModel, CharTokenizer

DEFAULT_WEIGHTS = Path(__file__).resolve().parent / "weights" / "avqa.pt"
"""The committed weights, produced by ``python -m tuner.workloads.avqa.train``."""


@dataclass
class LoadedModel:
    """A model ready for inference (eval mode, fp32, on CPU) with its tokenizer and metadata."""

    model: AVQAModel
    tokenizer: CharTokenizer
    training: dict[str, Any]
    path: Path


def save_checkpoint(path: Path, model: AVQAModel, tokenizer: CharTokenizer, training: dict[str, Any]) -> None:
    """Write the checkpoint described in the module docs (parent folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().cpu().clone() for name, tensor in model.state_dict().items()}
    torch.save(
        {
            "state_dict": state,
            "config": model.config.to_dict(),
            "vocab": list(tokenizer.vocab),
            "training": dict(training),
        },
        path,
    )


def load_checkpoint(path: Path | str | None = None) -> LoadedModel:
    """Load ``path`` (default :data:`DEFAULT_WEIGHTS`); ``FileNotFoundError`` saying how to make it."""
    resolved = Path(path) if path is not None else DEFAULT_WEIGHTS
    if not resolved.is_file():
        raise FileNotFoundError(
            f"AVQA weights not found at {resolved}; train them with "
            "`python -m tuner.workloads.avqa.train --out <path>` (the default path is "
            f"{DEFAULT_WEIGHTS}) or point inputs['weights'] at an existing file"
        )
    data = torch.load(resolved, map_location="cpu", weights_only=True)
    config = AVQAConfig.from_dict(data["config"])
    model = AVQAModel(config)
    model.load_state_dict(data["state_dict"])
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return LoadedModel(model, CharTokenizer(list(data["vocab"])), dict(data["training"]), resolved)
