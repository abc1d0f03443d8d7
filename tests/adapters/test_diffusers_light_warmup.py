"""The diffusers factory warms a new shape with one denoising step (issue 38, item 4): diffusers' real tiny
Wan pipeline on the CPU. The one-step call warms the shape (no further warm-up is asked), leaves nothing
behind (the setting's next video is bit-identical to one made without it, for every cache method), and is
not offered where only the whole call warms (a compiled denoiser, a MagCache calibration to make, one step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tuner.adapters.factories.diffusers_video import DiffusersVideoModel, make_video_pipeline
from tuner.adapters.factories.wan.warmup import LIGHT_STEPS
from tuner.adapters.python import PythonAdapterWorkload
from tuner.testing.workload_conformance import check_workload_conformance
from tuner.workloads.base import RunContext

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py: one torch thread; ``tiny``: the fp32 model
INPUTS = {"prompt": "a cat on the grass", "negative_prompt": "blurry"}
SHAPES = [(5, 32, 48), (9, 32, 32), (5, 48, 32), (9, 48, 48), (5, 32, 64)]  # a new shape per cache method


def _setting(shape: tuple[int, int, int], cache: str) -> dict[str, Any]:
    frames, height, width = shape
    return {
        "num_frames": frames,
        "height": height,
        "width": width,
        "num_inference_steps": 4,
        "guidance_scale": 5.0,
        "cache": cache,
        "cache_threshold": 0.1,
    }


def _video(model: DiffusersVideoModel, params: dict[str, Any]) -> np.ndarray:
    video = model.run(params, INPUTS).video
    assert video is not None
    return video


@pytest.mark.parametrize("cache", ["none", "fbc", "pab", "taylorseer"])
def test_one_step_warms_the_shape_and_leaves_the_video_unchanged(tiny: DiffusersVideoModel, cache: str) -> None:
    params = _setting(SHAPES[["none", "fbc", "pab", "taylorseer"].index(cache)], cache)
    assert tiny.warmup_calls(params) == 1, "a shape new to the load"
    light = tiny.warmup_settings(params)
    assert light == dict(params, num_inference_steps=LIGHT_STEPS), light
    tiny.run(light, INPUTS)
    assert tiny.warmup_calls(params) == 0, "one step warmed the shape"
    after_light = _video(tiny, params)
    again = _video(tiny, params)
    fresh = make_video_pipeline(weights="random", architecture="tiny", device="cpu", seed=0)
    fresh.load({"precision": "fp32"})
    cold = _video(fresh, params)
    assert np.array_equal(after_light, cold) and np.array_equal(again, cold), "the warm-up left nothing behind"


def test_magcache_warms_lightly_only_with_its_ratios_given(tiny: DiffusersVideoModel) -> None:
    """A calibration is a whole uncached generation: it is the warm-up. With ``mag_ratios`` given there is
    none to make, and the one-step warm-up runs with the cache off (its hooks are per step count)."""
    params = _setting(SHAPES[4], "magcache")
    assert tiny.warmup_calls(params) == 1 and tiny.warmup_settings(params) is None, "a calibration to make"
    calibrated = _video(tiny, params)
    ratios = next(iter(tiny._calibrated.values()))
    given = make_video_pipeline(weights="random", architecture="tiny", device="cpu", seed=0, mag_ratios=ratios)
    given.load({"precision": "fp32"})
    light = given.warmup_settings(params)
    assert light == dict(params, num_inference_steps=LIGHT_STEPS, cache="none"), light
    given.run(light, INPUTS)
    assert given.warmup_calls(params) == 0
    assert np.array_equal(_video(given, params), calibrated), "the same ratios, the same video"


def test_no_light_warmup_where_only_the_whole_call_warms(tiny: DiffusersVideoModel) -> None:
    params = _setting((17, 32, 32), "none")
    assert tiny.warmup_settings(dict(params, num_inference_steps=1)) is None, "already one step"
    tiny._compile = "default"
    try:
        assert tiny.warmup_settings(params) is None, "a compiled denoiser's graphs may branch by step"
    finally:
        tiny._compile = "none"
    assert tiny.warmup_settings(params) == dict(params, num_inference_steps=LIGHT_STEPS)
    tiny.light_warmup = False  # the factory kwarg ``light_warmup: false``
    try:
        assert tiny.warmup_settings(params) is None, "asked for whole-call warm-ups"
    finally:
        tiny.light_warmup = True
    off = make_video_pipeline(weights="random", architecture="tiny", device="cpu", seed=0, light_warmup=False)
    assert not off.light_warmup and make_video_pipeline(weights="random", device="cpu").light_warmup, "on by default"


def test_the_diffusers_factory_passes_workload_conformance_with_its_light_warmup(tmp_path: Path) -> None:
    """Every rule of :mod:`tuner.testing.workload_conformance`, the light warm-up's among them, for the real
    factory behind the python adapter (the way a warm worker drives it)."""
    options = {
        "factory": "tuner.adapters.factories.diffusers_video:make_video_pipeline",
        "kwargs": {"weights": "random", "architecture": "tiny", "device": "cpu", "seed": 0},
        "reload_on": ["precision"],
    }
    params = {**_setting((5, 32, 32), "fbc"), "precision": "fp32"}
    probe = PythonAdapterWorkload(options)
    context = RunContext(device="cpu", seed=0, inputs=INPUTS, workdir=tmp_path)
    probe.setup(params, context)
    assert probe.warmup_settings(params) == dict(params, num_inference_steps=LIGHT_STEPS), "offered: checked below"
    probe.teardown()
    check_workload_conformance(
        lambda: PythonAdapterWorkload(options), params, context, invalid_params=[{**params, "num_frames": 8}]
    )
