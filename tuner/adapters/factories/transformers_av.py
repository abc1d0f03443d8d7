"""Python-adapter factory for Qwen2.5-Omni's thinker, a transformers ``generate()`` audio-visual LLM.

:func:`make_omni_thinker` (see :class:`OmniThinkerModel`)::

    factory: tuner.adapters.factories.transformers_av:make_omni_thinker
    kwargs: {weights: random, architecture: qwen2.5-omni-7b, seed: 0, device: cuda}
    #   or {weights: /models/Qwen2.5-Omni-7B, device: cuda}      (a local directory)
    reload_on: [precision, attn_implementation]

The real transformers classes (``Qwen2_5OmniThinkerForConditionalGeneration``) run for real:
random weights from a published-size preset (:mod:`.omni_presets`) or a local checkpoint; the
inputs (video patches, log-mel audio, prompt with placeholders) are built as the processor
builds them (:mod:`.av_inputs`), with no processor or tokenizer download.

A model served through its own processor and chat template instead (any local checkpoint that
``AutoProcessor`` and ``AutoModelForMultimodalLM`` load): :mod:`.av_llm`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tuner.adapters.factories import torch_dtype
from tuner.adapters.factories.av_inputs import (
    AUDIO_RATE,
    DEFAULT_MAX_PIXELS,
    DEFAULT_MIN_PIXELS,
    MAX_POSITIONS,
    MediaSettings,
    ThinkerInputs,
    VideoSource,
    build_inputs,
    resample_audio,
    seeded_text_ids,
    synthetic_audio,
)
from tuner.adapters.factories.call_clocks import GenerateClock, device_cuda
from tuner.adapters.factories.omni_presets import TOKENS, build_random_thinker, load_thinker, load_tokenizer
from tuner.adapters.media import read_audio, read_video
from tuner.evaluators.runtime.spans import CallSpans
from tuner.workloads.base import InvalidSetting, WorkloadOutput


class OmniThinkerModel:
    """``load`` / ``run`` for Qwen2.5-Omni's thinker: video + audio + question in, answer text out.

    Factory kwargs: ``weights`` (``"random"`` or a local checkpoint directory), ``architecture``
    (the random preset: ``tiny``, ``qwen2.5-omni-3b``, ``qwen2.5-omni-7b``), ``seed`` (weights,
    synthetic media and seeded prompt ids), ``device``, ``fixed_length`` (decode exactly
    ``max_new_tokens`` tokens by setting ``min_new_tokens`` to it, so EOS cannot end an answer
    early; default: on for random weights, whose answers are noise, off for real ones).

    ``load(static)``: ``precision`` (``fp32`` | ``bf16`` | ``fp16``, default bf16) and
    ``attn_implementation`` (``sdpa`` default | ``eager`` | ``flash_attention_2``).

    ``run(params, inputs)`` -- params: ``video_fps`` (frames sampled per clip second),
    ``max_frames``, ``min_pixels`` / ``max_pixels`` (pixels per resized frame; ``min_pixels`` may
    be an input instead; defaults the Omni processor's 100,352 / 602,112), ``audio_seconds``
    (0: no audio), ``max_new_tokens``, ``num_beams``, ``use_cache``, ``batch_size`` (the request
    repeated); greedy decoding only (``do_sample`` true is refused).
    inputs: ``video`` (a file; else a synthetic clip of ``video_seconds`` s, default 4, at
    ``video_height`` x ``video_width``, default 360 x 640), ``source_fps`` (default 25),
    ``audio`` (a file, resampled to 16 kHz; else a synthetic clip), ``question`` and
    ``system_prompt`` (tokenized when the weights directory has a tokenizer), else
    ``prompt_tokens`` (default 16) seeded question ids after 32 seeded system-prompt ids;
    ``media_seed`` (default the factory's ``seed``) seeds the synthetic clip, audio and question ids,
    so each of a spec's ``cases`` can be another clip / question pair.

    Output: ``text`` = one answer per request, decoded by the tokenizer, or the new token ids
    joined by spaces (random weights have no tokenizer); counters ``video_tokens``,
    ``audio_tokens`` and ``prompt_tokens`` (per request), ``new_tokens`` (all requests),
    ``max_new_tokens_hit``, ``frames``, ``frame_height`` / ``frame_width`` (px). The inputs of
    the last setting are kept (tensors on the device): repeats time ``generate`` alone --
    encoders, prefill and decoding -- not the synthetic media or the feature extraction. Spans prepare /
    model / postprocess and the cost structure (prefill, each new token: :mod:`.call_clocks`) of each call.
    """

    def __init__(
        self,
        weights: str = "random",
        architecture: str = "tiny",
        seed: int = 0,
        device: str = "cuda",
        fixed_length: bool | None = None,
    ) -> None:
        self.weights = str(weights)
        self.architecture = architecture
        self.seed = int(seed)
        self.device = device
        self.fixed_length = (self.weights == "random") if fixed_length is None else bool(fixed_length)
        self.model: Any = None
        self.tokenizer: Any = None
        self._inputs_key: tuple[Any, ...] | None = None
        self._inputs: ThinkerInputs | None = None
        self._spans = CallSpans()
        self._clock: GenerateClock | None = None

    @property
    def random(self) -> bool:
        return self.weights == "random"

    def load(self, static_params: Mapping[str, Any]) -> None:
        dtype = torch_dtype(static_params)
        attention = str(static_params.get("attn_implementation", "sdpa"))
        if self.random:
            self.model = build_random_thinker(self.architecture, self.seed, dtype, self.device, attention)
        else:
            path = Path(self.weights)
            self.model = load_thinker(path, dtype, self.device, attention)
            self.tokenizer = load_tokenizer(path)

    def unload(self) -> None:
        """Drop the model and the kept inputs, and return their device memory before a reload."""
        import gc

        import torch

        self.model = None
        self._inputs, self._inputs_key = None, None
        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def weights_identity(self, inputs: Mapping[str, Any]) -> str:
        """``random:<architecture>:<seed>`` or ``path:<weights directory>``."""
        return f"random:{self.architecture}:{self.seed}" if self.random else f"path:{self.weights}"

    def declared_weights(self, inputs: Mapping[str, Any]) -> dict[str, Path]:
        """The checkpoint's config and weight files (none for random weights)."""
        if self.random:
            return {}
        path = Path(self.weights)
        files = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")) + [path / "config.json"]
        return {file.name: file for file in files if file.is_file()}

    @staticmethod
    def _media_settings(params: Mapping[str, Any], inputs: Mapping[str, Any]) -> MediaSettings:
        min_pixels = params.get("min_pixels", inputs.get("min_pixels", DEFAULT_MIN_PIXELS))
        return MediaSettings(
            video_fps=float(params.get("video_fps", 2.0)),
            max_frames=int(params.get("max_frames", 768)),
            min_pixels=int(min_pixels),
            max_pixels=int(params.get("max_pixels", DEFAULT_MAX_PIXELS)),
            audio_seconds=float(params.get("audio_seconds", 10.0)),
            batch_size=int(params.get("batch_size", 1)),
        )

    def _text_ids(self, inputs: Mapping[str, Any]) -> tuple[list[int], list[int]]:
        """(system prompt ids, question ids)."""
        if self.tokenizer is not None and "question" in inputs:
            system = str(inputs.get("system_prompt", "You are a helpful assistant."))
            encode = self.tokenizer.encode
            return list(encode(system, add_special_tokens=False)), list(
                encode(str(inputs["question"]), add_special_tokens=False)
            )
        seed = media_seed(inputs, self.seed)
        return seeded_text_ids(32, self.seed + 1), seeded_text_ids(int(inputs.get("prompt_tokens", 16)), seed)

    def _source(self, settings: MediaSettings, inputs: Mapping[str, Any]) -> tuple[VideoSource, np.ndarray | None]:
        source_fps = float(inputs.get("source_fps", 25.0))
        if inputs.get("video"):
            frames = read_video(Path(str(inputs["video"])))
            video = VideoSource(len(frames), source_fps, frames.shape[1], frames.shape[2], array=frames)
        else:
            video = VideoSource(
                int(round(float(inputs.get("video_seconds", 4.0)) * source_fps)),
                source_fps,
                int(inputs.get("video_height", 360)),
                int(inputs.get("video_width", 640)),
                seed=media_seed(inputs, self.seed),
            )
        if settings.audio_seconds == 0:
            return video, None
        if inputs.get("audio"):
            samples, rate = read_audio(Path(str(inputs["audio"])))
            return video, resample_audio(samples, rate, AUDIO_RATE)
        return video, synthetic_audio(settings.audio_seconds, media_seed(inputs, self.seed))

    def prepare(self, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> ThinkerInputs:
        """The ``generate`` inputs of this setting, on the device (built once per media setting)."""
        settings = self._media_settings(params, inputs)
        settings.check()
        key = (settings, repr(sorted(inputs.items())))
        if self._inputs is None or key != self._inputs_key:
            self._inputs, self._inputs_key = None, None
            video, audio = self._source(settings, inputs)
            built = build_inputs(settings, video, audio, *self._text_ids(inputs))
            built.tensors = {name: tensor.to(self.device) for name, tensor in built.tensors.items()}
            self._inputs, self._inputs_key = built, key
        return self._inputs

    def _generation(self, params: Mapping[str, Any], prompt_tokens: int) -> dict[str, Any]:
        max_new_tokens, num_beams = int(params.get("max_new_tokens", 64)), int(params.get("num_beams", 1))
        if max_new_tokens < 1 or num_beams < 1:
            raise InvalidSetting(f"max_new_tokens and num_beams must be >= 1, not {max_new_tokens} and {num_beams}")
        if bool(params.get("do_sample", False)):
            raise InvalidSetting("this factory decodes greedily (beam search with num_beams > 1); do_sample is off")
        if prompt_tokens + max_new_tokens > MAX_POSITIONS:
            raise InvalidSetting(
                f"{prompt_tokens} prompt + {max_new_tokens} new tokens exceed the thinker's {MAX_POSITIONS} positions"
            )
        generation = {
            "max_new_tokens": max_new_tokens,
            "num_beams": num_beams,
            "do_sample": False,
            "use_cache": bool(params.get("use_cache", True)),
        }
        if self.fixed_length:
            generation["min_new_tokens"] = max_new_tokens
        return generation

    def run(self, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> WorkloadOutput:
        import torch

        if self.model is None:
            raise RuntimeError("run() before load()")
        self._spans.begin()
        clock = self._clock = self._clock or GenerateClock(device_cuda(self.device))
        clock.begin()
        prepared = self.prepare(params, inputs)
        generation = self._generation(params, prepared.prompt_tokens)
        self._spans.mark("prepare")
        with torch.inference_mode():
            output = clock.generate(self.model, **prepared.tensors, **generation)
            output = output.cpu()
        self._spans.mark("model")
        answers = [_until_eos(row) for row in output[:, prepared.prompt_tokens :].tolist()]
        if self.tokenizer is not None:
            texts = [str(text).strip() for text in self.tokenizer.batch_decode(answers, skip_special_tokens=True)]
        else:
            texts = [" ".join(str(token) for token in answer) for answer in answers]
        limit = generation["max_new_tokens"]
        counters = {
            "video_tokens": prepared.video_tokens,
            "audio_tokens": prepared.audio_tokens,
            "prompt_tokens": prepared.prompt_tokens,
            "new_tokens": sum(len(a) for a in answers),
            "max_new_tokens_hit": sum(len(a) >= limit for a in answers),
            "frames": prepared.frames,
            "frame_height": prepared.frame_size[0],
            "frame_width": prepared.frame_size[1],
        }
        self._spans.mark("postprocess")
        return WorkloadOutput(text=texts, items=len(texts), counters={k: float(v) for k, v in counters.items()})

    def call_spans(self) -> dict[str, float]:
        """The last call's seconds: ``prepare`` (the kept inputs, built at a new media setting), ``model``
        (``generate`` and its ids' host copy) and ``postprocess`` (answers decoded):
        :mod:`tuner.evaluators.runtime.spans`."""
        return self._spans.seconds()

    def call_structure(self) -> dict[str, Any] | None:
        """The last call's structure (:mod:`.call_clocks`): ``prefill`` (the encoders and the prefill: time to the
        first new token's logits), ``tokens`` (each further decoding step), inside ``model``."""
        return self._clock.report() if self._clock is not None else None

    def synchronize(self) -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()


def _until_eos(tokens: list[int]) -> list[int]:
    """The answer's tokens up to (without) the first end-of-answer / pad id."""
    for position, token in enumerate(tokens):
        if token in TOKENS.eos:
            return tokens[:position]
    return tokens


def make_omni_thinker(**kwargs: Any) -> OmniThinkerModel:
    """The factory named in ``av_omni.yaml`` / ``av_omni_tiny_cpu.yaml`` (kwargs: :class:`OmniThinkerModel`)."""
    return OmniThinkerModel(**kwargs)


def media_seed(inputs: Mapping[str, Any], default: int) -> int:
    """The seed of the synthetic clip, audio and question ids: ``inputs["media_seed"]``, else ``default``."""
    return int(inputs.get("media_seed", default))
