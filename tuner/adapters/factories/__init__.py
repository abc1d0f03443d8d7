"""Ready python-adapter factories for common model families (``workload.python.factory``).

* :mod:`.transformers_av` -- Qwen2.5-Omni's thinker (random weights from a published size, or a local
  checkpoint), its inputs built as its processor builds them;
* :mod:`.av_llm` -- an audio-visual LLM from a local checkpoint, through its own processor and chat template;
* :mod:`.diffusers_video` -- a diffusers text/image-to-video pipeline: a local weights directory, or Wan
  built from a published architecture (:mod:`.wan.presets`) with seeded random weights; the settings
  diffusers offers around it (caches, attention kernels, offload, compile): :mod:`.wan.knobs`.

They import transformers / diffusers only when built (neither is a dependency of
the tuner: install the one your model needs in the same environment). Weights are
read with ``local_files_only=True``: nothing downloads during a study.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from tuner.workloads.base import InvalidSetting

PRECISIONS: dict[str, str] = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
"""Precision name (the spec's ``precision`` parameter) -> torch dtype name."""


def torch_dtype(static_params: Mapping[str, Any], default: str = "bf16") -> Any:
    """The torch dtype for ``static_params['precision']``; InvalidSetting for an unknown name."""
    import torch

    precision = str(static_params.get("precision", default))
    if precision not in PRECISIONS:
        raise InvalidSetting(f"precision must be one of {sorted(PRECISIONS)}, not {precision!r}")
    return getattr(torch, PRECISIONS[precision])


def import_named(path: str) -> Any:
    """The object named by ``module:Name`` (e.g. ``diffusers:DiffusionPipeline``)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
