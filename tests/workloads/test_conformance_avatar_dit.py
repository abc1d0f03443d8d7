"""The avatar DiT workload passes the shared Workload conformance checks, and the
checks themselves catch the violations they are about."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tuner.testing.workload_conformance import (
    check_deterministic,
    check_output_contract,
    check_rejects_invalid,
    check_workload_conformance,
)
from tuner.workloads.avatar_dit import AvatarDiTWorkload
from tuner.workloads.base import RunContext, Workload, WorkloadOutput

INVALID_ON_CPU: list[dict[str, Any]] = [
    {"precision": "fp16"},
    {"precision": "int8"},
    {"resolution": 30},
    {"resolution": 0},
    {"sample_steps": 0},
    {"sample_steps": 9},
    {"streams": 3},
    {"batch_size": 0},
    {"infer_frames": 2.5},
    {"online_decode": "yes"},
    {"not_a_param": 1},
]


def cpu_context(tmp_path: Path, **inputs: Any) -> RunContext:
    return RunContext(device="cpu", seed=3, inputs={"audio_seconds": 1.0, **inputs}, workdir=tmp_path)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {
            "infer_frames": 4,
            "num_clip": 2,
            "batch_size": 2,
            "resolution": 16,
            "precision": "bf16",
            "streams": 2,
            "online_decode": False,
            "sample_steps": 2,
        },
    ],
    ids=["defaults", "small-batched-bf16-offline"],
)
def test_avatar_dit_conforms(params: dict[str, Any], tmp_path: Path) -> None:
    check_workload_conformance(AvatarDiTWorkload, params, cpu_context(tmp_path), invalid_params=INVALID_ON_CPU)


def test_checker_reports_an_accepted_invalid_setting(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="accepted"):
        check_rejects_invalid(AvatarDiTWorkload, [{"resolution": 16}], cpu_context(tmp_path))


class _DriftingWorkload(Workload):
    """Breaks determinism on purpose: each run's frame is brighter than the last."""

    def __init__(self) -> None:
        self._calls = itertools.count()

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        return WorkloadOutput(video=np.full((1, 2, 2, 3), next(self._calls), dtype=np.uint8))


def test_checker_reports_nondeterminism(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="two runs of one instance"):
        check_deterministic(_DriftingWorkload, {}, cpu_context(tmp_path))


@pytest.mark.parametrize(
    "output, message",
    [
        (WorkloadOutput(video=np.zeros((1, 2, 2, 3), dtype=np.float32)), "uint8"),
        (WorkloadOutput(video=np.zeros((2, 1, 2, 2, 3), dtype=np.uint8), items=1), "batch axis"),
        (WorkloadOutput(video=np.zeros((2, 2, 3), dtype=np.uint8)), "shape"),
        (WorkloadOutput(items=0), "items"),
        (WorkloadOutput(audio=np.zeros(4, dtype=np.float64), audio_rate=16000), "float32"),
        (WorkloadOutput(counters={"tokens": float("nan")}), "finite"),
    ],
)
def test_checker_reports_broken_outputs(output: WorkloadOutput, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_output_contract(output)
