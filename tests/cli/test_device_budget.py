"""``tuner run --device-hours``: the study stops within one trial's cost of its device-hour budget, and
``tuner resume --device-hours`` raises it (real workers, real SQLite storage, through the entry point)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.cli.main import main
from tuner.storage.records import TrialRecord, study_cost_of

SPEC = """\
name: device_budget
description: Simulated workload (tests only); the budget is device-hours alone.
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 30
parameters:
  sleep_s: {type: float, low: 0.01, high: 0.05, step: 0.01}
  noise: {type: int, low: 0, high: 30, step: 1}  # 155 settings: more than the budgets below run
derived:
  frames: "4"
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {sleep_s: 0.05, noise: 0}
measurement: {warmup: 1, min_repeats: 2, max_repeats: 2}
budget: {device_hours: 1.0}
sampler: {name: random}
"""


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run ``tuner ARGS`` through the entry point: (exit status, stdout + stderr)."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out + captured.err


def _costs(home: Path) -> list[float]:
    study = optuna.load_study(study_name="b", storage=f"sqlite:///{home / 'studies.db'}")
    records = [TrialRecord.from_trial(t) for t in sorted(study.trials, key=lambda t: t.number)]
    return [r.device_s for r in records if r.device_s is not None]


@pytest.mark.timeout(600)
def test_run_stops_within_one_trials_cost_and_resume_raises_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The budgets derive from what this machine measured, never from an assumed trial cost: a first run with a
    budget below any trial's cost measures exactly one trial (the fork server's start-up included), and
    resume gets three times what that run spent, which the cheaper trials that follow cannot reach in one."""
    spec = tmp_path / "budget.yaml"
    spec.write_text(SPEC)
    home = tmp_path / "home"
    tiny_budget_h = 1e-6  # 3.6 ms (the least the CLI takes): below the cost of any trial in its own process
    code, out = cli(
        capsys,
        "run",
        str(spec),
        "--study-name",
        "b",
        "--home",
        str(home),
        "--no-mlflow",
        "--device-hours",
        str(tiny_budget_h),
        "--wall-time",
        "0",
    )
    assert code == 0, out
    costs = _costs(home)
    assert len(costs) == 1 and costs[0] >= tiny_budget_h * 3600, "one trial, and it spent the budget"
    assert "device-hour budget spent" in " ".join(out.split())

    budget_s = 3 * sum(costs)
    code, out = cli(
        capsys,
        "resume",
        "b",
        "--home",
        str(home),
        "--no-mlflow",
        "--device-hours",
        repr(budget_s / 3600),
        "--wall-time",
        "0",
    )
    assert code == 0, out
    more = _costs(home)
    assert len(more) >= 2
    assert sum(more) >= budget_s, "stopped before the budget was spent"
    assert sum(more) - more[-1] < budget_s, "the last trial started while the budget was not spent"
    assert "device-hour budget spent" in " ".join(out.split())
    study = optuna.load_study(study_name="b", storage=f"sqlite:///{home / 'studies.db'}")
    assert study_cost_of(study.trials).recorded_s == pytest.approx(sum(more), abs=1e-3)
