"""The built-in audio-visual QA workload: committed weights, generation modes, settings
with real effect, procedural data, and the training script."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tuner.workloads.avqa import AVQAWorkload
from tuner.workloads.avqa.checkpoint import DEFAULT_WEIGHTS, load_checkpoint
from tuner.workloads.avqa.data import (
    ANSWERS,
    FLASH_FRAMES,
    NATIVE_AUDIO_RATE,
    NATIVE_FPS,
    QUESTION_TYPES,
    clip_facts,
    ground_truth,
    heldout_questions,
    render_clip,
    sample_frame_indices,
)
from tuner.workloads.avqa.media import resample_audio
from tuner.workloads.avqa.model import AVQAConfig
from tuner.workloads.avqa.train import TrainConfig, train
from tuner.workloads.base import InvalidSetting, RunContext, WorkloadOutput

FULL = {"video_fps": 8.0, "max_frames": 64, "batch_size": 12}
"""Every frame and all the audio: what the accuracy checks start from."""

ACCURACY_QUESTIONS = 48
"""8 questions of each of the 6 types."""

CHANCE = sum(1 / len(ANSWERS[t]) for t in QUESTION_TYPES) / len(QUESTION_TYPES)
"""Expected exact match of a uniform guess per question type: 0.31."""


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread: on a shared 2-core machine, two threads that wait on each other
    make these small models ten times slower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def context(tmp_path: Path, seed: int = 0, **inputs: Any) -> RunContext:
    return RunContext(device="cpu", seed=seed, inputs={"num_questions": 6, **inputs}, workdir=tmp_path)


@pytest.fixture(scope="module")
def workload() -> AVQAWorkload:
    """One loaded workload shared by the module (weights and clips load once)."""
    instance = AVQAWorkload()
    instance.setup({}, RunContext(device="cpu", seed=0, inputs={"num_questions": 6}, workdir=Path(".")))
    return instance


def answer(workload: AVQAWorkload, params: Mapping[str, Any], ctx: RunContext) -> WorkloadOutput:
    output = workload.run(params, ctx)
    assert output.text is not None
    return output


def exact_match(output: WorkloadOutput, num_questions: int) -> float:
    assert output.text is not None
    truth = ground_truth(num_questions)
    return sum(a == t for a, t in zip(output.text, truth)) / num_questions


# --------------------------------------------------------------------------- weights


def test_committed_weights_load_with_metadata() -> None:
    assert DEFAULT_WEIGHTS.is_file()
    assert DEFAULT_WEIGHTS.stat().st_size <= 5_000_000
    loaded = load_checkpoint()
    for key in ("steps", "seed", "final_loss", "wall_time_s", "threads"):
        assert key in loaded.training
    assert loaded.training["parameters"] == sum(p.numel() for p in loaded.model.parameters())
    assert not loaded.model.training


def test_missing_weights_are_a_clear_invalid_setting(tmp_path: Path) -> None:
    ctx = context(tmp_path, weights=str(tmp_path / "nope.pt"))
    with pytest.raises(InvalidSetting, match="tuner.workloads.avqa.train"):
        AVQAWorkload().setup({}, ctx)


# --------------------------------------------------------------------------- outputs and counters


def test_answers_are_strings_with_counters(workload: AVQAWorkload, tmp_path: Path) -> None:
    output = answer(workload, {}, context(tmp_path))
    assert output.items == 6 and len(output.text or []) == 6
    assert all(isinstance(a, str) and a for a in output.text or [])
    counters = output.counters
    assert counters["frames_used"] == 8  # 4 s at 2 fps
    assert counters["audio_seconds_used"] == pytest.approx(4.0)
    assert workload.loaded is not None
    model = workload.loaded.model
    audio_tokens = model.audio.token_count(4 * NATIVE_AUDIO_RATE, NATIVE_AUDIO_RATE)
    assert counters["media_tokens"] == model.config.sink_tokens + 8 * model.config.tokens_per_frame + audio_tokens
    assert counters["new_tokens"] == sum(len(a) + 1 for a in output.text or [])  # + <eos> each
    assert counters["max_new_tokens_hit"] == 0 and counters["batches"] == 6
    assert counters["prompt_tokens"] > counters["new_tokens"]


@pytest.mark.parametrize(
    "params, counter, expected",
    [
        ({"video_fps": 1.0}, "frames_used", 4),
        ({"video_fps": 8.0, "max_frames": 64}, "frames_used", 32),
        ({"video_fps": 8.0, "max_frames": 5}, "frames_used", 5),
        ({"max_audio_seconds": 1.5}, "audio_seconds_used", 1.5),
        ({"batch_size": 4}, "batches", 2),
    ],
)
def test_settings_change_the_inputs(
    workload: AVQAWorkload, tmp_path: Path, params: dict[str, Any], counter: str, expected: float
) -> None:
    assert answer(workload, params, context(tmp_path)).counters[counter] == pytest.approx(expected)


def test_media_tokens_follow_frames_and_audio(workload: AVQAWorkload, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    tokens = {fps: answer(workload, {"video_fps": fps}, ctx).counters["media_tokens"] for fps in (1.0, 2.0, 4.0)}
    assert tokens[1.0] < tokens[2.0] < tokens[4.0]
    short = answer(workload, {"max_audio_seconds": 1.0}, ctx).counters["media_tokens"]
    assert short < tokens[2.0]


# --------------------------------------------------------------------------- generation modes


def test_greedy_and_sampling_are_deterministic_for_a_seed(workload: AVQAWorkload, tmp_path: Path) -> None:
    ctx = context(tmp_path, seed=5, num_questions=12)
    for params in ({}, {"do_sample": True, "temperature": 1.0}):
        assert answer(workload, params, ctx).text == answer(workload, params, ctx).text
    hot = {"do_sample": True, "temperature": 5.0}
    texts = {tuple(answer(workload, hot, context(tmp_path, seed=s, num_questions=12)).text or []) for s in (1, 2, 3)}
    assert len(texts) > 1  # the seed reaches the sampler


def test_sampling_does_not_depend_on_batch_mates(workload: AVQAWorkload, tmp_path: Path) -> None:
    ctx = context(tmp_path, seed=2)
    hot = {"do_sample": True, "temperature": 1.5}
    singles = answer(workload, {**hot, "batch_size": 1}, ctx).text
    assert singles == answer(workload, {**hot, "batch_size": 3}, ctx).text


@pytest.mark.parametrize("beams", [1, 3])
def test_kv_cache_on_and_off_give_identical_answers(workload: AVQAWorkload, tmp_path: Path, beams: int) -> None:
    ctx = context(tmp_path, num_questions=12)
    cached = answer(workload, {"num_beams": beams, "use_cache": True, "batch_size": 4}, ctx)
    recomputed = answer(workload, {"num_beams": beams, "use_cache": False, "batch_size": 4}, ctx)
    assert cached.text == recomputed.text
    assert recomputed.counters["decoded_tokens"] > 3 * cached.counters["decoded_tokens"]


def test_beam_search_runs_and_answers(workload: AVQAWorkload, tmp_path: Path) -> None:
    ctx = context(tmp_path, num_questions=12)
    greedy = answer(workload, FULL, ctx)
    beams = answer(workload, {**FULL, "num_beams": 3}, ctx)
    assert len(beams.text or []) == 12 and all(isinstance(a, str) for a in beams.text or [])
    assert beams.counters["decode_calls"] >= greedy.counters["decode_calls"]
    assert exact_match(beams, 12) >= exact_match(greedy, 12) - 2 / 12


# --------------------------------------------------------------------------- quality


def test_accuracy_is_above_chance_and_falls_with_truncation(workload: AVQAWorkload, tmp_path: Path) -> None:
    ctx = context(tmp_path, num_questions=ACCURACY_QUESTIONS)
    full = exact_match(answer(workload, FULL, ctx), ACCURACY_QUESTIONS)
    assert full >= 0.7 > CHANCE + 0.3, f"held-out exact match {full:.2f} (chance {CHANCE:.2f})"
    truncated = answer(workload, {**FULL, "max_new_tokens": 1}, ctx)
    assert exact_match(truncated, ACCURACY_QUESTIONS) == 0.0  # every answer has >= 2 characters
    assert truncated.counters["max_new_tokens_hit"] == ACCURACY_QUESTIONS


def test_flash_counting_needs_frames(workload: AVQAWorkload, tmp_path: Path) -> None:
    questions = heldout_questions(ACCURACY_QUESTIONS)
    ctx = context(tmp_path, num_questions=ACCURACY_QUESTIONS)

    def flash_accuracy(params: Mapping[str, Any]) -> float:
        text = answer(workload, {**FULL, **params}, ctx).text or []
        scored = [a == q.answer for q, a in zip(questions, text) if q.question_type == "flashes"]
        return sum(scored) / len(scored)

    assert flash_accuracy({}) > flash_accuracy({"video_fps": 1.0}) + 0.2
    assert flash_accuracy({}) > flash_accuracy({"max_frames": 4}) + 0.2


def test_ground_truth_in_inputs_is_checked(workload: AVQAWorkload, tmp_path: Path) -> None:
    truth = ground_truth(6)
    answer(workload, {}, context(tmp_path, ground_truth=truth))
    with pytest.raises(InvalidSetting, match="ground_truth"):
        workload.run({}, context(tmp_path, ground_truth=list(reversed(truth))))


def test_demo_spec_ground_truth_matches_its_questions() -> None:
    from tuner.spec.loading import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "search_spaces" / "avqa_demo.yaml")
    inputs = spec.inputs
    assert inputs["ground_truth"] == ground_truth(inputs["num_questions"], inputs.get("first_question", 0))


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "params",
    [
        {"precision": "fp16"},
        {"precision": "int8"},
        {"video_fps": 0},
        {"video_fps": 9.0},
        {"max_frames": 0},
        {"audio_sample_rate": 22050},
        {"audio_sample_rate": 2000},
        {"max_audio_seconds": -1.0},
        {"max_new_tokens": 0},
        {"max_new_tokens": 65},
        {"num_beams": 9},
        {"do_sample": True, "num_beams": 2},
        {"temperature": 0.0},
        {"use_cache": "yes"},
        {"batch_size": 0},
        {"resolution": 224},
    ],
)
def test_invalid_settings_are_refused(params: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(InvalidSetting):
        AVQAWorkload().setup(params, context(tmp_path))


@pytest.mark.parametrize("inputs", [{"question_set": "train"}, {"clip_seconds": 10.0}, {"num_questions": 0}])
def test_invalid_inputs_are_refused(inputs: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(InvalidSetting):
        AVQAWorkload().setup({}, context(tmp_path, **inputs))


# --------------------------------------------------------------------------- data


def test_clips_are_deterministic_and_show_their_facts() -> None:
    facts = clip_facts(12345)
    first, second = render_clip(facts), render_clip(facts)
    assert np.array_equal(first.frames, second.frames) and np.array_equal(first.audio, second.audio)
    assert first.frames.shape == (4 * NATIVE_FPS, 32, 32, 3) and first.frames.dtype == np.uint8
    assert first.audio.shape == (4 * NATIVE_AUDIO_RATE,) and first.audio.dtype == np.float32
    flashes_seen = 0
    for facts in (clip_facts(i) for i in range(20)):
        clip = render_clip(facts)
        bright = np.abs(clip.frames.astype(float) - facts.background).max(axis=(1, 2, 3)) > 60
        hidden_runs = np.flatnonzero(np.diff(bright.astype(int)) == -1)
        assert len(hidden_runs) == facts.flashes  # each flash hides the shape once
        flashes_seen += facts.flashes
    assert flashes_seen > 0 and FLASH_FRAMES == 2


def test_frame_sampling_and_resampling() -> None:
    assert sample_frame_indices(4.0, 2.0, 16).tolist() == [0, 4, 8, 12, 16, 20, 24, 28]
    assert sample_frame_indices(4.0, 8.0, 4).tolist() == [0, 10, 21, 31]
    assert sample_frame_indices(4.0, 0.25, 4).tolist() == [0]
    tone = torch.sin(2 * torch.pi * 5000 * torch.arange(16000) / 16000)[None]
    assert resample_audio(tone, 16000, 8000).abs().max() < 1e-2  # above the new Nyquist: removed
    low = torch.sin(2 * torch.pi * 500 * torch.arange(16000) / 16000)[None]
    assert resample_audio(low, 16000, 8000).abs().max() > 0.9


def test_heldout_questions_cycle_through_types() -> None:
    questions = heldout_questions(12)
    assert [q.question_type for q in questions[:6]] == list(QUESTION_TYPES)
    assert ground_truth(12) == [q.answer for q in questions]
    assert ground_truth(3, first=2) == ground_truth(5)[2:]


# --------------------------------------------------------------------------- training


def test_tiny_training_run_lowers_the_loss_and_is_deterministic() -> None:
    config = TrainConfig(steps=30, clips_per_step=2, warmup_steps=2, learning_rate=1e-2, seed=7)
    tiny = AVQAConfig(dim=32, decoder_layers=1, media_layers=1)
    first = train(config, tiny, log=None)
    second = train(config, tiny, log=None)
    assert first.losses == second.losses
    state, other = first.model.state_dict(), second.model.state_dict()
    assert all(torch.equal(state[name], other[name]) for name in state)
    assert np.mean(first.losses[-3:]) < 0.8 * np.mean(first.losses[:3])


# --------------------------------------------------------------------------- CUDA


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_cuda_precisions_answer_like_fp32_on_cpu(precision: str, tmp_path: Path) -> None:
    num = 24
    cpu = AVQAWorkload()
    cpu_ctx = context(tmp_path, num_questions=num)
    cpu.setup(FULL, cpu_ctx)
    reference = exact_match(cpu.run(FULL, cpu_ctx), num)
    gpu = AVQAWorkload()
    ctx = RunContext(device="cuda", seed=0, inputs={"num_questions": num}, workdir=tmp_path, gpu_slot="0")
    params = {**FULL, "precision": precision}
    gpu.setup(params, ctx)
    first, second = gpu.run(params, ctx), gpu.run(params, ctx)
    gpu.synchronize()
    assert first.text == second.text and len(first.text or []) == num
    assert exact_match(first, num) >= reference - 0.15
    gpu.teardown()
    cpu.teardown()
