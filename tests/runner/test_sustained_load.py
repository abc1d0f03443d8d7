"""Sustained load (issue 40, item 4): the loaded workload driven at N concurrent streams for a set time,
its throughput per hour, latency p50 / p95 and the knee over streams -- through a real worker process on the
simulated device of two execution slots (the fake's ``device_slots``), a study whose front is latency against
sustained throughput, and the refusals (a workload whose calls must not overlap, a failing level)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import tuner
from tuner.evaluators.runtime.sustained import LoadLevel, drive, knee, sustained_metrics
from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner
from tuner.spec.loading import parse_spec
from tuner.storage.attributes import metrics_of, outcome_of

FAKE = "tuner.workloads.fake:FakeWorkload"


def request(tmp_path: Path, settings: dict[str, Any], sustained: dict[str, Any]) -> TrialRequest:
    return TrialRequest(
        study_name="load",
        trial_number=0,
        workload_class=FAKE,
        settings=settings,
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 1, "min_repeats": 3, "max_repeats": 3, "sustained": sustained},
        timeout_s=60.0,
        workdir=str(tmp_path / "trial"),
    )


def test_the_knee_of_a_device_with_two_slots_is_two_streams(tmp_path: Path) -> None:
    runner = SubprocessRunner()
    try:
        result = runner.run(
            request(
                tmp_path,
                {"sleep_s": 0.05, "device_slots": 2, "batch_size": 2},
                {"streams": [1, 2, 4], "duration_s": 1.0},
            ),
            Slot(0, None, 1),
        )
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    levels = {row["streams"]: row for row in result.info["sustained"]}
    assert sorted(levels) == [1, 2, 4]
    one, two, four = levels[1], levels[2], levels[4]
    # two slots: two streams nearly double the throughput, four queue behind the same two slots
    assert two["throughput_per_hour"] > 1.5 * one["throughput_per_hour"]
    assert four["throughput_per_hour"] < 1.3 * two["throughput_per_hour"]
    assert four["latency_p95_s"] > 1.5 * two["latency_p95_s"], "queued calls wait for a slot"
    assert one["items"] == 2 * one["calls"], "throughput counts items (batch_size 2), not calls"
    metrics = result.metrics
    assert metrics["sustained_streams"].value == 2
    assert metrics["sustained_throughput_per_hour"].value == pytest.approx(two["throughput_per_hour"], rel=1e-4)
    assert metrics["sustained_latency_p95_s"].value == pytest.approx(two["latency_p95_s"], rel=1e-4)
    assert metrics["sustained_throughput_per_hour"].unit == "items/h"
    assert metrics["latency_p50_s"].available, "the measured repeats stand beside the load"


def test_a_workload_whose_calls_must_not_overlap_runs_one_stream_and_says_why(tmp_path: Path) -> None:
    runner = SubprocessRunner()
    try:
        result = runner.run(
            TrialRequest(
                study_name="load",
                trial_number=0,
                workload_class="tuner.workloads.fake:NoOpWorkload",
                settings={},
                inputs={},
                seed=0,
                device="cpu",
                measurement={
                    "warmup": 0,
                    "min_repeats": 3,
                    "max_repeats": 3,
                    "sustained": {"streams": [1, 2], "duration_s": 0.3},
                },
                timeout_s=60.0,
                workdir=str(tmp_path / "trial"),
            ),
            Slot(0, None, 1),
        )
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    one, two = result.info["sustained"]
    assert one["calls"] > 0 and two["calls"] == 0
    assert "Workload.concurrent_calls" in two["note"] and "not 2" in two["note"]
    assert result.metrics["sustained_streams"].value == 1


def test_a_failing_level_keeps_the_levels_before_it_and_a_failing_first_level_fails_the_call() -> None:
    calls = {"n": 0}
    lock = threading.Lock()

    def call() -> int:
        with lock:
            calls["n"] += 1
            # a second stream's thread (the level of four): "out of memory"; other threads of the process do not count
            if threading.current_thread().name != "tuner-stream-0" and calls["n"] > 5:
                raise MemoryError("simulated: four streams do not fit")
        return 1

    levels = drive(call, lambda: None, lambda output: output, [1, 4, 8], 0.05, 64, deadline=1e12, last_call_s=0.0)
    assert [level.streams for level in levels] == [1, 4], "no level runs after a failed one"
    assert levels[0].ran and isinstance(levels[1].error, MemoryError)
    assert knee(levels, 0.1) is levels[0]
    assert levels[1].summary()["error"].startswith("MemoryError: simulated")

    def always_fails() -> None:
        raise MemoryError("simulated: one stream does not fit")

    with pytest.raises(MemoryError, match="one stream"):
        drive(always_fails, lambda: None, lambda output: 1, [1, 2], 0.05, 64, deadline=1e12, last_call_s=0.0)


def test_no_room_in_the_window_is_said_not_invented() -> None:
    levels = drive(lambda: 1, lambda: None, lambda output: 1, [1], 5.0, 64, deadline=0.0, last_call_s=1.0)
    assert not levels[0].ran and "no time left" in str(levels[0].note)
    metrics = {m.name: m for m in sustained_metrics(levels, 0.1)}
    assert metrics["sustained_throughput_per_hour"].value is None
    assert "no time left" in str(metrics["sustained_throughput_per_hour"].reason)


def test_the_knee_is_the_last_level_that_still_pays() -> None:
    def level(streams: int, items: int) -> LoadLevel:
        return LoadLevel(streams, 1.0, latencies_s=[0.1], items=items, wall_s=1.0)

    assert knee([level(1, 10), level(2, 19), level(4, 30), level(8, 31)], 0.10).streams == 4
    assert knee([level(1, 10), level(2, 20), level(4, 40)], 0.10).streams == 4
    assert knee([level(1, 10), level(2, 10)], 0.10).streams == 1


def test_the_spec_block_is_checked_and_grows_the_timeout(tmp_path: Path) -> None:
    base = """
name: t
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 30}
parameters: {sleep_s: {type: categorical, choices: [0.01]}}
objectives: [{metric: sustained_throughput_per_hour, direction: maximize}]
budget: {trials: 1}
"""
    for bad, words in [
        ("{streams: [4, 2]}", "ascend"),
        ("{streams: [0]}", "1..256"),
        ("{duration_s: 0}", "duration_s"),
    ]:
        with pytest.raises(Exception, match=words):
            parse_spec(base + f"measurement: {{sustained: {bad}}}\n")
    spec = parse_spec(base + "measurement: {sustained: {streams: 2, duration_s: 5}}\n")
    assert spec.measurement.sustained is not None and spec.measurement.sustained.streams == [2]
    from tuner.search.guards import trial_timeout_s

    assert trial_timeout_s(spec, "search", {}, []) == pytest.approx(30 + 2 * 5)


def test_a_study_fronts_latency_against_sustained_throughput(tmp_path: Path) -> None:
    spec_path = tmp_path / "load.yaml"
    spec_path.write_text("""
name: load_front
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 60}
parameters:
  batch_size: {type: categorical, choices: [1, 4]}
  sleep_s: {type: categorical, choices: [0.02]}
  device_slots: {type: categorical, choices: [1]}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: sustained_throughput_per_hour, direction: maximize}
measurement: {warmup: 0, min_repeats: 3, max_repeats: 3, sustained: {streams: [1, 2], duration_s: 0.4}}
sampler: {name: grid}
budget: {trials: 2}
""")
    opened = tuner.create_study(spec_path, study_name="load_front", home=tmp_path)
    tuner.run_study(opened, home=tmp_path, use_mlflow=False)
    trials = [t for t in tuner.load_study("load_front", home=tmp_path).study.trials if outcome_of(t) == "OK"]
    by_batch = {int(t.params["batch_size"]): {name: m["value"] for name, m in metrics_of(t).items()} for t in trials}
    assert sorted(by_batch) == [1, 4]
    # one slot: batching 4 requests per call serves ~4x the items per hour at a higher latency per call
    assert by_batch[4]["sustained_throughput_per_hour"] > 2 * by_batch[1]["sustained_throughput_per_hour"]
    assert all(m["sustained_streams"] == 1 for m in by_batch.values()), "one slot: a second stream only queues"
    shown = subprocess.run(
        [sys.executable, "-m", "tuner", "show", "load_front", str(trials[0].number), "--home", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    curve = shown.stdout[shown.stdout.index("sustained load") :].splitlines()
    assert curve[2].split()[0] == "*1" and curve[3].split()[0] == "2", "tuner show prints the curve, knee marked"


def test_show_prints_the_curve_with_its_knee_within_80_columns() -> None:
    from tuner.evaluators.runtime.sustained import curve_rows
    from tuner.front.load_curve import load_lines

    levels = [
        LoadLevel(1, 1.0, latencies_s=[0.1], items=10, wall_s=1.0),
        LoadLevel(2, 1.0, latencies_s=[0.1], items=20, wall_s=1.0),
        LoadLevel(4, 1.0, latencies_s=[0.2], items=21, wall_s=1.0),
        LoadLevel(8, 1.0, note="the workload allows 4 overlapping call(s) per process, not 8"),
    ]
    lines = load_lines(curve_rows(levels, 0.10))
    assert lines[0].startswith("sustained load")
    rows = {line.split()[0]: line for line in lines[2:6]}
    assert "*2" in rows and rows["*2"].split()[2] == "72000", "the knee's row is marked, its items per hour"
    assert any("8 streams: the workload allows 4" in line for line in lines)
    assert all(len(line) <= 80 for line in lines)
    assert load_lines(None) == []
