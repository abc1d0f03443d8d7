"""Every Runner passes the same conformance cases; the subprocess runner also the isolation ones."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tuner.results import Outcome
from tuner.runner.base import Slot
from tuner.runner.subprocess import SubprocessRunner
from tuner.testing.inline_runner import InlineRunner
from tuner.testing.runner_conformance import ISOLATION_CASES, RUNNER_CASES, RunnerCase, check_runner_case, make_request


@pytest.mark.parametrize("launcher", ["fork", "exec"])
@pytest.mark.parametrize("case", RUNNER_CASES, ids=lambda c: c.name)
def test_subprocess_runner_conformance(case: RunnerCase, launcher: str, tmp_path: Path) -> None:
    check_runner_case(SubprocessRunner(launcher), case, tmp_path)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", [c for c in RUNNER_CASES if c.name != "host_oom"], ids=lambda c: c.name)
def test_inline_runner_conformance(case: RunnerCase, tmp_path: Path) -> None:
    # host_oom caps the address space of the process it runs in: never do that to pytest itself.
    check_runner_case(InlineRunner(), case, tmp_path)


@pytest.mark.parametrize("launcher", ["fork", "exec"])
@pytest.mark.parametrize("case", ISOLATION_CASES, ids=lambda c: c.name)
def test_subprocess_runner_isolation(case: RunnerCase, launcher: str, tmp_path: Path) -> None:
    check_runner_case(SubprocessRunner(launcher), case, tmp_path)  # type: ignore[arg-type]


def test_subprocess_runner_keeps_the_log_and_request(tmp_path: Path) -> None:
    case = RunnerCase("raise", {"behaviour": "raise"}, Outcome.CRASH)
    result = SubprocessRunner().run(make_request(case, tmp_path), Slot(0, None, 1))
    assert (tmp_path / "request.json").exists()
    assert (tmp_path / "worker.log").exists()
    assert "RuntimeError" in result.log_tail


@pytest.mark.parametrize("launcher", ["fork", "exec"])
def test_timeout_kills_the_whole_process_group(tmp_path: Path, launcher: str) -> None:
    import psutil

    case = RunnerCase("hang", {"behaviour": "hang"}, Outcome.TIMEOUT, timeout_s=2.0)
    runner = SubprocessRunner(launcher)  # type: ignore[arg-type]
    runner.run(make_request(RUNNER_CASES[0], tmp_path / "warm"), Slot(0, None, 1))  # starts the fork server
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = runner.run(make_request(case, tmp_path), Slot(0, None, 1))
    assert result.outcome is Outcome.TIMEOUT

    def alive() -> set[int]:
        found = set()
        for child in psutil.Process().children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    found.add(child.pid)
            except psutil.NoSuchProcess:
                continue
        return found

    deadline = time.monotonic() + 15.0  # polled, not a fixed pause: a loaded host reaps late
    while not alive() <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive() <= before, "the hung worker must be gone"


def test_slot_pins_cuda_visible_devices_and_threads() -> None:
    from tuner.runner.subprocess import slot_environment

    env = slot_environment(Slot(1, "3", 8), base={})
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["OMP_NUM_THREADS"] == "8"
    cpu = slot_environment(Slot(0, None, 1), base={})
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and cpu["TUNER_TORCH_THREADS"] == "1"


def test_plan_slots() -> None:
    from tuner.runner.base import plan_slots

    gpu = plan_slots(3, "cuda", [0, 1], cores=16)
    assert [s.cuda_visible_devices for s in gpu] == ["0", "1", "0"]
    cpu = plan_slots(2, "cpu", [], cores=2)
    assert [(s.cuda_visible_devices, s.threads) for s in cpu] == [(None, 1), (None, 1)]
    assert [s.threads for s in plan_slots(1, "cpu", [], cores=8, threads=1)] == [1]  # workload.torch_threads
    with pytest.raises(ValueError):
        plan_slots(1, "cuda", [])
