"""Python-adapter factory for an audio-visual LLM served through transformers' own processor and ``generate()``.

::

    factory: tuner.adapters.factories.av_llm:make_av_llm
    kwargs: {model_path: /weights/my-av-llm, model_class: "transformers:AutoModelForMultimodalLM", device: cuda}
    reload_on: [precision]

What the checkpoint (a LOCAL directory, read with ``local_files_only``: nothing downloads) must offer:

* a processor (``AutoProcessor``) with a tokenizer and a chat template that places a video and an
  audio clip for the content items ``{"type": "video"}`` / ``{"type": "audio"}``, called as
  ``processor(text=prompts, videos=frames, audio=clips, sampling_rate=..., return_tensors="pt",
  padding=True)`` (left padding);
* a decoder-only model with ``generate()`` that ``model_class`` loads (default transformers 5's
  ``AutoModelForMultimodalLM``; ``trust_remote_code: true`` for a checkpoint that ships its code).

Tested with the real ``Qwen2_5OmniProcessor`` and ``Qwen2_5OmniThinkerForConditionalGeneration``
classes (a tiny checkpoint built from a config, tests/adapters/test_transformers_av_llm.py). For a
full Qwen2.5-Omni checkpoint (thinker + talker), :func:`~.transformers_av.make_omni_thinker` loads
the thinker alone.

``load(static)``: ``precision`` (``fp16`` | ``bf16`` | ``fp32``, default bf16), passed as
transformers 5's ``dtype=``; the model moved to ``device``.

``run(params, inputs)`` answers ``inputs.questions`` (a non-empty list of strings, or of
``{question, video, audio}`` mappings; ``inputs.video`` / ``inputs.audio`` are the files shared by
all, an optional ``inputs.system_prompt`` opens every chat) in batches of ``batch_size``: frames
sampled at ``video_fps`` (from a clip at ``source_fps``) capped at ``max_frames``, audio cut to
``max_audio_seconds`` and resampled to ``audio_sample_rate`` (which must be the feature
extractor's rate), floating inputs cast to the model's dtype; ``generate(max_new_tokens,
num_beams, do_sample, use_cache, temperature)``, sampling seeded from ``inputs.seed``.

Output: ``text`` = one answer per question, decoded up to its end. Counters ``new_tokens`` (per
answer, the generated tokens before its first end-of-sequence or pad id, summed over answers: the
EOS itself and the padding ``generate`` adds after an answer that ended early are not counted; the
ids are the generation config's ``eos_token_id`` / ``pad_token_id``, else the tokenizer's) and
``max_new_tokens_hit`` (answers cut by the limit). Spans prepare / model / postprocess and the cost
structure (prefill, each new token: :mod:`.call_clocks`) of each call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tuner.adapters.factories import import_named, torch_dtype
from tuner.adapters.factories.av_inputs import resample_audio
from tuner.adapters.factories.call_clocks import GenerateClock, device_cuda
from tuner.adapters.media import read_audio, read_video
from tuner.evaluators.runtime.spans import CallSpans
from tuner.workloads.base import InvalidSetting, WorkloadOutput

DEFAULT_MODEL_CLASS = "transformers:AutoModelForMultimodalLM"


def sample_frames(video: np.ndarray, source_fps: float, fps: float, max_frames: int) -> np.ndarray:
    """Frames of ``video`` (T, H, W, 3) at ``fps`` (every ``source_fps / fps``-th frame), at most ``max_frames``."""
    if not fps > 0 or max_frames < 1:
        raise InvalidSetting(f"video_fps must be > 0 and max_frames >= 1, not {fps} and {max_frames}")
    step = max(1.0, source_fps / fps)
    picks = np.arange(0, video.shape[0], step).astype(int)[:max_frames]
    return video[picks]


def _ids(value: Any) -> list[int]:
    """An id or a list of ids (None: none) as a list."""
    if value is None:
        return []
    return [int(item) for item in value] if isinstance(value, Iterable) else [int(value)]


def end_ids(generation_config: Any, tokenizer: Any) -> tuple[frozenset[int], int | None]:
    """(the ids that end an answer, the pad id ``generate`` fills finished answers with).

    EOS: the generation config's ``eos_token_id`` (an id or a list), else the tokenizer's. Pad: the
    generation config's ``pad_token_id``, else the tokenizer's, else the first EOS (what ``generate``
    itself falls back to). The pad id ends an answer too."""
    eos = _ids(generation_config.eos_token_id) or _ids(getattr(tokenizer, "eos_token_id", None))
    pads = _ids(generation_config.pad_token_id) or _ids(getattr(tokenizer, "pad_token_id", None)) or eos[:1]
    pad = pads[0] if pads else None
    return frozenset(eos) | frozenset(pads), pad


def answer_tokens(rows: Sequence[Sequence[int]], stops: frozenset[int]) -> list[list[int]]:
    """Each generated row up to (without) its first id in ``stops``: the answer's own tokens."""
    answers = []
    for row in rows:
        end = next((position for position, token in enumerate(row) if token in stops), len(row))
        answers.append([int(token) for token in row[:end]])
    return answers


class TransformersAVModel:
    """``load`` / ``run`` for an audio-visual LLM behind a transformers processor (see module docs)."""

    def __init__(
        self,
        model_path: str,
        model_class: str = DEFAULT_MODEL_CLASS,
        device: str = "cuda",
        source_fps: float = 25.0,
        trust_remote_code: bool = False,
    ) -> None:
        self.model_path = model_path
        self.model_class = model_class
        self.device = device
        self.source_fps = float(source_fps)
        self.trust_remote_code = trust_remote_code
        self.model: Any = None
        self.processor: Any = None
        self.stops: frozenset[int] = frozenset()
        self.pad_id: int | None = None
        self._spans = CallSpans()
        self._clock: GenerateClock | None = None

    def load(self, static_params: Mapping[str, Any]) -> None:
        import transformers

        dtype = torch_dtype(static_params)
        processor = transformers.AutoProcessor.from_pretrained(
            self.model_path, local_files_only=True, trust_remote_code=self.trust_remote_code
        )
        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is None or not getattr(processor, "chat_template", None):
            raise ValueError(
                f"{self.model_path}: make_av_llm needs a processor with a tokenizer and a chat template "
                f"(it builds each prompt with the template), got {type(processor).__name__}"
            )
        tokenizer.padding_side = "left"  # a decoder-only batch: every prompt ends where generation starts
        model = import_named(self.model_class).from_pretrained(
            self.model_path, dtype=dtype, local_files_only=True, trust_remote_code=self.trust_remote_code
        )
        self.model = model.to(self.device).eval()
        self.processor = processor
        self.stops, self.pad_id = end_ids(self.model.generation_config, tokenizer)

    def unload(self) -> None:
        """Drop the model and processor, and return their device memory before a reload."""
        import gc

        import torch

        self.model, self.processor = None, None
        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def weights_identity(self, inputs: Mapping[str, Any]) -> str:
        return f"path:{self.model_path}"

    def declared_weights(self, inputs: Mapping[str, Any]) -> dict[str, Path]:
        """The checkpoint's config and weight files."""
        path = Path(self.model_path)
        files = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")) + [path / "config.json"]
        return {file.name: file for file in files if file.is_file()}

    def _prompt(self, question: str, inputs: Mapping[str, Any]) -> str:
        content = [{"type": "video"}, {"type": "audio"}, {"type": "text", "text": question}]
        messages: list[dict[str, Any]] = [{"role": "user", "content": content}]
        if inputs.get("system_prompt"):
            messages.insert(0, {"role": "system", "content": [{"type": "text", "text": str(inputs["system_prompt"])}]})
        return str(self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))

    def _audio_rate(self, params: Mapping[str, Any]) -> int:
        rate = int(params.get("audio_sample_rate", 16000))
        expected = getattr(getattr(self.processor, "feature_extractor", None), "sampling_rate", None)
        if expected is not None and rate != int(expected):
            raise InvalidSetting(
                f"audio_sample_rate {rate} Hz: the processor's feature extractor takes {int(expected)} Hz audio"
            )
        return rate

    def prepare(self, questions: Sequence[Any], params: Mapping[str, Any], inputs: Mapping[str, Any]) -> Any:
        """The ``generate`` inputs of one batch of ``questions``: the processor's output on the device, its
        floating tensors in the model's dtype."""
        if self.model is None:
            raise RuntimeError("prepare() before load()")
        rate = self._audio_rate(params)
        prompts, videos, audios = [], [], []
        for raw in questions:
            item = raw if isinstance(raw, Mapping) else {"question": raw}
            video_path, audio_path = item.get("video", inputs.get("video")), item.get("audio", inputs.get("audio"))
            if not video_path or not audio_path or "question" not in item:
                raise InvalidSetting(
                    "each question needs a video and an audio file (inputs.video / inputs.audio, "
                    "or per question {question, video, audio})"
                )
            videos.append(
                sample_frames(
                    read_video(Path(str(video_path))),
                    self.source_fps,
                    float(params.get("video_fps", 2.0)),
                    int(params.get("max_frames", 16)),
                )
            )
            samples, source_rate = read_audio(Path(str(audio_path)))
            samples = samples[: int(float(params.get("max_audio_seconds", 10.0)) * source_rate)]
            audios.append(resample_audio(samples, source_rate, rate))
            prompts.append(self._prompt(str(item["question"]), inputs))
        batch = self.processor(
            text=prompts, videos=videos, audio=audios, sampling_rate=rate, return_tensors="pt", padding=True
        )
        return batch.to(self.device, dtype=self.model.dtype)

    def _generation(self, params: Mapping[str, Any]) -> dict[str, Any]:
        max_new_tokens, num_beams = int(params.get("max_new_tokens", 64)), int(params.get("num_beams", 1))
        if max_new_tokens < 1 or num_beams < 1:
            raise InvalidSetting(f"max_new_tokens and num_beams must be >= 1, not {max_new_tokens} and {num_beams}")
        generation: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "num_beams": num_beams,
            "do_sample": bool(params.get("do_sample", False)),
            "use_cache": bool(params.get("use_cache", True)),
            "pad_token_id": self.pad_id,
        }
        if generation["do_sample"]:
            generation["temperature"] = float(params.get("temperature", 0.7))
        return generation

    def run(self, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> WorkloadOutput:
        import torch

        questions = list(inputs.get("questions") or [])
        if not questions:
            raise InvalidSetting("inputs.questions must be a non-empty list")
        batch_size = int(params.get("batch_size", 1))
        if batch_size < 1:
            raise InvalidSetting(f"batch_size must be >= 1, not {batch_size}")
        generation = self._generation(params)
        answers: list[list[int]] = []
        self._spans.begin()
        clock = self._clock = self._clock or GenerateClock(device_cuda(self.device))
        clock.begin()
        for start in range(0, len(questions), batch_size):
            batch = self.prepare(questions[start : start + batch_size], params, inputs)
            if generation["do_sample"]:
                torch.manual_seed(int(inputs.get("seed", 0)) + start)
            self._spans.mark("prepare")
            with torch.inference_mode():
                output = clock.generate(self.model, **batch, **generation).cpu()
            self._spans.mark("model")
            answers += answer_tokens(output[:, batch["input_ids"].shape[1] :].tolist(), self.stops)
        texts = self.processor.tokenizer.batch_decode(answers, skip_special_tokens=True)
        limit = generation["max_new_tokens"]
        counters = {
            "new_tokens": float(sum(len(answer) for answer in answers)),
            "max_new_tokens_hit": float(sum(len(answer) >= limit for answer in answers)),
        }
        self._spans.mark("postprocess")
        return WorkloadOutput(text=[str(text).strip() for text in texts], items=len(texts), counters=counters)

    def call_spans(self) -> dict[str, float]:
        """The last call's seconds over its batches: ``prepare`` (media read, the processor), ``model`` (``generate``
        and its ids' host copy), ``postprocess`` (answers cut and decoded): :mod:`tuner.evaluators.runtime.spans`."""
        return self._spans.seconds()

    def call_structure(self) -> dict[str, Any] | None:
        """The last call's structure over its batches (:mod:`.call_clocks`): ``prefill`` (encoders and prefill,
        summed over the batches), ``tokens`` (each further decoding step), inside ``model``."""
        return self._clock.report() if self._clock is not None else None

    def synchronize(self) -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()


def make_av_llm(**kwargs: Any) -> TransformersAVModel:
    """The factory named in ``av_llm.yaml`` (kwargs: :class:`TransformersAVModel`)."""
    return TransformersAVModel(**kwargs)
