"""A tiny audio-visual LLM directory built offline for the ``make_av_llm`` tests: real transformers classes.

:func:`save_tiny_av_llm` writes what ``AutoProcessor`` / ``AutoModelForMultimodalLM.from_pretrained`` read
from a local checkpoint: a ``Qwen2_5OmniProcessor`` (a byte-level ``Qwen2Tokenizer`` with no merges -- one
token per byte -- plus Qwen2.5-Omni's special tokens, ``Qwen2VLImageProcessor`` / ``Qwen2VLVideoProcessor``
with small frame sizes, a 128-bin ``WhisperFeatureExtractor``, a chat template placing the video and audio
placeholders as Qwen2.5-Omni's does) and a ``Qwen2_5OmniThinkerForConditionalGeneration`` built from a
2-layer config with seeded random weights. Nothing downloads; about 5 s on a 2-core CPU (transformers'
import included).

The weights are drawn with a wide spread (std 0.3) so that different questions get different greedy
answers and some answers end with ``<|im_end|>`` before ``max_new_tokens``: a batch then holds padding.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|IMAGE|>",
    "<|VIDEO|>",
    "<|vision_bos|>",
    "<|vision_eos|>",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'video' %}<|vision_bos|><|VIDEO|><|vision_eos|>"
    "{% elif c['type'] == 'audio' %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MIN_PIXELS, MAX_PIXELS = 56 * 56, 112 * 112
"""Resized frame bounds of the tiny video processor (pixels): a few patches per frame."""


@dataclass(frozen=True)
class TinyAVLLM:
    """Where the tiny checkpoint is and the ids a test checks against."""

    path: Path
    end_of_answer: int  # <|im_end|>: the generation config's EOS
    pad: int  # <|endoftext|>: the tokenizer's and generation config's pad
    video: int  # <|VIDEO|> placeholder
    audio: int  # <|AUDIO|> placeholder


def save_tiny_av_llm(path: Path, seed: int = 0) -> TinyAVLLM:
    """Write the tiny processor + thinker checkpoint to ``path`` (see module docs)."""
    import torch
    from transformers import (
        Qwen2_5OmniProcessor,
        Qwen2_5OmniThinkerConfig,
        Qwen2_5OmniThinkerForConditionalGeneration,
        Qwen2Tokenizer,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
        WhisperFeatureExtractor,
    )
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = sorted(set(bytes_to_unicode().values()))
    roles = {
        "image_token": "<|IMAGE|>",
        "audio_token": "<|AUDIO|>",
        "video_token": "<|VIDEO|>",
        "vision_bos_token": "<|vision_bos|>",
        "vision_eos_token": "<|vision_eos|>",
        "audio_bos_token": "<|audio_bos|>",
        "audio_eos_token": "<|audio_eos|>",
    }
    tokenizer = Qwen2Tokenizer(
        vocab={symbol: index for index, symbol in enumerate(alphabet)}, merges=[], extra_special_tokens=roles
    )
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS})
    ids = {token: int(tokenizer.convert_tokens_to_ids(token)) for token in SPECIALS}
    processor = Qwen2_5OmniProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS),
        video_processor=Qwen2VLVideoProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, cap_pixels_per_frame=False),
        feature_extractor=WhisperFeatureExtractor(feature_size=128),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    config = Qwen2_5OmniThinkerConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
        },
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "window_size": 112,
            "in_channels": 3,
            "fullatt_block_indexes": [0],
            "out_hidden_size": 64,
        },
        audio_config={
            "num_mel_bins": 128,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 64,
            "d_model": 32,
            "output_dim": 64,
            "n_window": 100,
            "max_source_positions": 1500,
        },
        audio_token_index=ids["<|AUDIO|>"],
        video_token_index=ids["<|VIDEO|>"],
        image_token_index=ids["<|IMAGE|>"],
        audio_start_token_id=ids["<|audio_bos|>"],
        audio_end_token_id=ids["<|audio_eos|>"],
        vision_start_token_id=ids["<|vision_bos|>"],
        vision_end_token_id=ids["<|vision_eos|>"],
        user_token_id=int(tokenizer.convert_tokens_to_ids("u")),
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2_5OmniThinkerForConditionalGeneration(config)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim >= 2:
                parameter.normal_(0.0, 0.3)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    processor.save_pretrained(path)
    model.save_pretrained(path)
    return TinyAVLLM(
        path=path,
        end_of_answer=ids["<|im_end|>"],
        pad=ids["<|endoftext|>"],
        video=ids["<|VIDEO|>"],
        audio=ids["<|AUDIO|>"],
    )
