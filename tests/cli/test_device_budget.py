"""``tuner run --device-hours``: the study stops within one trial's cost of its device-hour budget, and
``tuner resume --device-hours`` raises it (real workers, real SQLite storage, through the entry point)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.cli.main import main
from tuner.study.records import TrialRecord, study_cost_of

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
def test_run_stops_within_one_trials_cost_and_resume_raises_the_budget(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "budget.yaml"
    spec.write_text(SPEC)
    home = tmp_path / "home"
    budget_h = 0.0012  # 4.32 device-seconds: a few trials of the simulated workload in their own processes, the
    # first (the fork server starting) up to ~2.5 s on a loaded 2-core machine
    code, out = cli(capsys, "run", str(spec), "--study-name", "b", "--home", str(home), "--no-mlflow",
                    "--device-hours", str(budget_h), "--wall-time", "0")
    assert code == 0, out
    costs = _costs(home)
    budget_s = budget_h * 3600
    assert len(costs) >= 2
    assert sum(costs) >= budget_s, "stopped before the budget was spent"
    assert sum(costs) - costs[-1] < budget_s, "the last trial started while the budget was not spent"
    assert "device-hour budget spent" in " ".join(out.split())

    code, out = cli(capsys, "resume", "b", "--home", str(home), "--no-mlflow", "--device-hours", str(2 * budget_h),
                    "--wall-time", "0")
    assert code == 0, out
    more = _costs(home)
    assert len(more) > len(costs)
    assert sum(more) >= 2 * budget_s and sum(more) - more[-1] < 2 * budget_s
    study = optuna.load_study(study_name="b", storage=f"sqlite:///{home / 'studies.db'}")
    assert study_cost_of(study.trials).recorded_s == pytest.approx(sum(more), abs=1e-3)
