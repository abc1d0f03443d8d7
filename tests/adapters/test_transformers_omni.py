"""The Qwen2.5-Omni thinker factory against the real transformers classes (``tiny`` preset, CPU).

No network: the hub's offline variables are set before transformers is imported, and every
socket connection attempt fails the test. The inputs are checked against the library itself:
the video patches against ``Qwen2VLVideoProcessor`` (when torchvision is installed), the
placeholder counts against the encoders' own output lengths, and ``generate`` runs (it refuses
video placeholders that do not match the video features). About 30 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / huggingface_hub read it
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from tuner.adapters.factories import av_inputs  # noqa: E402
from tuner.adapters.factories.omni_presets import PRESETS, TOKENS, parameter_count  # noqa: E402
from tuner.adapters.factories.transformers_av import OmniThinkerModel, make_omni_thinker  # noqa: E402
from tuner.adapters.python import PythonAdapterWorkload  # noqa: E402
from tuner.workloads.base import InvalidSetting, RunContext  # noqa: E402

INPUTS = {
    "video_seconds": 4.0,
    "source_fps": 25.0,
    "video_height": 168,
    "video_width": 224,
    "min_pixels": 3136,
    "prompt_tokens": 16,
}
PARAMS = {
    "video_fps": 2.0,
    "max_frames": 8,
    "max_pixels": 12544,
    "audio_seconds": 2.0,
    "max_new_tokens": 6,
    "num_beams": 1,
    "use_cache": True,
    "batch_size": 1,
}
STATIC = {"precision": "fp32", "attn_implementation": "sdpa"}

pytestmark = pytest.mark.slow  # 30 s in all: transformers' import and a few tiny models


@pytest.fixture(scope="module", autouse=True)
def no_network() -> Iterator[None]:
    """Any attempt to open a network connection fails the test (model builds included: module scope)."""
    assert os.environ["HF_HUB_OFFLINE"] == "1"

    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError(f"network access attempted: {address}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        yield


@pytest.fixture(scope="module")
def tiny(no_network: None) -> Iterator[OmniThinkerModel]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = make_omni_thinker(weights="random", architecture="tiny", seed=0, device="cpu")
    model.load(STATIC)
    yield model
    model.unload()
    torch.set_num_threads(threads)


def test_video_patches_are_the_processors(tiny: OmniThinkerModel) -> None:
    pytest.importorskip("torchvision")
    from transformers import Qwen2VLVideoProcessor
    from transformers.video_utils import VideoMetadata

    frames = np.random.default_rng(0).integers(0, 256, (100, 150, 200, 3), dtype=np.uint8)
    processor = Qwen2VLVideoProcessor(min_pixels=3136, max_pixels=112 * 168, cap_pixels_per_frame=False)
    expected = processor(
        videos=[frames],
        video_metadata=[VideoMetadata(total_num_frames=100, fps=25.0, width=200, height=150, duration=4.0)],
        do_sample_frames=True,
        fps=2.0,
        max_frames=6,
        return_tensors="pt",
    )
    indices = av_inputs.sample_frame_indices(100, 25.0, 2.0, 6)
    height, width = av_inputs.smart_resize(150, 200, 3136, 112 * 168)
    source = av_inputs.VideoSource(100, 25.0, 150, 200, array=frames)
    pixels, grid = av_inputs.patchify(source.frames(indices, height, width))
    assert grid == expected["video_grid_thw"].tolist()[0] == [3, 8, 10]
    assert torch.allclose(pixels, expected["pixel_values_videos"], atol=1e-5), "same bytes, same layout"


def test_placeholder_counts_are_what_the_encoders_produce(tiny: OmniThinkerModel) -> None:
    prepared = tiny.prepare(PARAMS, INPUTS)
    tensors = prepared.tensors
    ids = tensors["input_ids"][0]
    assert int((ids == TOKENS.video).sum()) == prepared.video_tokens
    assert int((ids == TOKENS.audio).sum()) == prepared.audio_tokens == 50, "2 s: 200 mel frames -> 50 tokens"
    assert prepared.frames == 8 and prepared.frame_size == (84, 112)  # 2 fps x 4 s, 12544 px at 3:4
    assert prepared.video_tokens == 4 * 6 * 8 // 4
    with torch.inference_mode():
        video = tiny.model.get_video_features(tensors["pixel_values_videos"], tensors["video_grid_thw"])
        audio = tiny.model.get_audio_features(tensors["input_features"], tensors["feature_attention_mask"])
    assert sum(len(part) for part in video.pooler_output) == prepared.video_tokens
    assert audio.last_hidden_state.shape[0] == prepared.audio_tokens
    assert tensors["input_features"].shape == (1, 128, 30000), "padded to the checkpoint's 300 s, as the processor"


def test_generate_runs_for_every_decoding_knob_and_counts_tokens(tiny: OmniThinkerModel) -> None:
    answers = {}
    for change in ({}, {"num_beams": 2}, {"batch_size": 2}, {"use_cache": False}, {"audio_seconds": 0.0}):
        params = {**PARAMS, **change}
        output = tiny.run(params, INPUTS)
        batch = params["batch_size"]
        assert output.items == batch and output.text is not None and len(output.text) == batch
        assert all(len(answer.split()) == params["max_new_tokens"] for answer in output.text), "fixed length"
        assert output.counters["new_tokens"] == params["max_new_tokens"] * batch
        assert output.counters["max_new_tokens_hit"] == batch
        assert (output.counters["audio_tokens"] == 0) == (params["audio_seconds"] == 0)
        answers[next(iter(change), "greedy")] = output.text
    assert answers["use_cache"] == answers["greedy"], "the KV cache changes the cost, not the greedy answer"
    assert answers["batch_size"] == answers["greedy"] * 2, "a batch repeats the request"


def test_same_seed_same_answer_other_seed_other_answer(tiny: OmniThinkerModel) -> None:
    again = make_omni_thinker(weights="random", architecture="tiny", seed=0, device="cpu")
    other = make_omni_thinker(weights="random", architecture="tiny", seed=1, device="cpu")
    for model in (again, other):
        model.load(STATIC)
    first = tiny.run(PARAMS, INPUTS).text
    assert again.run(PARAMS, INPUTS).text == first == tiny.run(PARAMS, INPUTS).text
    assert other.run(PARAMS, INPUTS).text != first
    longer = tiny.run({**PARAMS, "max_new_tokens": 10}, INPUTS).text
    assert longer is not None and first is not None and longer[0].startswith(first[0]), "greedy: a prefix"
    assert tiny.weights_identity(INPUTS) == "random:tiny:0" and tiny.declared_weights(INPUTS) == {}


def test_a_static_knob_reloads_and_a_dynamic_one_does_not(tmp_path: Path) -> None:
    workload = PythonAdapterWorkload(
        {
            "factory": "tuner.adapters.factories.transformers_av:make_omni_thinker",
            "kwargs": {"weights": "random", "architecture": "tiny", "device": "cpu"},
            "reload_on": ["precision", "attn_implementation"],
        }
    )
    context = RunContext(device="cpu", seed=0, inputs=INPUTS, workdir=tmp_path)
    loads = PythonAdapterWorkload.loads_in_process
    workload.setup({**PARAMS, **STATIC}, context)
    first = workload.run({**PARAMS, **STATIC}, context)
    workload.run({**PARAMS, **STATIC, "max_new_tokens": 3, "max_frames": 4}, context)
    assert PythonAdapterWorkload.loads_in_process == loads + 1, "dynamic knobs keep the model"
    assert workload.model.model.config._attn_implementation == "sdpa"
    eager = workload.run({**PARAMS, **STATIC, "attn_implementation": "eager"}, context)
    assert PythonAdapterWorkload.loads_in_process == loads + 2
    assert workload.model.model.config._attn_implementation == "eager"
    assert eager.text == first.text, "same weights (seeded), another attention kernel"
    workload.run({**PARAMS, **STATIC, "precision": "bf16"}, context)
    assert PythonAdapterWorkload.loads_in_process == loads + 3
    assert workload.model.model.dtype == torch.bfloat16
    assert eager.counters["adapter_loads"] == float(loads + 2)
    workload.teardown()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"max_pixels": 2000}, "min_pixels <= max_pixels"),
        ({"audio_seconds": 301.0}, "at most 300 s"),
        ({"audio_seconds": 0.01}, "no audio token"),
        ({"max_frames": 1}, "max_frames must be >= 2"),
        ({"video_fps": 0.0}, "video_fps must be > 0"),
        ({"max_new_tokens": 0}, "must be >= 1"),
        ({"num_beams": 0}, "must be >= 1"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"do_sample": True}, "decodes greedily"),
        ({"max_new_tokens": 32768}, "positions"),
    ],
)
def test_settings_the_model_refuses_are_invalid(tiny: OmniThinkerModel, change: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSetting, match=message):
        tiny.run({**PARAMS, **change}, INPUTS)


def test_refused_inputs_and_static_settings() -> None:
    model = make_omni_thinker(weights="random", architecture="tiny", device="cpu")
    with pytest.raises(InvalidSetting, match="precision must be one of"):
        model.load({"precision": "int3"})
    with pytest.raises(InvalidSetting, match="attn_implementation must be one of"):
        model.load({"precision": "fp32", "attn_implementation": "flex"})
    with pytest.raises(InvalidSetting, match="architecture must be one of"):
        make_omni_thinker(weights="random", architecture="13b", device="cpu").load(STATIC)
    with pytest.raises(InvalidSetting, match="one temporal patch"):
        av_inputs.sample_frame_indices(1, 25.0, 2.0, 8)


def test_weights_from_a_local_omni_directory(tiny: OmniThinkerModel, tmp_path: Path) -> None:
    """A checkpoint laid out as Qwen2.5-Omni's (``thinker_config`` in config.json, ``thinker.*`` tensors)."""
    from safetensors.torch import save_file

    state = {f"thinker.{name}": tensor.contiguous() for name, tensor in tiny.model.state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    thinker = tiny.model.config.to_dict()
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_omni", "thinker_config": thinker}))
    model = make_omni_thinker(weights=str(tmp_path), device="cpu", fixed_length=True)
    model.load(STATIC)
    assert model.tokenizer is None, "no tokenizer files: token ids as text"
    assert model.run(PARAMS, INPUTS).text == tiny.run(PARAMS, INPUTS).text
    assert model.weights_identity(INPUTS) == f"path:{tmp_path}"
    assert model.declared_weights(INPUTS) == {
        "model.safetensors": tmp_path / "model.safetensors",
        "config.json": tmp_path / "config.json",
    }
    with pytest.raises(FileNotFoundError, match="no config.json"):
        make_omni_thinker(weights=str(tmp_path / "missing"), device="cpu").load(STATIC)


def test_published_sizes_on_the_meta_device() -> None:
    """7B: Qwen2.5-7B's decoder (published 7.61 B parameters) + the ViT and audio encoder = 8.93 B."""
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration

    from tuner.adapters.factories.omni_presets import thinker_config

    with torch.device("meta"):
        seven = Qwen2_5OmniThinkerForConditionalGeneration(thinker_config("qwen2.5-omni-7b"))
        three = Qwen2_5OmniThinkerForConditionalGeneration(thinker_config("qwen2.5-omni-3b"))
    count = {
        name: sum(p.numel() for p in module.parameters())
        for name, module in (
            ("text", seven.model),
            ("head", seven.lm_head),
            ("visual", seven.visual),
            ("audio", seven.audio_tower),
        )
    }
    assert abs(count["text"] + count["head"] - 7.61e9) / 7.61e9 < 0.005
    assert 0.60e9 < count["visual"] < 0.70e9 and 0.60e9 < count["audio"] < 0.70e9
    assert abs(parameter_count("qwen2.5-omni-7b") - 8.93e9) / 8.93e9 < 0.005
    assert abs(sum(p.numel() for p in three.model.parameters()) - 3.09e9) / 3.09e9 < 0.005, "Qwen2.5-3B: 3.09 B"
    assert parameter_count("tiny") < 50e6 and set(PRESETS) == {"tiny", "qwen2.5-omni-3b", "qwen2.5-omni-7b"}
