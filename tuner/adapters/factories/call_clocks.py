"""Timing the cost structure of a library call from its own hooks: a diffusers pipeline, transformers' generate.

:class:`PipelineClock` times one diffusers pipeline call (:mod:`tuner.evaluators.runtime.structure`):

* ``setup``: from the call to the end of ``prepare_latents`` (prompt handling, timesteps, the initial
  noise); the method is wrapped on the pipeline instance for the call, so the first step starts clean;
* each denoising step: the pipeline's ``callback_on_step_end`` marks where a step ends (WanPipeline calls
  it after the denoiser passes -- two with CFG, ``cond`` then ``uncond`` -- and the scheduler's step);
* ``decode``: from the last step's end to the call's return: the VAE decode and the output's host copy
  (and, with offload, the hooks that move the models back).

:class:`GenerateClock` times ``generate`` calls through a logits processor, which ``generate`` calls once per
new token (for every row of the batch, every beam) after that token's forward pass:

* ``prefill``: from the call to the first token's logits: the encoders and the prefill forward;
* each further new token: from one token's logits to the next one's: a selection and one decoding forward;
* ``finish``: from the last token's logits to the return (info only).

Both use a :class:`~tuner.evaluators.runtime.structure.Timeline`: CUDA events on the current stream when
given the CUDA API (no synchronisation inside the call), else the host clock. transformers' greedy and beam
loops synchronise once per token anyway (their stopping check reads a device value).
"""

from __future__ import annotations

import inspect
import time
from typing import Any

from tuner.evaluators.runtime.structure import Timeline, named


def device_cuda(device: str) -> Any:
    """torch.cuda when ``device`` is a CUDA device that is available (mark with events); else None (host clock)."""
    import torch

    return torch.cuda if str(device).startswith("cuda") and torch.cuda.is_available() else None


class PipelineClock:
    """The structure of the last diffusers pipeline call made through :meth:`call` (see module docs)."""

    def __init__(self, cuda: Any = None) -> None:
        self._timeline = Timeline(cuda)
        self._text_s = 0.0
        self._passes = 1

    def text(self, seconds: float) -> None:
        """The call's text conditioning took ``seconds`` (host clock; ~0 when served from a cache)."""
        self._text_s = float(seconds)

    def call(self, pipe: Any, passes_per_step: int, **kwargs: Any) -> Any:
        """``pipe(**kwargs)`` with its setup, steps and decode marked; ``passes_per_step``: denoiser passes per
        step (2 with CFG), recorded as a count."""
        self._passes = int(passes_per_step)
        timeline = self._timeline
        if _takes_step_callback(type(pipe)):
            kwargs["callback_on_step_end"] = self._step_end
        prepare = getattr(pipe, "prepare_latents", None)

        def prepared(*args: Any, **named_args: Any) -> Any:
            latents = prepare(*args, **named_args)  # type: ignore[misc]
            timeline.mark("setup")
            return latents

        if callable(prepare):
            pipe.prepare_latents = prepared  # the instance's own, for this call only
        timeline.start()
        try:
            result = pipe(**kwargs)
        finally:
            if callable(prepare):
                del pipe.prepare_latents
        timeline.mark("decode")
        return result

    def _step_end(self, pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        self._timeline.mark("step")
        return tensors

    def report(self) -> dict[str, Any]:
        """The last call's structure: phases ``text`` (s), ``setup``, ``denoise`` (the steps), ``decode``;
        series ``steps``; counts ``passes_per_step`` and ``steps``. Without step marks (a pipeline with no
        step-end callback) only ``text``."""
        intervals = self._timeline.intervals()
        steps = named(intervals, "step")
        if not steps:
            return {"phases": {"text": self._text_s}}
        phases = {
            "text": self._text_s,
            "setup": sum(named(intervals, "setup")),
            "denoise": sum(steps),
            "decode": sum(named(intervals, "decode")),
        }
        return {
            "phases": phases,
            "series": {"steps": steps},
            "counts": {"passes_per_step": self._passes, "steps": len(steps)},
        }


class GenerateClock:
    """The structure of the ``generate`` calls of one ``run`` (see module docs): :meth:`begin` at the run's
    start, :meth:`generate` for each call."""

    def __init__(self, cuda: Any = None) -> None:
        self._timeline = Timeline(cuda)
        self._calls = 0
        self._marks = _TokenMarks(self._timeline)

    def begin(self) -> None:
        """A run starts: forget the last one's marks."""
        self._calls = 0

    def generate(self, model: Any, **kwargs: Any) -> Any:
        """``model.generate(**kwargs)`` with its prefill and new tokens marked (a logits processor added)."""
        from transformers import LogitsProcessorList

        if self._calls == 0:
            self._timeline.start()
        else:
            self._timeline.mark("between")  # the host work between two generate calls of one run
        self._calls += 1
        self._marks.first = True
        processors = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), self._marks])
        output = model.generate(**kwargs, logits_processor=processors)
        self._timeline.mark("finish")
        return output

    def report(self) -> dict[str, Any]:
        """The last run's structure: phases ``prefill`` (s, summed over its generate calls) and ``finish``;
        series ``tokens`` (each decoding step after the first token); counts ``new_token_steps`` (logits read:
        one per new token of the longest answer of each batch) and ``generate_calls``."""
        if self._calls == 0:
            return {}
        intervals = self._timeline.intervals()
        tokens = named(intervals, "token")
        prefills = named(intervals, "prefill")
        return {
            "phases": {"prefill": sum(prefills), "finish": sum(named(intervals, "finish"))},
            "series": {"tokens": tokens},
            "counts": {"new_token_steps": len(tokens) + len(prefills), "generate_calls": self._calls},
        }


_STEP_CALLBACK: dict[type, bool] = {}


def _takes_step_callback(pipeline_type: type) -> bool:
    """Whether a pipeline class's ``__call__`` takes ``callback_on_step_end`` (read once per class)."""
    if pipeline_type not in _STEP_CALLBACK:
        _STEP_CALLBACK[pipeline_type] = "callback_on_step_end" in inspect.signature(pipeline_type.__call__).parameters
    return _STEP_CALLBACK[pipeline_type]


class _TokenMarks:
    """A logits processor that changes nothing: it marks ``prefill`` at its first call, ``token`` after."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline, self.first = timeline, True

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.timeline.mark("prefill" if self.first else "token")
        self.first = False
        return scores


def host_seconds(started: float) -> float:
    """Seconds on the host clock since ``started`` (a ``time.perf_counter()`` reading)."""
    return time.perf_counter() - started


__all__ = ["GenerateClock", "PipelineClock", "device_cuda", "host_seconds"]
