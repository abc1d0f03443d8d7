"""What the fleet tests share: a simulated-workload spec, real ``tuner worker`` processes standing in for
hosts, and polling the storage until something holds.

Each worker runs in its own session (process group), with ``TUNER_HOST=host<i>`` and ``--gpus <i>``, 1 s
heartbeats and a 4 s grace period, its output in ``<tmp>/host<i>.log``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

ROOT = Path(__file__).resolve().parents[2]
FAST_HEARTBEATS = {"TUNER_HEARTBEAT_S": "1", "TUNER_GRACE_PERIOD_S": "4"}


def fake_spec(name: str, budget: int, sleep_low: float, sleep_high: float, gated: bool = False) -> str:
    """A spec of the simulated workload (``FakeWorkload``): trials sleep ``sleep_low``..``sleep_high`` s. ``gated``:
    every setting but the reference's waits at the test's gate (``TUNER_FAKE_GATE_DIR``, see FakeWorkload)."""
    gate = f'derived:\n  gate: "sleep_s > {sleep_low} or noise > 0"\n' if gated else ""
    return f"""name: {name}
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 120
parameters:
  sleep_s: {{type: float, low: {sleep_low}, high: {sleep_high}, step: 0.05}}
  noise: {{type: int, low: 0, high: 40, step: 5}}
{gate}objectives:
  - {{metric: latency_p50_s, direction: minimize}}
reference: {{sleep_s: {sleep_low}, noise: 0}}
measurement: {{warmup: 0, min_repeats: 1, max_repeats: 1}}
budget: {{trials: {budget}}}
"""


def wait_for(condition: Callable[[], Any], timeout_s: float = 240.0) -> Any:
    """Poll ``condition`` every 0.3 s until it returns something true (returned); AssertionError past the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("timed out waiting")


def study_trials(url: str, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=url).get_trials(deepcopy=False)


def fleet_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The workers' environment: this one, fast heartbeats, the repository importable, ``extra`` on top."""
    return {
        **os.environ,
        **FAST_HEARTBEATS,
        **(extra or {}),
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }


def create_and_start_workers(
    url: str, tmp_path: Path, study: str, spec_text: str, count: int, extra_env: dict[str, str] | None = None
) -> list[subprocess.Popen[bytes]]:
    """Create ``study`` from ``spec_text`` in ``url``, then start ``count`` workers on it (host0, host1, ...)."""
    import tuner

    spec = tmp_path / f"{study}.yaml"
    spec.write_text(spec_text)
    tuner.create_study(spec, study_name=study, storage=url, home=tmp_path / "creator")
    env = fleet_env(extra_env)
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tuner",
                "worker",
                study,
                "--storage",
                url,
                "--gpus",
                str(i),
                "--no-mlflow",
                "--home",
                str(tmp_path / f"host{i}"),
            ],
            env={**env, "TUNER_HOST": f"host{i}"},
            start_new_session=True,
            cwd=tmp_path,
            stdout=open(tmp_path / f"host{i}.log", "wb"),
            stderr=subprocess.STDOUT,
        )
        for i in range(count)
    ]


def kill_leftovers(workers: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL the process group of every worker still running (after SIGCONT, should it be stopped)."""
    for process in workers:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGCONT)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def host_logs(tmp_path: Path, count: int) -> list[str]:
    return [(tmp_path / f"host{i}.log").read_text(errors="replace") for i in range(count)]


def assert_fleet_budget(measured: list[optuna.trial.FrozenTrial], budget: int, live_slots: int) -> None:
    """The fleet's budget contract (docs/fleet.md, "A shared budget"): the budget is reached, and coordinators
    that decide at the same moment overshoot it by at most the other slots in flight — ``live_slots - 1`` for
    the slots still running at the end. Exactly the budget is the usual outcome, not a promise: on a loaded
    host two workers can both see one trial left and both start one."""
    numbers = sorted(t.number for t in measured)
    assert budget <= len(measured) <= budget + live_slots - 1, (
        f"{len(measured)} trials measured for a budget of {budget} with {live_slots} slot(s) live: {numbers}"
    )
