"""The text part of a diffusers video pipeline's call: prompt strings, or Wan's prompt embeddings, kept per prompt.

A Wan pipeline (:class:`diffusers.WanPipeline`) gets ``prompt_embeds`` / ``negative_prompt_embeds`` of shape
(B, L, D), computed once per prompt and reused: with a text encoder read from a weights directory (UMT5, kept off
the pipeline on the CPU), Wan's own encoding (512 tokens, zero padded); without one (random weights, or a
directory without a text encoder), a seeded tensor of the shape UMT5 gives
(:func:`.presets.random_text_embedding`). Any other pipeline gets the prompt strings and encodes them inside
its call. So the latency and memory of a Wan trial are the pipeline's denoising and decoding, not the encoder's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.adapters.factories.wan.presets import random_text_embedding


def is_wan(pipe: Any) -> bool:
    """Whether ``pipe`` is a diffusers ``WanPipeline`` (flow matching, prompt embeddings passed in)."""
    from diffusers import WanPipeline

    return isinstance(pipe, WanPipeline)


class PromptEmbeddings:
    """Prompt embeddings per (prompt, text width), on ``device``; ``text_length``: tokens of a seeded embedding
    (the preset's, 512 for a weights directory); ``seed``: what a seeded embedding is drawn from. ``encoder``:
    the (tokenizer, text encoder) read from a weights directory, or None."""

    def __init__(self, seed: int, device: str, text_length: int) -> None:
        self.seed, self.device, self.text_length = seed, device, text_length
        self.encoder: tuple[Any, Any] | None = None
        self._kept: dict[tuple[str, int], Any] = {}

    def clear(self) -> None:
        """Forget the encoder and every embedding (the pipeline was unloaded)."""
        self.encoder, self._kept = None, {}

    def call_text(self, pipe: Any, inputs: Mapping[str, Any], batch: int) -> dict[str, Any]:
        """The text keywords of the call for ``batch`` videos: prompt strings for a non-Wan pipeline, else (B, L, D)
        embeddings of ``inputs['prompt']`` and ``inputs['negative_prompt']``."""
        prompt, negative = str(inputs.get("prompt", "")), str(inputs.get("negative_prompt") or "")
        if not is_wan(pipe):
            return {"prompt": prompt, "negative_prompt": inputs.get("negative_prompt"), "num_videos_per_prompt": batch}
        return {
            "prompt_embeds": self.embedding(pipe, prompt).expand(batch, -1, -1),
            "negative_prompt_embeds": self.embedding(pipe, negative).expand(batch, -1, -1),
        }

    def embedding(self, pipe: Any, text: str) -> Any:
        """``text``'s (1, L, D) embedding for the Wan pipeline ``pipe`` (D: its denoiser's text width), once."""
        import torch
        from diffusers import WanPipeline

        denoiser = pipe.transformer if pipe.transformer is not None else pipe.transformer_2
        key = (text, int(denoiser.config.text_dim))
        if key not in self._kept:
            if self.encoder is not None:
                tokenizer, encoder = self.encoder
                holder = _TextHolder(tokenizer, encoder)
                with torch.no_grad():  # Wan's own prompt encoding (UMT5, 512 tokens, zero padded)
                    value = WanPipeline._get_t5_prompt_embeds(
                        holder,
                        prompt=text,
                        max_sequence_length=512,  # type: ignore[arg-type]
                        device=torch.device("cpu"),
                        dtype=torch.float32,
                    )
            else:
                value = random_text_embedding(text, self.text_length, key[1], self.seed)
            self._kept[key] = value.to(self.device)
        return self._kept[key]


class _TextHolder:
    """What ``WanPipeline._get_t5_prompt_embeds`` reads from its pipeline: tokenizer, encoder, device."""

    def __init__(self, tokenizer: Any, text_encoder: Any) -> None:
        import torch

        self.tokenizer, self.text_encoder, self._execution_device = tokenizer, text_encoder, torch.device("cpu")


__all__ = ["PromptEmbeddings", "is_wan"]
