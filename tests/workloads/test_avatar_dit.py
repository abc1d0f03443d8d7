"""Behaviour of the built-in avatar DiT workload: the committed weights, shapes,
determinism, cost scaling, fixed presentation size, setting validation,
procedural data, training, measured quality on held-out pairs, and CUDA paths."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tuner.evaluators.perceptual import stlpips_alex
from tuner.evaluators.video import ssim
from tuner.workloads.avatar_dit import AvatarDiTWorkload
from tuner.workloads.avatar_dit.card import CARD_INPUTS, lipsync, truth_for
from tuner.workloads.avatar_dit.checkpoint import DEFAULT_WEIGHTS, WeightsMissing, load_checkpoint, save_checkpoint
from tuner.workloads.avatar_dit.data import HELD_OUT_SEEDS, TRAIN_SEED_MIN, TrainingData, ground_truth_video, mouth_box
from tuner.workloads.avatar_dit.inputs import (
    AUDIO_FEATURES_PER_FRAME,
    AUDIO_RATE_HZ,
    frame_audio_features,
    render_portraits,
    synth_speech_audio,
)
from tuner.workloads.avatar_dit.model import LATENT_CHANNELS, AvatarDiT, AvatarDiTConfig
from tuner.workloads.avatar_dit.train import Bucket, TrainingPlan, train
from tuner.workloads.base import InvalidSetting, RunContext, WorkloadOutput


def context(tmp_path: Path, seed: int = 0, device: str = "cpu", **inputs: Any) -> RunContext:
    return RunContext(device=device, seed=seed, inputs=inputs, workdir=tmp_path)


def generate(params: Mapping[str, Any], ctx: RunContext) -> WorkloadOutput:
    workload = AvatarDiTWorkload()
    workload.setup(params, ctx)
    try:
        return workload.run(params, ctx)
    finally:
        workload.teardown()


@pytest.mark.parametrize(
    "params, inputs, video_shape",
    [
        ({}, {}, (1, 24, 64, 64, 3)),
        ({"infer_frames": 8, "num_clip": 2, "batch_size": 2}, {}, (2, 16, 64, 64, 3)),
        ({"infer_frames": 5, "resolution": 48}, {}, (1, 24, 64, 64, 3)),  # 5 clips x 5 frames, cut to the audio's 24
        (
            {"infer_frames": 4, "sample_steps": 1},
            {"audio_seconds": 1.5, "fps": 10, "output_size": 40},
            (1, 15, 40, 40, 3),
        ),  # 4 clips x 4 frames, cut to the audio's 15
    ],
)
def test_output_shapes(
    params: dict[str, Any], inputs: dict[str, Any], video_shape: tuple[int, ...], tmp_path: Path
) -> None:
    output = generate(params, context(tmp_path, **inputs))
    assert output.video is not None and output.video.shape == video_shape
    assert output.video.dtype == np.uint8
    assert output.items == video_shape[0]
    assert output.audio_rate == AUDIO_RATE_HZ
    assert output.audio is not None and output.audio.dtype == np.float32
    assert len(output.audio) == round(inputs.get("audio_seconds", 2.0) * AUDIO_RATE_HZ)
    generated = output.counters["clips"] * params.get("infer_frames", 12)
    assert output.counters["frames"] == generated >= video_shape[1], "generated frames are counted before the cut"


def test_run_is_deterministic_and_seeded(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    workload = AvatarDiTWorkload()
    workload.setup({}, ctx)
    first, second = workload.run({}, ctx), workload.run({}, ctx)
    fresh = generate({}, ctx)
    other_seed = generate({}, context(tmp_path, seed=1))
    assert first.video is not None and second.video is not None and fresh.video is not None
    assert np.array_equal(first.video, second.video) and np.array_equal(first.video, fresh.video)
    assert other_seed.video is not None and not np.array_equal(first.video, other_seed.video)


def test_weights_are_the_committed_checkpoint_whatever_the_seed_and_params(tmp_path: Path) -> None:
    committed, training = load_checkpoint(DEFAULT_WEIGHTS)
    assert DEFAULT_WEIGHTS.stat().st_size <= 5_000_000
    assert {"steps", "seed", "final_loss", "wall_time_s"} <= set(training)
    expected = committed.state_dict()
    for seed, params in ((0, {}), (7, {"infer_frames": 4, "resolution": 16, "sample_steps": 2, "precision": "bf16"})):
        workload = AvatarDiTWorkload()
        workload.setup(params, context(tmp_path, seed=seed))
        assert workload.dit is not None
        state = workload.dit.state_dict()
        assert state.keys() == expected.keys()
        assert all(torch.equal(state[name], expected[name]) for name in expected)


def test_missing_weights_fail_with_the_training_command(tmp_path: Path) -> None:
    with pytest.raises(WeightsMissing, match="avatar_dit.train"):
        AvatarDiTWorkload().setup({}, context(tmp_path, weights=str(tmp_path / "absent.pt")))


def test_request_zero_is_the_same_at_every_batch_size(tmp_path: Path) -> None:
    single = generate({"batch_size": 1}, context(tmp_path))
    batched = generate({"batch_size": 3}, context(tmp_path))
    assert single.video is not None and batched.video is not None
    assert np.abs(batched.video[0].astype(int) - single.video[0].astype(int)).max() <= 1
    assert not np.array_equal(batched.video[0], batched.video[1])


def test_clips_chain_forward_only(tmp_path: Path) -> None:
    """Clip 0 does not depend on how many clips follow; later clips differ from a restart."""
    one = generate({"infer_frames": 6, "num_clip": 1}, context(tmp_path))
    three = generate({"infer_frames": 6, "num_clip": 3}, context(tmp_path))
    assert one.video is not None and three.video is not None
    assert np.array_equal(one.video, three.video[:, :6])
    assert not np.array_equal(three.video[:, 6:12], three.video[:, :6])


def test_pipeline_variants_give_the_same_video_on_cpu(tmp_path: Path) -> None:
    """online_decode only changes when decoding happens; streams=2 behaves as 1 on the CPU."""
    base = generate({}, context(tmp_path))
    for variant in ({"online_decode": False}, {"streams": 2}):
        other = generate(variant, context(tmp_path))
        assert base.video is not None and other.video is not None
        assert np.array_equal(base.video, other.video), variant


def test_bf16_on_cpu_runs_close_to_fp32(tmp_path: Path) -> None:
    fp32 = generate({}, context(tmp_path))
    bf16 = generate({"precision": "bf16"}, context(tmp_path))
    assert fp32.video is not None and bf16.video is not None
    assert np.abs(fp32.video.astype(float) - bf16.video.astype(float)).mean() < 2.0


def test_output_size_is_fixed_across_resolutions(tmp_path: Path) -> None:
    videos = {
        res: generate({"resolution": res, "infer_frames": 4, "num_clip": 1, "sample_steps": 2}, context(tmp_path)).video
        for res in (16, 32, 48, 64)
    }
    assert {video.shape for video in videos.values() if video is not None} == {(1, 4, 64, 64, 3)}
    assert not np.array_equal(videos[32], videos[64])


def test_tokens_per_clip_follow_frames_and_resolution(tmp_path: Path) -> None:
    """The counter is the sequence length the DiT's self-attention really sees."""
    for params in ({}, {"infer_frames": 24}, {"resolution": 64, "num_clip": 1}, {"infer_frames": 3}):
        workload = AvatarDiTWorkload()
        workload.setup(params, context(tmp_path))
        assert workload.dit is not None
        seen: list[int] = []
        hook = workload.dit.blocks[0].self_attention.register_forward_hook(
            lambda module, args, result: seen.append(args[0].shape[1])
        )
        output = workload.run(params, context(tmp_path))
        hook.remove()
        frames = params.get("infer_frames", 12)
        side = params.get("resolution", 32) // 4  # tokens per side: resolution / (patch 2 x VAE 2)
        assert output.counters["tokens_per_clip"] == (frames + 3) * side * side  # + reference + 2 motion
        assert set(seen) == {output.counters["tokens_per_clip"]}
        assert len(seen) == output.counters["dit_forwards"] == output.counters["clips"] * 4


def test_cost_grows_superlinearly_with_frames_per_clip(tmp_path: Path) -> None:
    """Joint attention: doubling frames per clip at fixed total frames costs more than 1x."""

    def gflops(**params: Any) -> float:
        return generate(params, context(tmp_path)).counters["dit_gflops"]

    base = gflops(infer_frames=12, num_clip=1, sample_steps=1)
    assert gflops(infer_frames=24, num_clip=1, sample_steps=1) > 2.0 * base
    assert gflops(infer_frames=12, num_clip=1, sample_steps=1, resolution=64) > 4.0 * base
    assert gflops(infer_frames=12, num_clip=1, sample_steps=2) == pytest.approx(2.0 * base)
    assert gflops(infer_frames=12, num_clip=1, sample_steps=1, batch_size=2) == pytest.approx(2.0 * base)


@pytest.mark.parametrize("resolution, frames", [(32, 12), (16, 6), (48, 4)])
def test_flop_estimate_matches_a_flop_counter(resolution: int, frames: int) -> None:
    config = AvatarDiTConfig()
    model = AvatarDiT(config).eval()
    side = resolution // 2
    noisy = torch.randn(2, LATENT_CHANNELS, frames, side, side)
    context_latents = torch.randn(2, LATENT_CHANNELS, config.context_frames, side, side)
    audio = torch.randn(2, frames, config.audio_window, config.audio_features)
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(noisy, context_latents, torch.full((2,), 0.5), audio)
    assert counter.get_total_flops() == pytest.approx(config.forward_flops(resolution, frames, 2), rel=0.01)


@pytest.mark.parametrize(
    "params",
    [
        {"precision": "fp16"},
        {"resolution": 30},
        {"resolution": 0},
        {"resolution": "32"},
        {"sample_steps": 0},
        {"sample_steps": 9},
        {"streams": 0},
        {"streams": 3},
        {"batch_size": 0},
        {"infer_frames": 0},
        {"num_clip": 0},
        {"precision": "fp8"},
        {"online_decode": 1},
        {"resolution_px": 32},
    ],
)
def test_invalid_settings_are_refused(params: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(InvalidSetting):
        AvatarDiTWorkload().setup(params, context(tmp_path))
    with pytest.raises(InvalidSetting):
        AvatarDiTWorkload().run(params, context(tmp_path))


@pytest.mark.parametrize(
    "inputs",
    [
        {"model": {"dim": 64}},
        {"weights": 3},
        {"weights": ""},
        {"audio_seconds": 0},
        {"fps": -1},
        {"output_size": 0},
    ],
)
def test_invalid_inputs_are_refused(inputs: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(InvalidSetting):
        AvatarDiTWorkload().setup({}, context(tmp_path, **inputs))


TINY = AvatarDiTConfig(dim=32, depth=1, heads=2, patch=1)
TINY_PLAN = TrainingPlan(
    steps=40,
    seed=5,
    threads=1,
    learning_rate=1e-2,
    warmup_steps=5,
    token_budget=400,
    log_every=10,
    audio_pool=4,
    buckets=(Bucket(16, 3, 1.0),),
)


def test_tiny_training_lowers_the_loss_deterministically_and_loads_as_weights(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    first = train(TINY, TINY_PLAN, log=lambda line: None)
    second = train(TINY, TINY_PLAN, log=lambda line: None)
    assert first.losses == second.losses  # bit for bit
    assert np.mean(first.losses[-10:]) < 0.7 * np.mean(first.losses[:10])
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()  # restored
    path = tmp_path / "tiny.pt"
    save_checkpoint(path, first.model, first.metadata)
    ctx = context(tmp_path, weights=str(path))
    with pytest.raises(InvalidSetting):  # the checkpoint's patch sets the grid: 1 x 2 = 2 pixels a token
        AvatarDiTWorkload().setup({"resolution": 33}, ctx)
    output = generate({"resolution": 18, "infer_frames": 2, "num_clip": 1}, ctx)
    assert output.counters["tokens_per_clip"] == (2 + 3) * 9 * 9


def test_training_data_is_seeded_and_shaped() -> None:
    one, two = (TrainingData(3, audio_window=3, motion_frames=2, audio_pool=3).batch(32, 5, 2) for _ in range(2))
    assert one.frames.shape == (2, LATENT_CHANNELS, 5, 16, 16) and one.motion.shape == (2, LATENT_CHANNELS, 2, 16, 16)
    assert one.reference.shape == (2, LATENT_CHANNELS, 1, 16, 16) and one.audio.shape == (
        2,
        5,
        3,
        AUDIO_FEATURES_PER_FRAME,
    )
    assert all(
        torch.equal(getattr(one, name), getattr(two, name)) for name in ("reference", "motion", "frames", "audio")
    )
    assert HELD_OUT_SEEDS and max(HELD_OUT_SEEDS) < TRAIN_SEED_MIN


def test_ground_truth_mouth_follows_the_audio_inside_its_box() -> None:
    audio = synth_speech_audio(3.0, seed=HELD_OUT_SEEDS[0])
    truth = ground_truth_video(HELD_OUT_SEEDS[0], audio, 12, 36, 64)
    assert truth.shape == (36, 64, 64, 3) and truth.dtype == np.uint8
    box = mouth_box(HELD_OUT_SEEDS[0])
    lag, _, margin = lipsync(truth, audio, HELD_OUT_SEEDS[0])
    assert lag == 0 and margin > 0.5
    x0, y0, x1, y1 = (int(round(f * 64)) for f in box)
    moving = np.abs(np.diff(truth.astype(int), axis=0)).sum(axis=(0, 3)) > 0
    assert moving.any() and not moving[:y0].any() and not moving[y1:].any()
    assert not moving[:, :x0].any() and not moving[:, x1:].any()


def test_quality_follows_steps_and_resolution_on_held_out_pairs(tmp_path: Path) -> None:
    """The model card's measured claims, on two held-out pairs against their ground truth:
    SSIM rises with every doubling of sample_steps (1 -> 8, at 32 px); ST-LPIPS falls from 32
    to 48 to 64 px and from 1 to 8 steps (at 64 px). Every doubling of the steps at 64 px is measured
    paired over 32 held-out pairs by the card (too slow for a test); at 48 px it is flat past 4 steps."""

    def scores(**params: Any) -> tuple[float, float]:
        per_pair = []
        for seed in HELD_OUT_SEEDS[:2]:
            video = generate(params, context(tmp_path, seed=seed, **CARD_INPUTS)).video
            assert video is not None
            truth = truth_for(seed, video.shape[1])
            per_pair.append((stlpips_alex(video, truth), ssim(video, truth)))
        distance, similarity = np.mean(per_pair, axis=0)
        return float(distance), float(similarity)

    by_steps = [scores(sample_steps=steps)[1] for steps in (1, 2, 4, 8)]
    assert by_steps == sorted(by_steps) and len(set(by_steps)) == 4, by_steps
    by_resolution = [scores(resolution=resolution)[0] for resolution in (32, 48, 64)]
    assert by_resolution == sorted(by_resolution, reverse=True) and len(set(by_resolution)) == 3, by_resolution
    assert scores(resolution=64, sample_steps=1)[0] > scores(resolution=64, sample_steps=8)[0]


def test_generated_lips_move_with_their_own_audio(tmp_path: Path) -> None:
    for index, seed in enumerate(HELD_OUT_SEEDS[:2]):
        output = generate({}, context(tmp_path, seed=seed, **CARD_INPUTS))
        assert output.video is not None and output.audio is not None
        lag, _, margin = lipsync(output.video, output.audio, seed)
        other = synth_speech_audio(float(CARD_INPUTS["audio_seconds"]), HELD_OUT_SEEDS[index + 2])
        _, _, mismatched_margin = lipsync(output.video, other, seed)
        assert abs(lag) <= 1 and margin > mismatched_margin + 0.2, (seed, lag, margin, mismatched_margin)


def test_speech_audio_is_seeded_bursty_and_bounded() -> None:
    audio = synth_speech_audio(2.0, seed=5)
    assert audio.dtype == np.float32 and audio.shape == (32_000,)
    assert np.abs(audio).max() == pytest.approx(0.8, abs=1e-6)
    assert np.array_equal(audio, synth_speech_audio(2.0, seed=5))
    assert not np.array_equal(audio, synth_speech_audio(2.0, seed=6))
    envelope = np.sqrt((audio[: 32_000 // 320 * 320].reshape(-1, 320) ** 2).mean(axis=1))  # 20 ms
    assert (envelope < 0.02).mean() > 0.1 and (envelope > 0.1).mean() > 0.2  # gaps and syllables


def test_frame_features_do_not_depend_on_the_frame_count() -> None:
    audio = synth_speech_audio(1.0, seed=1)
    short = frame_audio_features(audio, AUDIO_RATE_HZ, 12, 6)
    long = frame_audio_features(audio, AUDIO_RATE_HZ, 12, 30)
    assert long.features.shape == (30, AUDIO_FEATURES_PER_FRAME) and long.mouth_open.shape == (30,)
    assert np.array_equal(short.features, long.features[:6])
    assert long.mouth_open.min() >= 0.0 and long.mouth_open.max() <= 1.0
    assert np.all(long.mouth_open[13:] == 0.0)  # past the end of the audio: silence, mouth closed


def test_portraits_are_seeded_and_open_their_mouths() -> None:
    closed, opened = render_portraits(32, seed=2, mouth_open=np.array([0.0, 1.0]))
    assert closed.shape == (32, 32, 3) and closed.min() >= 0.0 and closed.max() <= 1.0
    assert np.abs(closed - opened).sum() > 0 and np.abs(closed[:16] - opened[:16]).sum() == 0  # mouth only
    assert not np.array_equal(closed, render_portraits(32, seed=3, mouth_open=np.array([0.0]))[0])


def test_base_interface_does_not_import_torch() -> None:
    code = "import sys, tuner.workloads.base, tuner.testing.workload_conformance; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_with_a_decode_stream(tmp_path: Path) -> None:
    """bf16 with decoding overlapped on a side stream: right shape, repeatable, and the
    same frames (to rounding) as one stream, fp16 and the CPU's fp32."""
    ctx = context(tmp_path, device="cuda")
    params = {"precision": "bf16", "streams": 2, "batch_size": 2, "infer_frames": 12}
    workload = AvatarDiTWorkload()
    workload.setup(params, ctx)
    overlapped, again = workload.run(params, ctx), workload.run(params, ctx)
    serial = workload.run({**params, "streams": 1}, ctx)
    fp16 = workload.run({**params, "precision": "fp16", "online_decode": False}, ctx)
    workload.synchronize()
    workload.teardown()
    cpu = generate({**params, "precision": "fp32", "streams": 1}, context(tmp_path))

    def mean_abs_difference(first: WorkloadOutput, second: WorkloadOutput) -> float:
        assert first.video is not None and second.video is not None
        return float(np.abs(first.video.astype(float) - second.video.astype(float)).mean())

    assert overlapped.video is not None and overlapped.video.shape == (2, 24, 64, 64, 3)
    assert again.video is not None and np.array_equal(overlapped.video, again.video)
    assert mean_abs_difference(overlapped, serial) < 0.5
    assert mean_abs_difference(overlapped, cpu) < 3.0
    assert mean_abs_difference(fp16, cpu) < 3.0
