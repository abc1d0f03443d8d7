"""Qwen2.5-Omni *thinker* networks for :mod:`.transformers_av`: published sizes, random or from a path.

The thinker is the part of Qwen2.5-Omni that reads video + audio + text and writes text
(transformers' ``Qwen2_5OmniThinkerForConditionalGeneration``: a Qwen2.5-VL vision encoder,
a Whisper-style audio encoder and a Qwen2.5 decoder). The talker and token2wav (speech
output) are not built.

Presets (``architecture``), the sub-configs of ``Qwen2_5OmniThinkerConfig``:

* ``tiny`` -- for CPU tests: 2-layer encoders (hidden 64) and a 2-layer decoder (hidden
  128), the real vocabulary (152,064 ids, so the real placeholder ids fit) and the real
  token ids; 39.6 M parameters, almost all of them the two vocabulary matrices.
* ``qwen2.5-omni-3b`` / ``qwen2.5-omni-7b`` -- the ``thinker_config`` of the published
  ``Qwen/Qwen2.5-Omni-3B`` / ``-7B`` ``config.json`` on the Hugging Face Hub (text / audio /
  vision sizes, token ids; read as quoted by public projects, e.g. rtp-llm's Qwen2.5-Omni
  tests, since nothing is downloaded here). 7B: decoder 28 x 3584 (28 heads, 4 KV heads, MLP
  18,944, vocabulary 152,064, untied head) = 7.62 B, as Qwen2.5-7B's published 7.61 B;
  vision 32 x 1280 -> 3584 = 0.68 B (Qwen2.5-VL's ViT); audio 32 x 1280 -> 3584 = 0.64 B
  (Whisper-large-v3's encoder); thinker 8.93 B. 3B: decoder 36 x 2048 (16 heads, 2 KV
  heads, MLP 11,008, vocabulary 151,936) with encoders projecting to 2048: 4.70 B with an
  untied head (the tie of the 3B head is the thinker config's default, not checked against
  the published file).

Random weights are transformers' own initialisation after ``torch.manual_seed(seed)``,
built directly on the target device in the target dtype (a 7B thinker in bf16 is 17.9 GB
on the GPU and never a 36 GB fp32 copy in host memory); :func:`parameter_count` builds on
the ``meta`` device (no memory at all). The same seed gives the same weights on the same
device type (CPU and CUDA random streams differ).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.workloads.base import InvalidSetting

ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2")
"""``attn_implementation`` values the thinker accepts (``_supports_sdpa`` / ``_supports_flash_attn``)."""


@dataclass(frozen=True)
class OmniTokens:
    """Token ids of the Qwen2.5-Omni vocabulary the prompt needs (tokenizer ``added_tokens``)."""

    im_start: int = 151644  # <|im_start|>
    im_end: int = 151645  # <|im_end|>, the thinker's end of answer
    end_of_text: int = 151643  # <|endoftext|>, also the pad id
    newline: int = 198  # "\n"
    system: int = 8948  # "system"
    user: int = 872  # "user" (Qwen2_5OmniThinkerConfig.user_token_id)
    assistant: int = 77091  # "assistant"
    audio: int = 151646  # <|AUDIO|> placeholder (audio_token_index)
    audio_start: int = 151647  # <|audio_bos|>
    audio_end: int = 151648  # <|audio_eos|>
    vision_start: int = 151652  # <|vision_bos|>
    vision_end: int = 151653  # <|vision_eos|>
    video: int = 151656  # <|VIDEO|> placeholder (video_token_index)
    plain_text_ids: int = 151643  # ids below this are ordinary text tokens

    @property
    def eos(self) -> list[int]:
        return [self.im_end, self.end_of_text]


TOKENS = OmniTokens()

_TEXT_ROPE_7B = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}
_VISION = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "window_size": 112,
    "in_channels": 3,
    "fullatt_block_indexes": [7, 15, 23, 31],
}
_AUDIO = {
    "num_mel_bins": 128,
    "encoder_layers": 32,
    "encoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "d_model": 1280,
    "n_window": 100,
    "max_source_positions": 1500,
}

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "text_config": {
            "vocab_size": 152064,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]},
        },
        "vision_config": {
            **_VISION,
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 4,
            "fullatt_block_indexes": [1],
            "out_hidden_size": 128,
        },
        "audio_config": {
            **_AUDIO,
            "encoder_layers": 2,
            "encoder_attention_heads": 4,
            "encoder_ffn_dim": 128,
            "d_model": 64,
            "output_dim": 128,
        },
    },
    "qwen2.5-omni-3b": {
        "text_config": {
            "vocab_size": 151936,
            "hidden_size": 2048,
            "intermediate_size": 11008,
            "num_hidden_layers": 36,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rope_parameters": _TEXT_ROPE_7B,
        },
        "vision_config": {**_VISION, "out_hidden_size": 2048},
        "audio_config": {**_AUDIO, "output_dim": 2048},
    },
    "qwen2.5-omni-7b": {
        "text_config": {
            "vocab_size": 152064,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "max_position_embeddings": 32768,
            "rope_parameters": _TEXT_ROPE_7B,
        },
        "vision_config": {**_VISION, "out_hidden_size": 3584},
        "audio_config": {**_AUDIO, "output_dim": 3584},
    },
}

_THINKER_TOKENS = {
    "audio_token_index": TOKENS.audio,
    "video_token_index": TOKENS.video,
    "image_token_index": 151655,
    "audio_start_token_id": TOKENS.audio_start,
    "audio_end_token_id": TOKENS.audio_end,
    "vision_start_token_id": TOKENS.vision_start,
    "vision_end_token_id": TOKENS.vision_end,
    "user_token_id": TOKENS.user,
    "position_id_per_seconds": 25,
    "seconds_per_chunk": 2,
    "tie_word_embeddings": False,
}


def thinker_config(preset: str) -> Any:
    """A ``Qwen2_5OmniThinkerConfig`` of ``preset`` (InvalidSetting naming the presets for an unknown one)."""
    from transformers import Qwen2_5OmniThinkerConfig

    if preset not in PRESETS:
        raise InvalidSetting(f"architecture must be one of {sorted(PRESETS)}, not {preset!r}")
    sizes = PRESETS[preset]
    return Qwen2_5OmniThinkerConfig(**{key: dict(value) for key, value in sizes.items()}, **_THINKER_TOKENS)


def _thinker_class() -> Any:
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration

    return Qwen2_5OmniThinkerForConditionalGeneration


def _set_generation_defaults(model: Any) -> None:
    """EOS and pad ids of the real checkpoint (a random network has none; ``generate`` then behaves alike)."""
    generation = model.generation_config
    if generation.eos_token_id is None:
        generation.eos_token_id = TOKENS.eos
    if generation.pad_token_id is None:
        generation.pad_token_id = TOKENS.end_of_text


def check_attention(attn_implementation: str) -> None:
    """InvalidSetting for an attention backend the thinker does not offer or this host lacks."""
    if attn_implementation not in ATTENTION_IMPLEMENTATIONS:
        raise InvalidSetting(
            f"attn_implementation must be one of {list(ATTENTION_IMPLEMENTATIONS)}, not {attn_implementation!r}"
        )
    if attn_implementation == "flash_attention_2":
        from transformers.utils import is_flash_attn_2_available

        if not is_flash_attn_2_available():
            raise InvalidSetting("attn_implementation flash_attention_2 needs the flash-attn package and a CUDA GPU")


def build_random_thinker(preset: str, seed: int, dtype: Any, device: str, attn_implementation: str) -> Any:
    """A thinker of ``preset`` with seeded random weights, built on ``device`` in ``dtype``, in eval mode."""
    import torch

    check_attention(attn_implementation)
    config = thinker_config(preset)
    torch.manual_seed(seed)
    with torch.device(device):
        model = _thinker_class()._from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    _set_generation_defaults(model)
    return model.eval()


def parameter_count(preset: str) -> int:
    """Parameters of the ``preset`` thinker, counted on the ``meta`` device (no memory, ~0.2 s)."""
    import torch

    with torch.device("meta"):
        model = _thinker_class()(thinker_config(preset))
    return sum(parameter.numel() for parameter in model.parameters())


def load_thinker(path: Path, dtype: Any, device: str, attn_implementation: str) -> Any:
    """The thinker of a local Qwen2.5-Omni checkpoint (``local_files_only``): a full Omni directory (its
    ``config.json`` holds ``thinker_config``; weights named ``thinker.*``) or a thinker-only one."""
    from transformers import Qwen2_5OmniThinkerConfig

    check_attention(attn_implementation)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json (weights: a local Qwen2.5-Omni directory)")
    document = json.loads((path / "config.json").read_text())
    if "thinker_config" in document:
        config = Qwen2_5OmniThinkerConfig.from_dict(document["thinker_config"])
    else:
        config = Qwen2_5OmniThinkerConfig.from_pretrained(path, local_files_only=True)
    model = _thinker_class().from_pretrained(
        path,
        config=config,
        dtype=dtype,
        attn_implementation=attn_implementation,
        local_files_only=True,
        device_map=device,
    )
    _set_generation_defaults(model)
    return model.eval()


def load_tokenizer(path: Path) -> Any | None:
    """The tokenizer saved in ``path`` (local files only), or None when the directory has none."""
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)
