"""The avatar DiT's noticeable-distance measurement (``python -m tuner.workloads.avatar_dit.noticeable``):
its edits, its result structure on one held-out pair at tiny settings, and the choice of the bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from tuner.workloads.avatar_dit.card import CARD_INPUTS
from tuner.workloads.avatar_dit.data import HELD_OUT_SEEDS
from tuner.workloads.avatar_dit.noticeable import (
    REFERENCE,
    choose_bound,
    jpeg_95,
    measure,
    shift_one_pixel,
    table,
    uniform_noise,
)

DEMO = Path(__file__).resolve().parents[2] / "search_spaces" / "avatar_demo.yaml"


def test_reference_and_inputs_are_the_demo_study_s() -> None:
    spec = yaml.safe_load(DEMO.read_text())
    assert dict(REFERENCE) == spec["reference"]
    assert {name: spec["inputs"][name] for name in CARD_INPUTS} == dict(CARD_INPUTS)


def test_edits_are_small_seeded_and_keep_shape() -> None:
    video = np.random.default_rng(0).integers(0, 256, size=(1, 3, 24, 24, 3), dtype=np.uint8)
    shifted = shift_one_pixel(video, 0)
    assert np.array_equal(shifted[..., 1:, :], video[..., :-1, :])
    assert np.array_equal(shifted[..., 0, :], video[..., 0, :])
    noisy = uniform_noise(video, 7)
    assert np.array_equal(noisy, uniform_noise(video, 7)) and not np.array_equal(noisy, uniform_noise(video, 8))
    assert np.abs(noisy.astype(int) - video).max() == 2
    for edited in (shifted, noisy, jpeg_95(video, 0)):
        assert edited.shape == video.shape and edited.dtype == np.uint8


def test_one_pair_at_tiny_settings_separates_a_shift_from_resolution_32() -> None:
    reference = {**REFERENCE, "infer_frames": 12, "sample_steps": 2}
    inputs = {**CARD_INPUTS, "audio_seconds": 1.0}  # 12 frames: one clip
    results = measure([HELD_OUT_SEEDS[0]], reference, inputs)
    assert list(results) == [
        "shift_1px",
        "noise_2of255",
        "jpeg_q95",
        "bf16",
        "resolution_48",
        "resolution_32",
        "steps_1",
    ]
    for result in results.values():
        assert result["group"] in ("invisible", "visible")
        assert list(result["per_seed"]) == [str(HELD_OUT_SEEDS[0])]
        assert result["mean"] == result["max"] == result["per_seed"][str(HELD_OUT_SEEDS[0])] >= 0
    assert results["shift_1px"]["max"] < results["resolution_32"]["max"]
    assert "| edit |" in table(results)


def test_bound_is_the_smallest_round_number_between_the_groups() -> None:
    def results(invisible: float, visible: float) -> dict[str, dict[str, object]]:
        return {
            "a": {"group": "invisible", "per_seed": {"1": invisible / 2, "2": invisible}},
            "b": {"group": "visible", "per_seed": {"1": visible, "2": visible * 2}},
        }

    assert choose_bound(results(0.012, 0.08))["bound"] == 0.015
    assert choose_bound(results(0.016, 0.08))["bound"] == 0.02
    assert choose_bound(results(0.02, 0.08))["bound"] == 0.02
    assert choose_bound(results(0.016, 0.02))["bound"] is None  # 0.02 is not below the visible 0.02
    overlap = choose_bound(results(0.06, 0.05))
    assert overlap["bound"] is None and not overlap["separated"]
    assert overlap["conservative_bound"] == 0.04 and overlap["invisible_within_conservative"] == [1, 2]
