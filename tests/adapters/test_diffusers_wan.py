"""The diffusers video factory on the real diffusers classes: WanPipeline built from the ``tiny`` preset.

Everything here runs diffusers' own WanPipeline, WanTransformer3DModel, AutoencoderKLWan, schedulers and
cache hooks on the CPU, with seeded random weights: nothing is simulated and nothing downloads. The
published sizes are checked on the meta device (no memory). A real study of the tiny spec:
tests/cli/test_wan_tiny_study.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("diffusers")

import torch  # noqa: E402

from tuner.adapters.factories.diffusers_video import DiffusersVideoModel, make_video_pipeline  # noqa: E402
from tuner.adapters.factories.wan.knobs import CACHES  # noqa: E402
from tuner.adapters.factories.wan.presets import PRESETS, WanPreset, parameter_count  # noqa: E402
from tuner.adapters.python import PythonAdapterWorkload  # noqa: E402
from tuner.workloads.base import InvalidSetting, RunContext  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FACTORY = "tuner.adapters.factories.diffusers_video:make_video_pipeline"
INPUTS = {"prompt": "a cat on the grass", "negative_prompt": "blurry"}
SMALL: dict[str, Any] = {"num_frames": 5, "height": 32, "width": 48, "num_inference_steps": 3, "guidance_scale": 5.0}


def video_of(model: DiffusersVideoModel, params: dict[str, Any]) -> np.ndarray:
    """The uint8 video ``model`` generates for ``params`` (and :data:`INPUTS`)."""
    video = model.run(params, INPUTS).video
    assert video is not None
    return video


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/adapters/conftest.py: one torch thread, offline hub


def test_output_is_uint8_video_of_the_asked_shape_and_seeded(tiny: DiffusersVideoModel) -> None:
    output = tiny.run({**SMALL, "batch_size": 2}, INPUTS)
    video = output.video
    assert video is not None and video.shape == (2, 5, 32, 48, 3) and video.dtype == np.uint8
    assert output.items == 2 and output.counters == {"frames": 5.0, "steps": 3.0, "cfg": 1.0}
    assert video.std() > 5, "an untrained network's video, but not a flat one"
    again = video_of(tiny, {**SMALL, "batch_size": 2})
    assert np.array_equal(video, again), "same seed, same video"
    rebuilt = make_video_pipeline(weights="random", architecture="tiny", device="cpu", seed=0)
    rebuilt.load({"precision": "fp32"})
    assert np.array_equal(video_of(rebuilt, {**SMALL, "batch_size": 2}), video), "the weights too"
    other = make_video_pipeline(weights="random", architecture="tiny", device="cpu", seed=1)
    other.load({"precision": "fp32"})
    assert not np.array_equal(video_of(other, {**SMALL, "batch_size": 2}), video)
    assert other.weights_identity({}) == "random:tiny:1" and other.declared_weights({}) == {}


def test_dynamic_knobs_change_the_video_and_come_back(tiny: DiffusersVideoModel) -> None:
    """Steps, CFG, scheduler, flow shift and VAE tiling apply without a reload; leaving them out restores
    the loaded scheduler (a warm model carries nothing over from the previous trial)."""
    base = video_of(tiny, SMALL)
    knobs: dict[str, dict[str, Any]] = {
        "steps": {"num_inference_steps": 5},
        "no_cfg": {"guidance_scale": 1.0},
        "euler": {"scheduler": "euler"},
        "dpm": {"scheduler": "dpm++", "flow_shift": 5.0},
        "tiling": {"vae_tiling": True},
    }
    changed = {name: video_of(tiny, {**SMALL, **knob}) for name, knob in knobs.items()}
    for name, video in changed.items():
        assert video.shape == base.shape and not np.array_equal(video, base), name
    assert tiny.run({**SMALL, "guidance_scale": 1.0}, INPUTS).counters["cfg"] == 0.0
    assert np.array_equal(video_of(tiny, SMALL), base), "back to the loaded scheduler and no tiling"
    assert np.array_equal(video_of(tiny, {**SMALL, "scheduler": "unipc", "flow_shift": 3.0}), base), (
        "the default scheduler is Wan's UniPC, flow shift 3"
    )


def test_bad_frames_sizes_and_settings_are_invalid(tiny: DiffusersVideoModel) -> None:
    for bad in ({"num_frames": 8}, {"num_frames": 0}, {"height": 40}, {"width": 0}, {"width": 24}):
        with pytest.raises(InvalidSetting, match="4k\\+1 and height/width positive multiples of 16"):
            tiny.run({**SMALL, **bad}, INPUTS)
    refusals = {
        "num_inference_steps": (0, "num_inference_steps"),
        "batch_size": (0, "batch_size"),
        "guidance_scale_2": (3.0, "two-expert"),
        "scheduler": ("ddim", "scheduler must be one of"),
        "flow_shift": (0.0, "flow_shift must be > 0"),
        "cache": ("teacache", "cache must be one of"),
        "cache_threshold": (-1.0, "cache_threshold must be >= 0"),
    }
    for name, (value, message) in refusals.items():
        extra = {"cache": "fbc"} if name == "cache_threshold" else {}
        with pytest.raises(InvalidSetting, match=message):
            tiny.run({**SMALL, **extra, name: value}, INPUTS)
    model = make_video_pipeline(weights="random", architecture="tiny", device="cpu")
    static_refusals = {
        "offload": ("model", "needs an accelerator"),
        "precision": ("int8", "precision must be"),
        "attention_backend": ("flash_hub", "downloads its kernel"),
        "compile": ("fast", "compile must"),
    }
    for name, (value, message) in static_refusals.items():
        with pytest.raises(InvalidSetting, match=message):
            model.load({"precision": "fp32", name: value})
    with pytest.raises(InvalidSetting, match="needs a CUDA device"):
        model.load({"precision": "bf16", "attention_backend": "_native_flash"})
    assert model.pipe is None, "refused before anything was built"


@pytest.mark.slow
def test_the_cache_knob_enables_diffusers_hooks_on_the_transformer(tiny: DiffusersVideoModel) -> None:
    from diffusers.hooks import (
        FasterCacheConfig,
        FirstBlockCacheConfig,
        MagCacheConfig,
        PyramidAttentionBroadcastConfig,
        SeaCacheConfig,
        TaylorSeerCacheConfig,
    )
    from diffusers.hooks.hooks import HookRegistry

    params = {**SMALL, "num_inference_steps": 8}
    plain = video_of(tiny, params)
    transformer = tiny.pipe.transformer
    kinds = {
        "fbc": FirstBlockCacheConfig,
        "pab": PyramidAttentionBroadcastConfig,
        "fastercache": FasterCacheConfig,
        "taylorseer": TaylorSeerCacheConfig,
        "magcache": MagCacheConfig,
        "seacache": SeaCacheConfig,
    }
    assert set(kinds) == set(CACHES) - {"none"}
    for method, kind in kinds.items():
        knob = {"cache_threshold": 0.5} if method in ("fbc", "magcache", "seacache") else {"cache_interval": 2}
        video = video_of(tiny, {**params, "cache": method, **knob})
        assert isinstance(transformer._cache_config, kind), method
        assert not np.array_equal(video, plain), f"{method} skipped some computation"
        assert np.array_equal(video_of(tiny, {**params, "cache": method, **knob}), video), (
            f"{method}: its state is reset between calls"
        )
    assert transformer._cache_config.threshold == 0.5  # seacache, the last one
    tiny.run({**params, "cache": "taylorseer", "cache_interval": 3}, INPUTS)
    assert transformer._cache_config.cache_interval == 3
    hooks = HookRegistry.check_if_exists_or_initialize(transformer.blocks[0].attn1).hooks
    assert "taylorseer_cache" in hooks, "TaylorSeer hooks Wan's attention (its default patterns would not)"
    tiny.run({**params, "cache": "fbc", "cache_threshold": 0.0}, INPUTS)
    assert isinstance(transformer._cache_config, FirstBlockCacheConfig) and transformer._cache_config.threshold == 0.0
    assert np.array_equal(video_of(tiny, params), plain) and not transformer.is_cache_enabled


def test_magcache_ratios_are_calibrated_for_this_network(tiny: DiffusersVideoModel) -> None:
    params = {**SMALL, "num_inference_steps": 6, "cache": "magcache", "cache_threshold": 0.2}
    tiny.run(params, INPUTS)
    ratios = tiny.pipe.transformer._cache_config.mag_ratios
    assert len(ratios) == 6 and float(ratios[0]) == 1.0 and all(0.0 < float(r) < 10.0 for r in ratios)
    assert len(tiny._calibrated) >= 1
    calibrations = len(tiny._calibrated)
    tiny.run(params, INPUTS)
    assert len(tiny._calibrated) == calibrations, "measured once per setting"


def test_a_static_knob_reloads_the_model_and_the_vae_keeps_its_own_dtype(tmp_path: Path) -> None:
    workload = PythonAdapterWorkload(
        {
            "factory": FACTORY,
            "reload_on": ["precision", "attention_backend"],
            "kwargs": {"weights": "random", "architecture": "tiny", "device": "cpu"},
        }
    )
    context = RunContext(device="cpu", seed=0, inputs=INPUTS, workdir=tmp_path)
    loads = PythonAdapterWorkload.loads_in_process
    settings = {**SMALL, "precision": "fp32", "attention_backend": "native"}
    workload.setup(settings, context)
    first = workload.run(settings, context)
    workload.run({**settings, "num_inference_steps": 2}, context)  # a dynamic knob: no reload
    assert PythonAdapterWorkload.loads_in_process == loads + 1
    bf16 = {**settings, "precision": "bf16"}
    workload.setup(bf16, context)
    second = workload.run(bf16, context)
    assert PythonAdapterWorkload.loads_in_process == loads + 2 and second.counters["adapter_loads"] == loads + 2
    pipe = workload.model.pipe
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.vae.dtype == torch.float32, "Wan keeps its VAE in fp32"
    assert pipe.transformer.scale_shift_table.dtype == torch.float32, "and its _keep_in_fp32_modules"
    assert first.video is not None and second.video is not None and not np.array_equal(first.video, second.video)
    math_backend = {**settings, "attention_backend": "_native_math"}
    workload.setup(math_backend, context)
    assert PythonAdapterWorkload.loads_in_process == loads + 3
    assert workload.model.weights_identity(INPUTS) == "random:tiny:0"
    workload.teardown()


def test_the_attention_backend_switches_without_a_reload_and_warms_up_once(tmp_path: Path) -> None:
    workload = PythonAdapterWorkload(
        {
            "factory": FACTORY,
            "reload_on": ["precision"],
            "kwargs": {"weights": "random", "architecture": "tiny", "device": "cpu"},
        }
    )
    context = RunContext(device="cpu", seed=0, inputs=INPUTS, workdir=tmp_path)
    settings = {**SMALL, "precision": "fp32", "attention_backend": "native"}
    workload.setup(settings, context)
    loads = PythonAdapterWorkload.loads_in_process
    assert workload.knows_warmup() and workload.warmup_calls(settings) == 1, "a shape new to the load"
    native = workload.run(settings, context)
    assert workload.warmup_calls(settings) == 0, "run once: warm"
    math_backend = {**settings, "attention_backend": "_native_math"}
    workload.setup(math_backend, context)
    assert workload.warmup_calls(math_backend) == 1, "another backend: other kernels, warmed up once"
    math = workload.run(math_backend, context)
    assert PythonAdapterWorkload.loads_in_process == loads, "no reload"
    assert workload.model._backend == "_native_math" and workload.warmup_calls(math_backend) == 0
    assert native.video is not None and math.video is not None
    assert np.abs(native.video.astype(int) - math.video.astype(int)).max() <= 2, "the same network, other kernels"
    workload.model._compile = "default"
    with pytest.raises(InvalidSetting, match="reload_on"):
        workload.run(settings, context)
    workload.teardown()


def test_the_denoisers_work_grows_with_steps_and_frames(tiny: DiffusersVideoModel) -> None:
    """What a trial's latency is made of, counted, not timed: the denoiser runs once per step and CFG branch, and
    its token sequence grows with the latent frames (Wan's VAE: 4n+1 frames -> n+1 latent frames). How latency
    follows on this CPU is a benchmark's question: ``bench/models_cpu.py`` times the steps and frames sweeps."""
    calls: list[int] = []

    def count(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        calls.append(int(hidden.shape[2]))  # latent frames of (batch, channels, frames, height, width)

    def work(**knobs: Any) -> list[int]:
        calls.clear()
        tiny.run({**SMALL, "height": 64, "width": 64, **knobs}, INPUTS)
        return list(calls)

    handle = tiny.pipe.transformer.register_forward_pre_hook(count, with_kwargs=True)
    try:
        few, many = work(num_inference_steps=2, num_frames=5), work(num_inference_steps=12, num_frames=5)
        short, long = work(num_inference_steps=8, num_frames=5), work(num_inference_steps=8, num_frames=33)
        no_cfg = work(num_inference_steps=8, num_frames=5, guidance_scale=1.0)
    finally:
        handle.remove()
    assert (len(few), len(many)) == (2 * 2, 2 * 12), "one call per step and CFG branch"
    assert len(no_cfg) == 8, "no unconditional branch without CFG"
    assert set(short) == {2} and set(long) == {9}, "5 frames -> 2 latent frames, 33 -> 9"


def test_a_two_expert_model_switches_at_the_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wan2.2's A14B layout (transformer + transformer_2, boundary_ratio) at the tiny size."""
    tiny_preset = PRESETS["tiny"]
    monkeypatch.setitem(
        PRESETS,
        "tiny-a2x",
        WanPreset("tiny-a2x", tiny_preset.transformer, experts=2, boundary_ratio=0.875, vae=tiny_preset.vae),
    )
    model = make_video_pipeline(weights="random", architecture="tiny-a2x", device="cpu", seed=0)
    model.load({"precision": "fp32"})
    assert model.pipe.transformer_2 is not None and model.pipe.config.boundary_ratio == 0.875
    calls = {"transformer": 0, "transformer_2": 0}
    for name in calls:
        getattr(model.pipe, name).register_forward_pre_hook(
            lambda *_, name=name: calls.__setitem__(name, calls[name] + 1)
        )
    output = model.run({**SMALL, "num_inference_steps": 8, "guidance_scale_2": 3.0, "cache": "fbc"}, INPUTS)
    assert output.video is not None and output.video.shape == (1, 5, 32, 48, 3)
    assert calls["transformer"] > 0 and calls["transformer_2"] > 0, calls
    assert model.warmup_settings({**SMALL, "num_inference_steps": 8}) is None, "one step would warm one expert"
    with pytest.raises(InvalidSetting, match="two experts"):
        model.run({**SMALL, "cache": "magcache"}, INPUTS)


def _save_with_a_text_encoder(model: DiffusersVideoModel, directory: Path) -> None:
    """``model``'s pipeline saved with a tiny random UMT5 encoder and a word-level tokenizer (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel

    words = ["<pad>", "</s>", "<unk>", *["a", "cat", "on", "the", "grass", "blurry"]]
    vocabulary = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    vocabulary.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=vocabulary, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    encoder = UMT5EncoderModel(
        UMT5Config(
            vocab_size=len(words), d_model=PRESETS["tiny"].text_dim, d_kv=16, d_ff=128, num_layers=1, num_heads=4
        )
    )
    pipe = model.pipe
    pipe.register_modules(text_encoder=encoder, tokenizer=tokenizer)
    try:
        pipe.save_pretrained(directory)
    finally:
        pipe.register_modules(text_encoder=None, tokenizer=None)


@pytest.mark.slow
def test_a_weights_directory_is_read_locally_with_its_text_encoder(tiny: DiffusersVideoModel, tmp_path: Path) -> None:
    """``model_path``: a diffusers directory (here the tiny pipeline saved), local files only; the VAE in fp32
    whatever the precision; a text encoder, when the directory has one, encodes the prompts (kept off the
    pipeline, on the CPU); without one, the seeded embeddings."""
    plain, encoded = tmp_path / "no_text_encoder", tmp_path / "with_text_encoder"
    tiny.pipe.save_pretrained(plain)
    _save_with_a_text_encoder(tiny, encoded)
    expected = video_of(tiny, SMALL)
    read = make_video_pipeline(model_path=str(plain), pipeline_class="diffusers:WanPipeline", device="cpu", seed=0)
    read.load({"precision": "fp32"})
    for name in ("transformer", "vae"):
        built, loaded = getattr(tiny.pipe, name).state_dict(), getattr(read.pipe, name).state_dict()
        assert built.keys() == loaded.keys() and all(torch.equal(built[k], loaded[k]) for k in built), name
    got = video_of(read, SMALL)  # same weights and embeddings; float rounding may differ by one level in a few pixels
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1 and (got != expected).mean() < 0.001
    assert read.weights_identity(INPUTS) == f"path:{plain}"
    assert sorted(read.declared_weights(INPUTS)) == [
        "transformer/diffusion_pytorch_model.safetensors",
        "vae/diffusion_pytorch_model.safetensors",
    ]
    with_encoder = make_video_pipeline(model_path=str(encoded), pipeline_class="diffusers:WanPipeline", device="cpu")
    with_encoder.load({"precision": "bf16"})
    pipe = with_encoder.pipe
    assert pipe.text_encoder is None and with_encoder._prompts.encoder is not None, "encoder off the pipeline"
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.vae.dtype == torch.float32
    video = video_of(with_encoder, SMALL)
    assert video.shape == expected.shape and not np.array_equal(video, expected), "the encoder's embeddings"
    assert "text_encoder/model.safetensors" in with_encoder.declared_weights(INPUTS)


def test_published_sizes_on_the_meta_device() -> None:
    """Wan2.1-T2V-1.3B: 12 x 128 heads, ffn 8960, 30 layers, text 4096: 1.419 B parameters; 14B: 14.29 B."""
    small, large, experts = PRESETS["wan2.1-t2v-1.3b"], PRESETS["wan2.1-t2v-14b"], PRESETS["wan2.2-t2v-a14b"]
    config = small.transformer_config()
    assert (
        config["num_attention_heads"],
        config["attention_head_dim"],
        config["ffn_dim"],
        config["num_layers"],
        config["text_dim"],
        config["in_channels"],
        config["patch_size"],
    ) == (12, 128, 8960, 30, 4096, 16, (1, 2, 2))
    assert parameter_count(small) == 1_418_996_800  # meta tensors: 2 x 14.29 B fp32 parameters would not fit here
    assert abs(parameter_count(large) / 1e9 - 14.29) < 0.01
    assert parameter_count(experts) == 2 * parameter_count(large) and experts.boundary_ratio == 0.875
    model = make_video_pipeline(weights="random", architecture="wan2.1-t2v-1.3b", device="cuda", seed=5)
    assert model.weights_identity({}) == "random:wan2.1-t2v-1.3b:5" and model.pipe is None, "built at load only"


@pytest.mark.slow
def test_nothing_downloads_and_no_hub_cache_is_written(tmp_path: Path) -> None:
    """In a fresh process with every socket connection refused and the caches in an empty directory."""
    script = tmp_path / "offline.py"
    script.write_text(
        "import socket\n"
        "def refuse(*args, **kwargs):\n"
        "    raise OSError('network access during a tuner trial')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "from tuner.adapters.factories.diffusers_video import make_video_pipeline\n"
        "model = make_video_pipeline(weights='random', architecture='tiny', device='cpu')\n"
        "model.load({'precision': 'fp32', 'attention_backend': 'native'})\n"
        f"video = model.run({SMALL!r}, {INPUTS!r}).video\n"
        "print(video.shape)\n"
    )
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(cache / "hf"),
        "HF_HUB_CACHE": str(cache / "hub"),
        "TORCH_HOME": str(cache / "torch"),
        "XDG_CACHE_HOME": str(cache / "xdg"),
        "OMP_NUM_THREADS": "1",
        "DIFFUSERS_CACHE": str(cache / "diffusers"),
    }
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("(1, 5, 32, 48, 3)")
    written = [str(path) for path in cache.rglob("*") if path.is_file()] if cache.exists() else []
    assert written == [], written
