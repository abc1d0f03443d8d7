"""Device-seconds per trial and per study (tuner.storage.cost), the phases a worker reports, and the
device-hour budget: one coordinator and two sharing a study (real SQLite storage, real workers)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tuner.results import Metric, Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.runner.measure.phases import INFO_KEY, PHASES, PhaseClock
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import SpecError, parse_spec
from tuner.storage.cost import CostedTrial, device_budget_verdict, slot_devices, study_cost, summary_line, trial_cost
from tuner.storage.records import TrialRecord, study_cost_of
from tuner.study.coordinator import Coordinator
from tuner.study.studies import create_study, load_study
from tuner.testing.inline_runner import InlineRunner

SPEC_TEXT = (Path(__file__).parents[1] / "specs" / "fake_ok.yaml").read_text()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_phase_clock_charges_each_phase_until_the_next_begins() -> None:
    clock = FakeClock()
    phases = PhaseClock(clock)
    clock.now += 2.0
    phases.mark("warmup")
    clock.now += 0.5
    phases.marks["measured"] = clock.now  # what measure_latency writes when the warm-up ends
    clock.now += 1.5
    phases.mark("evaluation")
    clock.now += 0.25
    assert phases.seconds() == {"startup": 2.0, "warmup": 0.5, "measured": 1.5, "evaluation": 0.25, "finish": 0.0}
    with pytest.raises(ValueError, match="unknown phase"):
        phases.mark("loading")


def test_trial_cost_adds_up_to_wall_time_times_devices() -> None:
    result = TrialResult(
        Outcome.OK,
        wall_time_s=10.0,
        info={INFO_KEY: {"startup": 3.0, "warmup": 1.0, "measured": 4.0, "evaluation": 1.0, "finish": 0.5}},
    )
    cost = trial_cost(result, "gpu:0,1")
    assert cost["devices"] == 2 and cost["device_s"] == 20.0
    phases = cost["phases_device_s"]
    assert set(phases) == set(PHASES)
    assert phases["startup"] == pytest.approx(2 * (3.0 + 0.5))  # the outside half-second: process start / exit
    assert sum(phases.values()) == pytest.approx(20.0)
    assert slot_devices("cpu:1") == 1 and slot_devices("gpu:3") == 1 and slot_devices(None) == 1


def test_a_killed_worker_reports_nothing_so_its_time_is_unattributed() -> None:
    cost = trial_cost(TrialResult(Outcome.TIMEOUT, wall_time_s=30.0), "gpu:0")
    assert cost["phases_device_s"]["unattributed"] == 30.0 and cost["device_s"] == 30.0


def test_worker_phases_longer_than_the_wall_are_scaled_into_it() -> None:
    result = TrialResult(Outcome.OK, wall_time_s=1.0, info={INFO_KEY: {"startup": 0.6, "measured": 0.6}})
    phases = trial_cost(result, "cpu:0")["phases_device_s"]
    assert sum(phases.values()) == pytest.approx(1.0) and phases["startup"] == pytest.approx(0.5)


def _costed(
    number: int, outcome: str, device_s: float | None, *, measured: bool = True, duplicate_of: int | None = None
) -> CostedTrial:
    return CostedTrial(
        number,
        outcome,
        measured,
        duplicate_of,
        None if device_s is None else {"device_s": device_s, "phases_device_s": {"measured": device_s}},
    )


def test_study_cost_sorts_runs_into_used_wasted_and_avoided() -> None:
    trials = [
        _costed(0, "OK", 100.0),
        _costed(1, "OK", 20.0),
        _costed(2, "OOM", 8.0),
        _costed(3, "CRASH", 2.0),
        _costed(4, "OK", None, measured=False, duplicate_of=1),  # a copy: its original's cost avoided
        _costed(5, "SKIPPED_PREDICTED_OOM", None, measured=False),  # the median OOM run: 8
        _costed(6, "INVALID", None, measured=False),  # refused by a rule: the median run, 14
        _costed(7, "INTERRUPTED", 5.0, measured=False),  # given back after running 5 s: wasted
        _costed(8, "INTERRUPTED", None, measured=False),
    ]  # reclaimed: nothing known, nothing counted
    cost = study_cost(trials)
    assert cost.used_s == 120.0 and cost.used == {"OK": 2}
    assert cost.wasted_s == 15.0 and cost.wasted == {"OOM": 1, "CRASH": 1, "INTERRUPTED": 1}
    assert cost.recorded_s == 135.0 == sum(t.cost["device_s"] for t in trials if t.cost)
    assert cost.avoided == {"copy": 1, "predicted OOM": 1, "refused by rules": 1}
    assert cost.avoided_s == pytest.approx(20.0 + 8.0 + 8.0)  # the copy's original; the OOM run; the median run
    assert "median OOM run" in cost.avoided_estimate and "copy" in cost.avoided_estimate
    assert cost.phases_s["measured"] == 135.0
    line = summary_line(cost, "cuda", budget_device_hours=1.0)
    assert line.startswith("GPU-h: used 0.0333 (2 runs OK), wasted 0.00417 (1 CRASH, 1 INTERRUPTED, 1 OOM)")
    assert line.endswith("budget 1 GPU-h")
    assert summary_line(cost, "cpu").startswith("CPU-h: ")


def test_the_device_budget_waits_on_runs_in_flight_and_stops_once_spent() -> None:
    assert device_budget_verdict(None, 1e9, 3, 10.0) is None
    assert device_budget_verdict(100.0, 50.0, 0, 10.0) is None
    assert device_budget_verdict(100.0, 50.0, 1, 10.0) is None  # 60 < 100: another may start
    assert device_budget_verdict(100.0, 95.0, 1, 10.0) == "wait"  # the running one may spend it
    assert "budget spent" in str(device_budget_verdict(100.0, 100.0, 0, 10.0))


def test_a_budget_may_be_device_hours_alone() -> None:
    spec = parse_spec(SPEC_TEXT.replace("budget: {trials: 8}", "budget: {device_hours: 0.5}"))
    assert spec.budget.device_hours == 0.5 and spec.budget.trials is None
    with pytest.raises(SpecError, match="device_hours"):
        parse_spec(SPEC_TEXT.replace("budget: {trials: 8}", "budget: {device_hours: 0}"))


class ChargedRunner(Runner):
    """SIMULATED device time: runs each trial for real in this process (InlineRunner) and reports a wall
    time of ``seconds(request)`` instead of the real one, so a budget of device-hours is reached in a
    test's milliseconds."""

    def __init__(self, seconds: Any) -> None:
        self.inner = InlineRunner()
        self.seconds = seconds

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        return replace(self.inner.run(request, slot), wall_time_s=self.seconds(request))


def _coordinator(opened: Any, tmp_path: Path, runner: Runner, budget_device_s: float) -> Coordinator:
    plan = plan_constraints(opened.spec, {"gpu_memory_gb": None, "host_memory_gb": 24.0})
    return Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=runner,
        slots=[Slot(0, None, 1)],
        home=tmp_path,
        device="cpu",
        plan=plan,
        budget_trials=None,
        wall_time_s=None,
        budget_device_s=budget_device_s,
    )


def _spent(opened: Any) -> list[float]:
    return [r.device_s for r in map(TrialRecord.from_trial, opened.study.get_trials()) if r.device_s is not None]


def test_a_study_stops_within_one_trials_cost_of_its_device_budget(tmp_path: Path) -> None:
    spec = parse_spec(SPEC_TEXT)
    opened = create_study(
        spec, SPEC_TEXT, f"sqlite:///{tmp_path / 'studies.db'}", "s", "random", None, {}, device_hours=0.01
    )  # 36 device-seconds
    costs = iter([7.0, 5.0, 9.0, 6.0, 8.0, 4.0, 7.0, 9.0, 3.0] * 3)
    summary = _coordinator(opened, tmp_path, ChargedRunner(lambda _: next(costs)), 36.0).run()
    spent = _spent(opened)
    assert sum(spent) >= 36.0 and sum(spent) - spent[-1] < 36.0, "the last trial started under the budget"
    assert summary.stopped_because.startswith("device-hour budget spent")
    cost = study_cost_of(opened.study.get_trials())
    assert cost.recorded_s == pytest.approx(sum(spent))
    assert opened.study.user_attrs["budget_device_hours"] == 0.01


def test_two_coordinators_share_one_device_budget(tmp_path: Path) -> None:
    """Two hosts on one study: together they stop once the study's runs hold the budget; the overshoot is
    at most the one run each had in flight."""
    spec = parse_spec(SPEC_TEXT)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    create_study(spec, SPEC_TEXT, url, "s", "random", None, {}, device_hours=0.02)  # 72 device-seconds
    errors: list[BaseException] = []

    def host(index: int) -> None:
        try:
            opened = load_study(url, "s")
            _coordinator(opened, tmp_path / f"host{index}", ChargedRunner(lambda _: 6.0), 72.0).run()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    threads = [threading.Thread(target=host, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors
    spent = sum(_spent(load_study(url, "s")))
    assert 72.0 <= spent <= 72.0 + 2 * 6.0


def test_a_real_worker_reports_its_phases(tmp_path: Path) -> None:
    """A trial in its own process (the default runner's path): phases reported, each one >= 0, the
    recorded cost's phases add up to its wall time."""
    from tuner.runner.subprocess import SubprocessRunner

    spec = parse_spec(SPEC_TEXT)
    request = TrialRequest(
        study_name="s",
        trial_number=0,
        workload_class=spec.workload.target,
        settings={"sleep_s": 0.01, "noise": 0, "batch_size": 1, "frames": 4},
        workload_options={},
        inputs=dict(spec.inputs),
        seed=0,
        device="cpu",
        measurement={"warmup": 1, "min_repeats": 2, "max_repeats": 2},
        timeout_s=60,
        workdir=str(tmp_path / "trial"),
        quality_metrics=[],
        reference_output=None,
        save_output=None,
        compare_with_self=False,
        reference_settings=None,
    )
    runner = SubprocessRunner()
    try:
        result = runner.run(request, Slot(0, None, 1))
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, result.reason
    reported = result.info[INFO_KEY]
    assert set(reported) == {"startup", "warmup", "measured", "evaluation", "finish"}
    assert reported["measured"] >= 2 * 0.01 and reported["warmup"] >= 0.01
    assert sum(reported.values()) <= result.wall_time_s
    cost = trial_cost(result, "cpu:0")
    assert sum(cost["phases_device_s"].values()) == pytest.approx(cost["device_s"], abs=1e-5)


def test_a_failing_worker_still_reports_where_its_time_went(tmp_path: Path) -> None:
    from tuner.testing.inline_runner import InlineRunner

    spec = parse_spec(SPEC_TEXT)
    request = TrialRequest(
        study_name="s",
        trial_number=0,
        workload_class="tuner.workloads.fake:FakeWorkload",
        settings={"sleep_s": 0.01, "noise": 0, "batch_size": 1, "frames": 4, "behaviour": "raise"},
        workload_options={},
        inputs=dict(spec.inputs),
        seed=0,
        device="cpu",
        measurement={"warmup": 1, "min_repeats": 2, "max_repeats": 2},
        timeout_s=60,
        workdir=str(tmp_path / "trial"),
        quality_metrics=[],
        reference_output=None,
        save_output=None,
        compare_with_self=False,
        reference_settings=None,
    )
    result = InlineRunner().run(request, Slot(0, None, 1))
    assert result.outcome is not Outcome.OK
    assert set(result.info[INFO_KEY]) == {"startup", "warmup", "measured", "evaluation", "finish"}


def test_metric_only_results_are_costed_from_the_wall_time() -> None:
    result = TrialResult(
        Outcome.OK, metrics={"latency_p50_s": Metric("latency_p50_s", 1.0, "s", "minimize")}, wall_time_s=2.5
    )
    assert trial_cost(result, "cpu:0")["phases_device_s"]["unattributed"] == 2.5
