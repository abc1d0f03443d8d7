"""Conformance checks every Runner implementation must pass.

Use from a test module::

    from tuner.testing.runner_conformance import RUNNER_CASES, check_runner_case

    @pytest.mark.parametrize("case", RUNNER_CASES, ids=lambda c: c.name)
    def test_conformance(case, tmp_path):
        check_runner_case(MyRunner(), case, tmp_path)

The cases use :class:`tuner.workloads.fake.FakeWorkload` and cover every
outcome a Python-level failure can produce; isolation cases (segfault, hang,
kernel OOM kill) are extra checks for runners that run trials out of process
(:data:`ISOLATION_CASES`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest

FAKE = "tuner.workloads.fake:FakeWorkload"


@dataclass(frozen=True)
class RunnerCase:
    """A request setting and the outcome (and reason fragment) every runner must report."""

    name: str
    settings: dict[str, Any]
    outcome: Outcome
    reason_contains: str = ""
    workload: str = FAKE
    timeout_s: float = 60.0
    metrics: tuple[str, ...] = field(default_factory=tuple)
    cut_short: bool = False  # the worker must report a latency measurement the time limit shortened


RUNNER_CASES: tuple[RunnerCase, ...] = (
    RunnerCase(
        "ok",
        {"behaviour": "ok", "sleep_s": 0.001},
        Outcome.OK,
        metrics=("latency_p50_s", "latency_p95_s", "latency_cv", "peak_rss_gb", "throughput_items_per_s"),
    ),
    # 4 s calls, 16 s limit: the warmup and one repeat end ~8 s in; a second repeat would end past
    # 70 % of the limit (11.2 s), so the trial is measured with one repeat instead of being killed.
    RunnerCase(
        "slower_than_the_limit_allows",
        {"behaviour": "ok", "sleep_s": 4.0},
        Outcome.OK,
        timeout_s=16.0,
        metrics=("latency_p50_s",),
        cut_short=True,
    ),
    RunnerCase("host_oom", {"behaviour": "oom"}, Outcome.OOM, "MemoryError"),
    RunnerCase("device_oom", {"behaviour": "device_oom"}, Outcome.OOM, "out of memory"),
    RunnerCase("invalid", {"behaviour": "invalid"}, Outcome.INVALID, "refused"),
    RunnerCase("raise", {"behaviour": "raise"}, Outcome.CRASH, "simulated workload failure"),
    RunnerCase("missing_class", {}, Outcome.CRASH, "NoSuchWorkload", workload="tuner.workloads.fake:NoSuchWorkload"),
)

ISOLATION_CASES: tuple[RunnerCase, ...] = (
    RunnerCase("segfault", {"behaviour": "segfault"}, Outcome.CRASH, "SIGSEGV"),
    RunnerCase("hang", {"behaviour": "hang"}, Outcome.TIMEOUT, "killed", timeout_s=3.0),
    RunnerCase("exit", {"behaviour": "exit"}, Outcome.CRASH, "status 3"),
)


def make_request(case: RunnerCase, workdir: Path, **overrides: Any) -> TrialRequest:
    """A request for ``case`` with a small, fast measurement."""
    values: dict[str, Any] = dict(
        study_name="conformance",
        trial_number=0,
        workload_class=case.workload,
        settings=case.settings,
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 1, "min_repeats": 2, "max_repeats": 3},
        timeout_s=case.timeout_s,
        workdir=str(workdir),
    )
    values.update(overrides)
    return TrialRequest(**values)


def check_runner_case(runner: Runner, case: RunnerCase, workdir: Path) -> TrialResult:
    """Run ``case`` and assert the runner reports it as the contract says."""
    result = runner.run(make_request(case, workdir), Slot(0, None, 1))
    assert isinstance(result, TrialResult)
    assert result.outcome is case.outcome, (case.name, result.outcome, result.reason, result.log_tail[-500:])
    if case.reason_contains:
        text = f"{result.reason}\n{result.log_tail}"
        assert case.reason_contains in text, (case.name, text[-800:])
    for name in case.metrics:
        assert result.metrics[name].available, (name, result.metrics[name])
    assert ("cut_short" in result.info) is case.cut_short, (case.name, result.info)
    if case.cut_short:
        p50 = result.metrics["latency_p50_s"].value
        assert result.info["repeats"] == 1 and p50 is not None and p50 >= 4.0, (result.info, p50)
    if case.outcome is not Outcome.OK:
        assert result.reason, "a failed trial must say why"
    assert result.wall_time_s > 0
    return result
