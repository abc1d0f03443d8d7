"""The audio-visual QA workload passes the shared Workload conformance checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tuner.testing.workload_conformance import check_workload_conformance
from tuner.workloads.avqa import AVQAWorkload
from tuner.workloads.base import RunContext

INVALID_ON_CPU: list[dict[str, Any]] = [
    {"precision": "fp16"},
    {"precision": "int8"},
    {"video_fps": 0},
    {"max_frames": 2.5},
    {"audio_sample_rate": 48000},
    {"num_beams": 0},
    {"do_sample": True, "num_beams": 3},
    {"use_cache": 1},
    {"batch_size": 0},
    {"not_a_param": 1},
]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread (the tuner's worker sets it from the spec; tests share 2 cores)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {
            "video_fps": 4.0,
            "max_frames": 6,
            "audio_sample_rate": 8000,
            "max_audio_seconds": 2.0,
            "num_beams": 2,
            "use_cache": False,
            "batch_size": 4,
            "precision": "bf16",
            "max_new_tokens": 4,
        },
        {"do_sample": True, "temperature": 1.2, "batch_size": 3},
    ],
    ids=["defaults", "small-beams-nocache-bf16", "sampling"],
)
def test_avqa_conforms(params: dict[str, Any], tmp_path: Path) -> None:
    context = RunContext(device="cpu", seed=1, inputs={"num_questions": 6}, workdir=tmp_path)
    check_workload_conformance(AVQAWorkload, params, context, invalid_params=INVALID_ON_CPU)
