"""The cost structure of a measured call (issue 38, item 1): per-phase and per-step seconds recorded per trial,
through real workers -- the tiny Wan pipeline (diffusers, CPU: text, each denoising step, the decode), the tiny
Omni thinker (transformers: prefill, each new token), the built-in avatar and AV-QA models -- and none for a
workload that knows no structure. Only generous ratios: these are timings on a shared CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tuner.evaluators.runtime.structure import STRUCTURE_METRICS, Timeline, structure_info, structure_metrics
from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner
from tuner.spec.metrics import MEASURED_METRICS

WAN = {
    "adapter": "python",
    "factory": "tuner.adapters.factories.diffusers_video:make_video_pipeline",
    "kwargs": {"weights": "random", "architecture": "tiny", "device": "cpu", "seed": 0},
}
WAN_SETTING = {
    "num_frames": 5,
    "height": 32,
    "width": 32,
    "num_inference_steps": 4,
    "guidance_scale": 5.0,
    "precision": "fp32",
}
OMNI = {
    "adapter": "python",
    "factory": "tuner.adapters.factories.transformers_av:make_omni_thinker",
    "kwargs": {"weights": "random", "architecture": "tiny", "device": "cpu", "seed": 0},
}
OMNI_INPUTS = {
    "video_seconds": 2.0,
    "source_fps": 25.0,
    "video_height": 112,
    "video_width": 112,
    "min_pixels": 3136,
    "prompt_tokens": 8,
}
needs_diffusers = pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers is not installed")
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)


def run_trial(
    tmp_path: Path,
    workload: str,
    settings: dict[str, Any],
    inputs: dict[str, Any],
    options: dict[str, Any] | None = None,
    repeats: int = 3,
) -> Any:
    runner = SubprocessRunner()
    try:
        result = runner.run(
            TrialRequest(
                study_name="structure",
                trial_number=0,
                workload_class=workload,
                settings=settings,
                inputs=inputs,
                seed=0,
                device="cpu",
                workload_options=options or {},
                measurement={"warmup": 1, "min_repeats": repeats, "max_repeats": repeats},
                timeout_s=300.0,
                workdir=str(tmp_path / "trial"),
            ),
            Slot(0, None, 1),
        )
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    return result


def value(result: Any, name: str) -> float:
    metric = result.metrics[name]
    assert metric.available and metric.value is not None and metric.value >= 0, (name, metric)
    assert metric.unit == "s"
    return float(metric.value)


@needs_diffusers
def test_the_wan_pipeline_reports_its_steps_and_cfg_doubles_a_step(tmp_path: Path) -> None:
    with_cfg = run_trial(
        tmp_path / "cfg",
        "tuner.adapters.python:PythonAdapterWorkload",
        WAN_SETTING,
        {"prompt": "A cat walks on the grass."},
        WAN,
    )
    structure = with_cfg.info["call_structure"]
    assert structure["steps"] == 4 and len(structure["steps_s"]) == 4 and structure["passes_per_step"] == 2
    step, total = value(with_cfg, "denoise_step_s"), value(with_cfg, "denoise_s")
    assert 0.4 * 4 * step <= total <= 2.5 * 4 * step, "the steps' total is about steps x the median step"
    assert total + value(with_cfg, "decode_s") <= value(with_cfg, "model_s") * 1.05, "the steps lie inside model"
    assert value(with_cfg, "text_s") < 0.1 * step, "random weights: the embedding comes from a cache"
    assert "prefill_s" not in with_cfg.metrics
    without = run_trial(
        tmp_path / "plain",
        "tuner.adapters.python:PythonAdapterWorkload",
        {**WAN_SETTING, "guidance_scale": 1.0},
        {"prompt": "A cat walks on the grass."},
        WAN,
    )
    assert without.info["call_structure"]["passes_per_step"] == 1
    ratio = step / value(without, "denoise_step_s")
    assert 1.15 <= ratio <= 5.0, f"CFG's two denoiser passes per step: {ratio:.2f}x one pass"


@needs_transformers
def test_the_omni_thinker_reports_prefill_and_each_new_token(tmp_path: Path) -> None:
    setting = {
        "video_fps": 2.0,
        "max_frames": 4,
        "max_pixels": 12544,
        "audio_seconds": 1.0,
        "max_new_tokens": 6,
        "num_beams": 1,
        "use_cache": True,
        "batch_size": 1,
        "precision": "fp32",
        "attn_implementation": "sdpa",
    }
    result = run_trial(
        tmp_path,
        "tuner.adapters.python:PythonAdapterWorkload",
        setting,
        OMNI_INPUTS,
        {**OMNI, "reload_on": ["precision", "attn_implementation"]},
    )
    structure = result.info["call_structure"]
    assert result.metrics["count_new_tokens"].value == 6, "random weights decode a fixed length"
    assert structure["new_token_steps"] == 6 and structure["tokens"] == 5, "the first token is the prefill's"
    prefill, token = value(result, "prefill_s"), value(result, "decode_token_s")
    assert prefill + 5 * token <= value(result, "model_s") * 1.5, "prefill and tokens lie inside generate"
    assert prefill > token, "the prefill reads the whole prompt, video and audio; a token step reads one token"
    assert not {"denoise_s", "denoise_step_s", "decode_s"} & set(result.metrics)


def test_the_avatar_reports_its_sampling_steps_and_decode(tmp_path: Path) -> None:
    result = run_trial(
        tmp_path,
        "tuner.workloads.avatar_dit:AvatarDiTWorkload",
        {"infer_frames": 6, "sample_steps": 3, "resolution": 32},
        {"audio_seconds": 1.0, "fps": 12, "output_size": 32},
    )
    structure = result.info["call_structure"]
    assert structure["clips"] == 2 and structure["steps_per_clip"] == 3 and structure["steps"] == 6
    total, step = value(result, "denoise_s"), value(result, "denoise_step_s")
    assert total + value(result, "decode_s") <= value(result, "model_s") * 1.05
    assert 0.3 * 6 * step <= total <= 3.0 * 6 * step


def test_the_avqa_model_reports_prefill_and_tokens(tmp_path: Path) -> None:
    result = run_trial(
        tmp_path,
        "tuner.workloads.avqa:AVQAWorkload",
        {"max_new_tokens": 8, "batch_size": 2},
        {"num_questions": 4},
        repeats=2,
    )
    structure = result.info["call_structure"]
    assert structure["batches"] == 2 and structure["new_token_steps"] == structure["tokens"] + 2
    assert structure["encode_s"] <= structure["prefill_s"], "the media encoders are part of the prefill"
    assert value(result, "prefill_s") > 0 and value(result, "decode_token_s") > 0
    assert structure["new_token_steps"] <= result.metrics["count_decode_calls"].value


def test_a_workload_without_structure_reports_none(tmp_path: Path) -> None:
    result = run_trial(tmp_path, "tuner.workloads.fake:FakeWorkload", {"sleep_s": 0.002}, {})
    assert not set(STRUCTURE_METRICS) & set(result.metrics)
    assert "call_structure" not in result.info


def test_on_a_device_the_timeline_times_the_queue_not_the_host() -> None:
    """CUDA events on the simulated asynchronous device: the host marks at once, the intervals are the kernels'."""
    from tuner.testing.simulated_cuda import SimulatedCudaDevice

    device = SimulatedCudaDevice()

    class Api:
        @staticmethod
        def Event(enable_timing: bool = False) -> Any:
            return device.event()

    timeline = Timeline(Api())
    timeline.start()
    for name, seconds in (("step", 0.05), ("step", 0.02), ("decode", 0.03)):
        device.launch(seconds)
        timeline.mark(name)
    assert [name for name, _ in timeline.intervals()] == ["step", "step", "decode"]
    assert [s for _, s in timeline.intervals()] == pytest.approx([0.05, 0.02, 0.03], abs=0.01)


def test_the_timeline_and_the_medians() -> None:
    ticks = iter([0.0, 1.0, 3.0, 4.0, 4.5])
    timeline = Timeline(clock=lambda: next(ticks))
    timeline.start()
    for name in ("setup", "step", "step", "decode"):
        timeline.mark(name)
    assert timeline.intervals() == [("setup", 1.0), ("step", 2.0), ("step", 1.0), ("decode", 0.5)]
    calls = [
        {
            "phases": {"denoise": 3.0, "decode": 0.5, "setup": 1.0},
            "series": {"steps": [2.0, 1.0]},
            "counts": {"passes_per_step": 2},
        },
        {
            "phases": {"denoise": 5.0, "decode": 0.7, "setup": 1.0},
            "series": {"steps": [1.0, 4.0]},
            "counts": {"passes_per_step": 2},
        },
        {
            "phases": {"denoise": 4.0, "decode": 0.6, "setup": 1.0},
            "series": {"steps": [3.0, 1.0]},
            "counts": {"passes_per_step": 2},
        },
    ]
    metrics = {m.name: m.value for m in structure_metrics(calls)}
    assert metrics == {"denoise_s": 4.0, "decode_s": 0.6, "denoise_step_s": 2.0}, "median of each call's median"
    info = structure_info(calls)
    assert info == {
        "denoise_s": 4.0,
        "decode_s": 0.6,
        "setup_s": 1.0,
        "steps": 2,
        "steps_s": [2.0, 1.0],
        "passes_per_step": 2,
        "calls": 3,
    }, "each step's median over the calls"
    uneven = structure_info([{"series": {"tokens": [1.0, 2.0]}}, {"series": {"tokens": [3.0]}}])
    assert uneven is not None and uneven["tokens_s"] == [3.0], "calls of other lengths: the last call's steps"
    assert structure_info([{}, {}]) is None and structure_metrics([{}]) == []
    assert all(MEASURED_METRICS[name] == ("s", "minimize") for name in STRUCTURE_METRICS)
