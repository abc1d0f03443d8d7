"""``AVQAWorkload``: a tiny trained audio-visual question-answering model.

An Audio-Visual Flamingo-class pipeline in miniature (see
``docs/models/avqa.md``): frames and audio of a clip become media tokens, a
small text decoder cross-attends to them and writes a short answer. The
weights are trained by ``python -m tuner.workloads.avqa.train`` and committed
as ``weights/avqa.pt``; :meth:`setup` loads them (``inputs["weights"]``
overrides the path).

One call answers a fixed question set
-------------------------------------
Each ``run`` answers every question of the held-out set chosen by the inputs
(``num_questions`` questions starting at ``first_question``; question ``i``
asks about its own clip, types cycling shape, colour, direction, pitch, beeps,
flashes), ``batch_size`` questions per forward pass. So the answers, and the
quality metrics against ``inputs["ground_truth"]``, cover the same questions at
every batch size; ``items`` = ``num_questions`` and throughput is questions/s.
The ground truth is :func:`tuner.workloads.avqa.data.ground_truth`; print it as
YAML with ``python -m tuner.workloads.avqa.data --num-questions N``. A list
``ground_truth`` that disagrees with it raises :class:`InvalidSetting`, so a
stale spec cannot score against the wrong answers.

Parameters (``params``; defaults in :data:`DEFAULT_PARAMS`)
-----------------------------------------------------------
``video_fps``          float in (0, 8]: frames read per second of the clip.
``max_frames``         int >= 1: cap; over it, that many of the frames are kept
                       evenly spread over the clip.
``audio_sample_rate``  int in [4000, 16000] Hz: audio resampled to it (band-limited).
``max_audio_seconds``  float > 0: only the first seconds of audio are heard.
``max_new_tokens``     int 1..64: answer length limit (characters + ``<eos>``).
``num_beams``          int 1..8: beam search when > 1.
``do_sample``          bool: sample instead of arg-max (needs ``num_beams`` 1).
``temperature``        float > 0: softmax temperature when sampling.
``use_cache``          bool: KV cache, or recompute the whole prefix every step.
``batch_size``         int >= 1: questions decoded together per forward.
``precision``          "fp32" | "bf16" | "fp16" (autocast; fp16 needs CUDA).

Unknown names raise :class:`InvalidSetting`.

Inputs (``context.inputs``)
---------------------------
``question_set`` ("heldout", the only set), ``num_questions`` (12),
``first_question`` (0), ``clip_seconds`` (4.0, within 2-6), ``weights`` (optional
path to a checkpoint, absolute or relative to the worker's current directory; a
missing file is an :class:`InvalidSetting` that says how to train one),
``ground_truth`` (optional, checked as above).

Output and counters
-------------------
``text``: one answer per question, in order. Counters: ``questions``,
``batches``; per request (the same for every question): ``media_tokens``,
``frames_used``, ``audio_seconds_used``; totals over the call:
``prompt_tokens``, ``new_tokens`` (``<eos>`` included), ``max_new_tokens_hit``
(answers that used every allowed token without ``<eos>``), ``decode_calls``
(decoder forward passes) and ``decoded_tokens`` (token positions they processed). Cost structure
(``call_structure``): each batch's encoders and prefill, each new token's decoding step.
Sampling draws from one generator per question seeded by ``context.seed`` and
the question index, so every answer is reproducible and independent of
``batch_size``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tuner.evaluators.runtime.structure import Timeline, named
from tuner.workloads.avqa.checkpoint import DEFAULT_WEIGHTS, LoadedModel, load_checkpoint
from tuner.workloads.avqa.data import (
    CLIP_SECONDS_RANGE,
    DEFAULT_CLIP_SECONDS,
    NATIVE_AUDIO_RATE,
    NATIVE_FPS,
    Clip,
    Question,
    clip_facts,
    heldout_questions,
    render_clip,
)
from tuner.workloads.avqa.generate import DecodingSettings, generate
from tuner.workloads.avqa.media import build_media
from tuner.workloads.base import InvalidSetting, RunContext, Workload, WorkloadOutput
from tuner.workloads.params import as_bool, as_integer, as_positive_real, torch_device

DEFAULT_PARAMS: Mapping[str, Any] = {
    "video_fps": 2.0,
    "max_frames": 16,
    "audio_sample_rate": 16000,
    "max_audio_seconds": 10.0,
    "max_new_tokens": 16,
    "num_beams": 1,
    "do_sample": False,
    "temperature": 0.7,
    "use_cache": True,
    "batch_size": 1,
    "precision": "fp32",
}
"""Values used for absent parameters: the DOMAIN.md server defaults, scaled to this model."""

MAX_NEW_TOKENS = 64
MAX_BEAMS = 8
MIN_AUDIO_RATE = 4000
AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class AVQASettings:
    """Validated parameters (see module docs)."""

    video_fps: float
    max_frames: int
    audio_sample_rate: int
    max_audio_seconds: float
    decoding: DecodingSettings
    batch_size: int
    precision: str

    @staticmethod
    def from_params(params: Mapping[str, Any], device: torch.device) -> AVQASettings:
        unknown = sorted(set(params) - set(DEFAULT_PARAMS))
        if unknown:
            raise InvalidSetting(f"unknown avqa params {unknown}; known: {sorted(DEFAULT_PARAMS)}")
        merged = {**DEFAULT_PARAMS, **params}
        video_fps = as_positive_real(merged["video_fps"], "video_fps")
        if video_fps > NATIVE_FPS:
            raise InvalidSetting(f"video_fps={video_fps} is above the clips' native {NATIVE_FPS} fps")
        rate = as_integer(merged["audio_sample_rate"], "audio_sample_rate", minimum=MIN_AUDIO_RATE)
        if rate > NATIVE_AUDIO_RATE:
            raise InvalidSetting(f"audio_sample_rate={rate} is above the clips' native {NATIVE_AUDIO_RATE} Hz")
        max_new_tokens = as_integer(merged["max_new_tokens"], "max_new_tokens", minimum=1)
        num_beams = as_integer(merged["num_beams"], "num_beams", minimum=1)
        if max_new_tokens > MAX_NEW_TOKENS or num_beams > MAX_BEAMS:
            raise InvalidSetting(f"need max_new_tokens <= {MAX_NEW_TOKENS} and num_beams <= {MAX_BEAMS}")
        do_sample = as_bool(merged["do_sample"], "do_sample")
        if do_sample and num_beams > 1:
            raise InvalidSetting("do_sample=True needs num_beams=1 (beam sampling is not implemented)")
        precision = merged["precision"]
        if precision not in AUTOCAST_DTYPES:
            raise InvalidSetting(f"precision={precision!r} is not one of {sorted(AUTOCAST_DTYPES)}")
        if precision == "fp16" and device.type != "cuda":
            raise InvalidSetting("precision='fp16' needs a CUDA device (the CPU supports fp32 and bf16)")
        decoding = DecodingSettings(
            max_new_tokens=max_new_tokens,
            num_beams=num_beams,
            do_sample=do_sample,
            temperature=as_positive_real(merged["temperature"], "temperature"),
            use_cache=as_bool(merged["use_cache"], "use_cache"),
        )
        return AVQASettings(
            video_fps=video_fps,
            max_frames=as_integer(merged["max_frames"], "max_frames", minimum=1),
            audio_sample_rate=rate,
            max_audio_seconds=as_positive_real(merged["max_audio_seconds"], "max_audio_seconds"),
            decoding=decoding,
            batch_size=as_integer(merged["batch_size"], "batch_size", minimum=1),
            precision=precision,
        )


@dataclass(frozen=True)
class AVQAInputs:
    """The workload's reading of ``context.inputs`` (see module docs)."""

    num_questions: int
    first_question: int
    clip_seconds: float
    weights: Path | None

    @staticmethod
    def from_context(context: RunContext) -> AVQAInputs:
        inputs = context.inputs
        question_set = inputs.get("question_set", "heldout")
        if question_set != "heldout":
            raise InvalidSetting(f"avqa inputs: question_set={question_set!r}; only 'heldout' exists")
        clip_seconds = as_positive_real(inputs.get("clip_seconds", DEFAULT_CLIP_SECONDS), "clip_seconds")
        if not CLIP_SECONDS_RANGE[0] <= clip_seconds <= CLIP_SECONDS_RANGE[1]:
            raise InvalidSetting(f"avqa inputs: clip_seconds={clip_seconds} outside {CLIP_SECONDS_RANGE}")
        weights = inputs.get("weights")
        parsed = AVQAInputs(
            num_questions=as_integer(inputs.get("num_questions", 12), "num_questions", minimum=1),
            first_question=as_integer(inputs.get("first_question", 0), "first_question", minimum=0),
            clip_seconds=clip_seconds,
            weights=Path(str(weights)) if weights is not None else None,
        )
        parsed.check_ground_truth(inputs.get("ground_truth"))
        return parsed

    def questions(self) -> list[Question]:
        return heldout_questions(self.num_questions, self.first_question)

    def check_ground_truth(self, truth: Any) -> None:
        """InvalidSetting unless ``truth`` (absent, a str or a list) matches this question set."""
        if truth is None:
            return
        expected = [q.answer for q in self.questions()]
        given = [truth] * len(expected) if isinstance(truth, str) else truth
        if not isinstance(given, (list, tuple)) or [str(t).strip().lower() for t in given] != expected:
            raise InvalidSetting(
                f"inputs.ground_truth does not match the {self.num_questions} held-out questions from "
                f"{self.first_question}; expected {expected} (print them with `python -m "
                f"tuner.workloads.avqa.data --num-questions {self.num_questions} --first {self.first_question}`)"
            )


def request_seed(seed: int, question_index: int) -> int:
    """Sampling seed of one question: fixed by the study seed and the question's index in the set."""
    return (seed * 1_000_003 + question_index) % (2**63)


class AVQAWorkload(Workload):
    """Built-in audio-visual QA workload (see module docs)."""

    def __init__(self) -> None:
        self._loaded: LoadedModel | None = None
        self._loaded_key: tuple[str, str] | None = None
        self._clips: dict[tuple[int, float], Clip] = {}
        self._timeline: Timeline | None = None

    @property
    def loaded(self) -> LoadedModel | None:
        """The loaded model, tokenizer and training metadata (None before ``setup``)."""
        return self._loaded

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        """Validate, load the weights and render the question set's clips (not timed)."""
        device = torch_device(context)
        AVQASettings.from_params(params, device)
        inputs = AVQAInputs.from_context(context)
        self._prepare(inputs, device)

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        """Answer the question set; deterministic for a seed and params (see module docs)."""
        device = torch_device(context)
        settings = AVQASettings.from_params(params, device)
        inputs = AVQAInputs.from_context(context)
        self._prepare(inputs, device)
        assert self._loaded is not None
        model, tokenizer = self._loaded.model, self._loaded.tokenizer
        questions = inputs.questions()
        answers: list[str] = []
        totals = {
            "prompt_tokens": 0.0,
            "new_tokens": 0.0,
            "max_new_tokens_hit": 0.0,
            "decode_calls": 0.0,
            "decoded_tokens": 0.0,
            "batches": 0.0,
        }
        per_request: dict[str, float] = {}
        dtype = AUTOCAST_DTYPES[settings.precision]
        timeline = self._timeline = Timeline(torch.cuda if device.type == "cuda" else None)
        timeline.start()
        with (
            torch.inference_mode(),
            torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None),
        ):
            for start in range(0, len(questions), settings.batch_size):
                chunk = questions[start : start + settings.batch_size]
                media = build_media(
                    [self._clips[(q.clip_id, inputs.clip_seconds)] for q in chunk],
                    settings.video_fps,
                    settings.max_frames,
                    settings.audio_sample_rate,
                    settings.max_audio_seconds,
                    device,
                )
                memory = model.encode_media(media.frames, media.frame_seconds, media.audio, media.audio_rate_hz)
                timeline.mark("encode")
                prompts = [tokenizer.prompt(q.text) for q in chunk]
                generators = None
                if settings.decoding.do_sample:
                    generators = [
                        torch.Generator().manual_seed(request_seed(context.seed, inputs.first_question + start + i))
                        for i in range(len(chunk))
                    ]
                result = generate(model, memory, prompts, settings.decoding, generators, timeline.mark)
                answers += [tokenizer.decode(tokens) for tokens in result.tokens]
                totals["prompt_tokens"] += sum(len(p) for p in prompts)
                totals["new_tokens"] += sum(len(t) for t in result.tokens)
                totals["max_new_tokens_hit"] += sum(result.hit_limit)
                totals["decode_calls"] += result.decode_calls
                totals["decoded_tokens"] += result.decoded_tokens
                totals["batches"] += 1
                per_request = {
                    "media_tokens": float(memory.shape[1]),
                    "frames_used": float(media.frames.shape[1]),
                    "audio_seconds_used": float(media.audio_seconds),
                }
                timeline.mark("finish")
        counters = {"questions": float(len(questions)), **per_request, **totals}
        return WorkloadOutput(text=answers, items=len(questions), counters=counters)

    def call_structure(self) -> Mapping[str, Any] | None:
        """The last call's structure over its batches (:mod:`tuner.evaluators.runtime.structure`): ``prefill``
        (each batch's media encoding -- ``encode``, also apart -- and prompt forward: the time to its first
        logits, summed), ``tokens`` (each further decoding step of every batch), ``finish`` (answers decoded).
        CUDA events on CUDA (no synchronisation added), else the host clock."""
        if self._timeline is None:
            return None
        intervals = self._timeline.intervals()
        encode, prefill = sum(named(intervals, "encode")), named(intervals, "prefill")
        tokens = named(intervals, "token")
        finish = sum(named(intervals, "finish"))
        return {
            "phases": {"prefill": encode + sum(prefill), "encode": encode, "finish": finish},
            "series": {"tokens": tokens},
            "counts": {"new_token_steps": len(tokens) + len(prefill), "batches": len(prefill)},
        }

    def declared_weights(self, context: RunContext) -> Mapping[str, Path]:
        """The checkpoint ``run`` reads: ``inputs["weights"]`` (relative to the working directory) or the
        committed ``weights/avqa.pt``."""
        weights = AVQAInputs.from_context(context).weights
        return {"avqa": (weights or DEFAULT_WEIGHTS).resolve()}

    def teardown(self) -> None:
        cuda_used = self._loaded_key is not None and self._loaded_key[1].startswith("cuda")
        self._loaded = None
        self._loaded_key = None
        self._clips.clear()
        if cuda_used:
            torch.cuda.empty_cache()

    def _prepare(self, inputs: AVQAInputs, device: torch.device) -> None:
        """Load weights (once per path and device) and render missing clips."""
        key = (str(inputs.weights), str(device))
        if self._loaded_key != key:
            try:
                loaded = load_checkpoint(inputs.weights)
            except FileNotFoundError as error:
                raise InvalidSetting(str(error)) from error
            loaded.model.to(device)
            self._loaded, self._loaded_key = loaded, key
        for question in inputs.questions():
            clip_key = (question.clip_id, inputs.clip_seconds)
            if clip_key not in self._clips:
                self._clips[clip_key] = render_clip(clip_facts(question.clip_id), inputs.clip_seconds)
