"""A trial's result survives a non-finite metric, and records the disk its directory takes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from process_tree_helpers import make_runner

from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.spec.adapters import CommandSpec

SLOT = Slot(0, None, 1)
NAN_WORKLOAD = '''
from tuner.workloads.base import Workload, WorkloadOutput


class NanCounters(Workload):
    """Reports one NaN counter, one infinite counter and one good counter."""

    def run(self, params, context):
        return WorkloadOutput(items=1, counters={"tokens": float("nan"), "overflow": float("-inf"), "frames": 4})
'''


def _command_request(workdir: Path, script: str, **block: Any) -> TrialRequest:
    options = CommandSpec(argv=[sys.executable, "-c", script], **block).model_dump(mode="json")
    return TrialRequest(
        study_name="faults",
        trial_number=0,
        workload_class="tuner.adapters.command:CommandWorkload",
        settings={},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=120,
        workdir=str(workdir),
        workload_options={"adapter": "command", **options},
    )


@pytest.mark.parametrize("kind", ["fork", "exec", "warm"])
def test_a_nan_metric_is_unavailable_and_the_trial_stands(kind: str, tmp_path: Path) -> None:
    script = "print('loss: nan'); print('speed: inf it/s'); print('steps: 4')"
    metrics = [
        {"name": "loss", "regex": r"loss: (\S+)"},
        {"name": "speed", "regex": r"speed: (\S+) it/s", "unit": "it/s", "direction": "maximize"},
        {"name": "steps", "regex": r"steps: (\d+)"},
    ]
    runner = make_runner(kind)
    try:
        result = runner.run(_command_request(tmp_path / "trial", script, metrics=metrics), SLOT)
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-800:])
    assert result.metrics["loss"].value is None and result.metrics["loss"].reason == "non-finite value nan"
    assert result.metrics["speed"].value is None and result.metrics["speed"].reason == "non-finite value inf"
    assert result.metrics["steps"].value == 4.0
    assert result.metrics["latency_p50_s"].available, "the rest of the trial is kept"


@pytest.mark.parametrize("kind", ["fork", "warm"])
def test_a_nan_counter_is_unavailable_and_the_trial_stands(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "nan_counters_workload.py").write_text(NAN_WORKLOAD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    request = TrialRequest(
        study_name="faults",
        trial_number=0,
        workload_class="nan_counters_workload:NanCounters",
        settings={},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=120,
        workdir=str(tmp_path / "trial"),
    )
    runner = make_runner(kind)
    try:
        result = runner.run(request, SLOT)
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-800:])
    assert result.metrics["count_tokens"].reason == "non-finite value nan"
    assert result.metrics["count_overflow"].reason == "non-finite value -inf"
    assert result.metrics["count_frames"].value == 4.0


@pytest.mark.parametrize("kind", ["fork", "warm"])
def test_the_trial_directory_size_is_recorded_and_a_large_one_noted(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNER_LARGE_TRIAL_DIR_GB", "0.002")  # 2 MB stands in for the 1 GB default
    write = "import os; open('leftover.bin', 'wb').write(os.urandom({n}))"
    runner = make_runner(kind)
    try:
        small = runner.run(_command_request(tmp_path / "small", write.format(n=100_000)), SLOT)
        large = runner.run(_command_request(tmp_path / "large", write.format(n=3_000_000)), SLOT)
    finally:
        runner.close()
    assert small.outcome is Outcome.OK and large.outcome is Outcome.OK, (small.reason, large.reason)
    size = small.metrics["trial_disk_gb"]
    assert size.unit == "GB" and size.direction == "minimize" and size.value is not None
    assert 0.0001 <= size.value < 0.002 and small.reason is None
    assert large.metrics["trial_disk_gb"].value is not None and large.metrics["trial_disk_gb"].value >= 0.003
    assert "the trial directory takes 0.00 GB" not in str(large.reason)
    assert "the trial directory takes" in str(large.reason) and str(tmp_path / "large") in str(large.reason)
    assert large.info["trial_disk_note"] in str(large.reason)


def test_directory_size_counts_allocated_blocks_once(tmp_path: Path) -> None:
    from tuner.runner.base import disk_usage_bytes

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "data.bin").write_bytes(os.urandom(200_000))
    os.link(tmp_path / "a" / "data.bin", tmp_path / "hardlink.bin")
    (tmp_path / "symlink").symlink_to("/usr")  # never followed
    with open(tmp_path / "sparse.bin", "wb") as handle:
        handle.truncate(10**9)  # a 1 GB hole takes no disk
    assert 200_000 <= disk_usage_bytes(tmp_path) < 400_000
