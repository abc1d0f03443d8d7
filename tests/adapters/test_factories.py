"""The ready python-adapter factories, driven at the library boundary.

diffusers and transformers are not dependencies, so the diffusers factory is
driven with ``SimulatedVideoPipeline`` below: a stand-in for a diffusers
pipeline class (``from_pretrained``, offload / device / tiling calls, a
``__call__`` returning float frames), recording what the factory asked of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tuner.adapters.factories import PRECISIONS, import_named, torch_dtype
from tuner.adapters.factories.diffusers_video import make_video_pipeline
from tuner.workloads.base import InvalidSetting


class _SimulatedVae:
    def __init__(self) -> None:
        self.tiled = False

    def enable_tiling(self) -> None:
        self.tiled = True


class _Frames:
    def __init__(self, frames: np.ndarray) -> None:
        self.frames = frames


class SimulatedVideoPipeline:
    """Simulated diffusers video pipeline (test stand-in): records calls, returns seeded random frames."""

    loaded: list[dict[str, Any]] = []

    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype
        self.vae = _SimulatedVae()
        self.transformer = torch.nn.Identity()
        self.calls: list[str] = []

    @classmethod
    def from_pretrained(cls, path: str, dtype: Any, local_files_only: bool) -> SimulatedVideoPipeline:
        cls.loaded.append({"path": path, "dtype": dtype, "local_files_only": local_files_only})
        return cls(dtype)

    def enable_model_cpu_offload(self, device: str | None = None) -> None:
        self.calls.append(f"offload:{device}")

    def to(self, device: str) -> SimulatedVideoPipeline:
        self.calls.append(f"to:{device}")
        return self

    def __call__(self, **kwargs: Any) -> _Frames:
        self.calls.append("call")
        generator = kwargs["generator"]
        shape = (kwargs["num_videos_per_prompt"], kwargs["num_frames"], kwargs["height"], kwargs["width"], 3)
        return _Frames(torch.rand(shape, generator=generator).numpy())


def test_precision_names_map_to_torch_dtypes_and_unknown_ones_are_refused() -> None:
    assert {name: torch_dtype({"precision": name}) for name in PRECISIONS} == {
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
        "fp32": torch.float32,
    }
    assert torch_dtype({}) is torch.bfloat16
    with pytest.raises(InvalidSetting, match="precision must be one of"):
        torch_dtype({"precision": "int3"})
    assert import_named("numpy:asarray") is np.asarray


def test_diffusers_factory_loads_locally_applies_static_params_and_returns_uint8_video() -> None:
    """A weights directory: read with local files only, the VAE in its own dtype (fp32 by default),
    offload from the static parameters, VAE tiling from the run's. (The real Wan pipeline built from
    its config: tests/adapters/test_diffusers_wan.py.)"""
    model = make_video_pipeline(
        model_path="/weights/video", pipeline_class=f"{__name__}:SimulatedVideoPipeline", device="cuda", seed=3
    )
    model.load({"precision": "bf16", "cpu_offload": True, "compile": False})
    assert SimulatedVideoPipeline.loaded[-1] == {
        "path": "/weights/video",
        "local_files_only": True,
        "dtype": {"default": torch.bfloat16, "vae": torch.float32},
    }
    pipe = model.pipe
    assert pipe.calls == ["offload:cuda"] and not pipe.vae.tiled
    assert model.weights_identity({}) == "path:/weights/video"
    params = {"num_frames": 5, "height": 32, "width": 48, "num_inference_steps": 2, "batch_size": 2, "vae_tiling": True}
    first, second = model.run(params, {"prompt": "a cat"}), model.run(params, {"prompt": "a cat"})
    assert pipe.vae.tiled
    assert first.video is not None and first.video.shape == (2, 5, 32, 48, 3) and first.video.dtype == np.uint8
    assert first.items == 2 and np.array_equal(first.video, second.video)  # seeded generator
    with pytest.raises(InvalidSetting, match="4k\\+1"):
        model.run({**params, "num_frames": 6}, {})
    model.load({"precision": "fp32", "vae_dtype": "bf16"})
    assert SimulatedVideoPipeline.loaded[-1]["dtype"] == {"default": torch.float32, "vae": torch.bfloat16}
    assert model.pipe.calls == ["to:cuda"] and not model.pipe.vae.tiled
    cpu_model = make_video_pipeline(
        model_path="/weights/video", pipeline_class=f"{__name__}:SimulatedVideoPipeline", device="cpu"
    )
    with pytest.raises(InvalidSetting, match="needs an accelerator"):
        cpu_model.load({"precision": "fp32", "offload": "model"})
