"""A python-adapter factory for a transformers ``generate()``-based audio-visual LLM.

``workload.python``::

    factory: tuner.adapters.factories.transformers_av:make_av_llm
    kwargs: {model_path: /weights/my-av-llm, model_class: "transformers:AutoModelForCausalLM"}
    reload_on: [precision]

``load(static)``: processor and model from ``model_path`` (local files only), in
``precision`` (``fp16`` | ``bf16`` | ``fp32``) on ``device``. ``run(params, inputs)``
answers ``inputs.questions`` (a list; ``inputs.video`` / ``inputs.audio`` paths shared by
all, or per question ``{question, video, audio}``) in batches of ``batch_size``: frames
sampled at ``video_fps`` capped at ``max_frames``, audio cut to ``max_audio_seconds``
and resampled to ``audio_sample_rate``; ``generate(max_new_tokens, num_beams,
do_sample, use_cache, temperature)``. The processor is called as
``processor(text=..., videos=..., audio=..., sampling_rate=..., return_tensors="pt",
padding=True)`` -- the common shape of audio-visual processors; a model whose
processor differs needs its own ~30-line factory with the same two methods.

Not exercised by the tuner's tests (no transformers model ships with it); the
adapter machinery it runs in is tested with ``standins.avqa_factory``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tuner.adapters.media import read_audio, read_video
from tuner.adapters.factories import import_named, torch_dtype
from tuner.workloads.base import InvalidSetting, WorkloadOutput



def _sample_frames(video: np.ndarray, source_fps: float, fps: float, max_frames: int) -> np.ndarray:
    step = max(1.0, source_fps / fps)
    picks = np.arange(0, video.shape[0], step).astype(int)[:max_frames]
    return video[picks]


def _resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    if rate == target:
        return audio
    positions = np.arange(int(len(audio) * target / rate)) * rate / target
    return np.interp(positions, np.arange(len(audio)), audio).astype(np.float32)


class TransformersAVModel:
    """``load`` / ``run`` for a transformers audio-visual LLM (see module docs)."""

    def __init__(self, model_path: str, model_class: str = "transformers:AutoModelForCausalLM",
                 device: str = "cuda", source_fps: float = 25.0, trust_remote_code: bool = False) -> None:
        self.model_path = model_path
        self.model_class = model_class
        self.device = device
        self.source_fps = source_fps
        self.trust_remote_code = trust_remote_code
        self.model: Any = None
        self.processor: Any = None

    def load(self, static_params: Mapping[str, Any]) -> None:
        import transformers

        dtype = torch_dtype(static_params)
        model_type = import_named(self.model_class)
        self.processor = transformers.AutoProcessor.from_pretrained(
            self.model_path, local_files_only=True, trust_remote_code=self.trust_remote_code)
        self.model = model_type.from_pretrained(
            self.model_path, torch_dtype=dtype, local_files_only=True,
            trust_remote_code=self.trust_remote_code).to(self.device).eval()

    def unload(self) -> None:
        self.model = None
        self.processor = None

    def run(self, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> WorkloadOutput:
        import torch

        questions = list(inputs.get("questions", []))
        if not questions:
            raise InvalidSetting("inputs.questions must be a non-empty list")
        batch_size = int(params.get("batch_size", 1))
        answers: list[str] = []
        new_tokens = 0
        for start in range(0, len(questions), batch_size):
            chunk = [q if isinstance(q, Mapping) else {"question": q} for q in questions[start:start + batch_size]]
            videos, audios = [], []
            for item in chunk:
                video = read_video(Path(item.get("video", inputs["video"])))
                videos.append(_sample_frames(video, self.source_fps, float(params.get("video_fps", 2.0)),
                                             int(params.get("max_frames", 16))))
                samples, rate = read_audio(Path(item.get("audio", inputs["audio"])))
                samples = samples[: int(float(params.get("max_audio_seconds", 10.0)) * rate)]
                audios.append(_resample(samples, rate, int(params.get("audio_sample_rate", 16000))))
            batch = self.processor(text=[str(item["question"]) for item in chunk], videos=videos, audio=audios,
                                   sampling_rate=int(params.get("audio_sample_rate", 16000)),
                                   return_tensors="pt", padding=True).to(self.device)
            generation: dict[str, Any] = {"max_new_tokens": int(params.get("max_new_tokens", 64)),
                                          "num_beams": int(params.get("num_beams", 1)),
                                          "do_sample": bool(params.get("do_sample", False)),
                                          "use_cache": bool(params.get("use_cache", True))}
            if generation["do_sample"]:
                generation["temperature"] = float(params.get("temperature", 0.7))
                torch.manual_seed(int(inputs.get("seed", 0)) + start)
            with torch.inference_mode():
                output = self.model.generate(**batch, **generation)
            prompt_length = batch["input_ids"].shape[1]
            new_tokens += int((output[:, prompt_length:] != getattr(self.processor, "pad_token_id", -1)).sum())
            answers += self.processor.batch_decode(output[:, prompt_length:], skip_special_tokens=True)
        return WorkloadOutput(text=[a.strip() for a in answers], items=len(answers),
                              counters={"new_tokens": float(new_tokens)})

    def synchronize(self) -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()


def make_av_llm(**kwargs: Any) -> TransformersAVModel:
    """The factory named in ``av_llm.yaml``."""
    return TransformersAVModel(**kwargs)
