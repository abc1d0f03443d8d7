"""Streaming figures (issue 40, item 5): a chunked call reports time to first chunk, per-chunk latency, the
real-time factor and stalls; a chunk made late on purpose is a stall."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.evaluators.runtime.streaming import ChunkClock
from tuner.runner.base import TrialRequest
from tuner.runner.worker import execute


class StepClock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def figures(clock: ChunkClock) -> dict[str, float | None]:
    return {m.name: m.value for m in clock.metrics()}


def test_a_chunk_later_than_playback_needs_it_is_a_stall() -> None:
    now = StepClock()
    clock = ChunkClock(clock=now)
    clock.begin()
    for ready_at in (0.5, 1.0, 3.0):  # each chunk holds 1 s of video; playback starts at 0.5 s
        now.now = ready_at
        clock.chunk(1.0)
    result = figures(clock)
    assert result["time_to_first_chunk_s"] == 0.5
    assert result["chunk_latency_p50_s"] == 0.5  # gaps 0.5, 0.5, 2.0
    assert result["real_time_factor"] == pytest.approx(1.0)  # 3 s of video in 3 s
    assert result["stall_count"] == 1.0  # chunk 2 was due at 0.5 + 2 = 2.5 s, ready at 3.0 s
    on_time = ChunkClock(clock=now)
    now.now = 0.0
    on_time.begin()
    for ready_at in (0.2, 0.4, 0.6):
        now.now = ready_at
        on_time.chunk(1.0)
    assert figures(on_time)["stall_count"] == 0.0 and figures(on_time)["real_time_factor"] == pytest.approx(5.0)


def run_fake(tmp_path: Path, name: str, **params: Any) -> dict[str, Any]:
    request = TrialRequest(
        study_name="s",
        trial_number=0,
        workload_class="tuner.workloads.fake:FakeWorkload",
        settings={"sleep_s": 0.04, "chunks": 4, "chunk_output_s": 0.2, **params},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=60,
        workdir=str(tmp_path / name),
    )
    result = execute(request)
    return {name: m.value for name, m in result.metrics.items()}


def test_a_chunked_workload_reports_its_stream_and_a_late_chunk(tmp_path: Path) -> None:
    smooth = run_fake(tmp_path, "smooth")
    assert 0 < smooth["time_to_first_chunk_s"] < 0.2 and smooth["stall_count"] == 0.0
    assert smooth["real_time_factor"] > 1.0  # 0.8 s of output in about 0.04 s of compute
    late = run_fake(tmp_path, "late", late_chunk=2, late_by_s=0.6)
    assert late["stall_count"] >= 1.0, "chunk 2, 0.6 s late, arrives after the 0.4 s the first two play"
    assert late["chunk_latency_p95_s"] > smooth["chunk_latency_p95_s"]


def run_avatar(tmp_path: Path, name: str, online_decode: bool) -> dict[str, Any]:
    request = TrialRequest(
        study_name="s",
        trial_number=0,
        workload_class="tuner.workloads.avatar_dit:AvatarDiTWorkload",
        settings={"infer_frames": 6, "sample_steps": 1, "resolution": 32, "online_decode": online_decode},
        inputs={"audio_seconds": 2.0, "fps": 12, "output_size": 32},
        seed=0,
        device="cpu",
        measurement={"warmup": 1, "min_repeats": 3, "max_repeats": 3},
        timeout_s=120,
        workdir=str(tmp_path / name),
    )
    result = execute(request)
    assert result.outcome.value == "OK", result.reason
    return {name: m.value for name, m in result.metrics.items()}


def test_the_avatar_streams_its_clips_when_it_decodes_online(tmp_path: Path) -> None:
    online = run_avatar(tmp_path, "online", True)
    offline = run_avatar(tmp_path, "offline", False)
    # 24 frames in clips of 6: online, each clip is ready as it is made (a gap of one clip's work); offline,
    # every clip comes with the one final decode (no work between the clips' marks)
    assert online["chunk_latency_p50_s"] > 3 * offline["chunk_latency_p50_s"], "online: clips one by one"
    assert offline["chunk_latency_p50_s"] < 0.1 * offline["time_to_first_chunk_s"], "offline: all clips at once"
    assert online["real_time_factor"] > 0 and offline["real_time_factor"] > 0
