"""A python-adapter factory for a diffusers video pipeline (text- or image-to-video).

``workload.python``::

    factory: tuner.adapters.factories.diffusers_video:make_video_pipeline
    kwargs: {model_path: /weights/Wan2.1-T2V-1.3B-Diffusers, pipeline_class: "diffusers:WanPipeline"}
    reload_on: [precision, cpu_offload, vae_tiling, compile]

``load(static)``: the pipeline from ``model_path`` (local files only) in ``precision``;
``cpu_offload`` -> ``enable_model_cpu_offload()`` (else ``.to(device)``); ``vae_tiling`` ->
``vae.enable_tiling()``; ``compile`` -> ``torch.compile`` of the transformer (or UNet).
``run(params, inputs)``: ``pipe(prompt=inputs.prompt, negative_prompt=inputs.negative_prompt,
num_frames, height, width, num_inference_steps, guidance_scale,
num_videos_per_prompt=batch_size, generator=seeded, output_type="np")``; the frames
become uint8 video (B, T, H, W, 3).

diffusers is not a dependency: the tests drive this factory with a simulated
pipeline class at the diffusers boundary (same calls, random frames); the
adapter machinery it runs in is tested with ``standins.avqa_factory``.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tuner.adapters.factories import import_named, torch_dtype
from tuner.workloads.base import InvalidSetting, WorkloadOutput


class DiffusersVideoModel:
    """``load`` / ``run`` for a diffusers video pipeline (see module docs)."""

    def __init__(self, model_path: str, pipeline_class: str = "diffusers:DiffusionPipeline",
                 device: str = "cuda", seed: int = 0) -> None:
        self.model_path = model_path
        self.pipeline_class = pipeline_class
        self.device = device
        self.seed = seed
        self.pipe: Any = None

    def load(self, static_params: Mapping[str, Any]) -> None:
        import torch

        dtype = torch_dtype(static_params)
        pipeline_type = import_named(self.pipeline_class)
        pipe = pipeline_type.from_pretrained(self.model_path, torch_dtype=dtype,
                                             local_files_only=True)
        if static_params.get("cpu_offload"):
            pipe.enable_model_cpu_offload()
        else:
            pipe.to(self.device)
        if static_params.get("vae_tiling") and hasattr(pipe.vae, "enable_tiling"):
            pipe.vae.enable_tiling()
        if static_params.get("compile"):
            denoiser = "transformer" if getattr(pipe, "transformer", None) is not None else "unet"
            setattr(pipe, denoiser, torch.compile(getattr(pipe, denoiser)))
        self.pipe = pipe

    def unload(self) -> None:
        self.pipe = None

    def run(self, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> WorkloadOutput:
        import torch

        frames, height, width = int(params["num_frames"]), int(params["height"]), int(params["width"])
        if (frames - 1) % 4 or height % 16 or width % 16:
            raise InvalidSetting(f"num_frames must be 4k+1 and height/width multiples of 16 "
                                 f"(got {frames}, {height}x{width})")
        generator = torch.Generator(device="cpu").manual_seed(self.seed)
        result = self.pipe(prompt=str(inputs.get("prompt", "")), negative_prompt=inputs.get("negative_prompt"),
                           num_frames=frames, height=height, width=width,
                           num_inference_steps=int(params["num_inference_steps"]),
                           guidance_scale=float(params.get("guidance_scale", 5.0)),
                           num_videos_per_prompt=int(params.get("batch_size", 1)), generator=generator,
                           output_type="np")
        video = np.asarray(result.frames)
        if video.ndim == 4:
            video = video[None]
        video = (np.clip(video, 0.0, 1.0) * 255).round().astype(np.uint8)
        return WorkloadOutput(video=video, items=video.shape[0], counters={"frames": float(video.shape[1])})

    def synchronize(self) -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()


def make_video_pipeline(**kwargs: Any) -> DiffusersVideoModel:
    """The factory named in ``video_gen.yaml``."""
    return DiffusersVideoModel(**kwargs)
