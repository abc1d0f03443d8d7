"""Fixed per-trial overhead of the tuner on a no-op workload, next to a bare Optuna loop.

Measured in one run, on this machine:

1. bare Optuna: ``ask`` + suggest + ``tell`` on a SQLite RDB storage, no work;
2. worker hand-off alone: ``SubprocessRunner.run`` of the no-op workload
   (process start, imports, measurement, result file);
3. the whole tuner path: coordinator + subprocess worker + SQLite storage +
   MLflow child run per trial (SQLite store), flushed before the clock stops.

(3) is run at two budgets and the per-trial figure is the slope between them,
so one-off costs (study creation, MLflow parent run, the final front plot)
are reported apart instead of being spread over the trials.
Overhead per trial = (3) per trial minus (1) per trial. Target: <= 150 ms.
Usage: ``python bench/overhead.py [--trials 40]``: raw figures to ``bench/results/overhead.json``;
``--report`` prints the same table from them (docs/benchmarks.md quotes it) and measures nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import raw_results
from raw_results import provenance

# The measuring functions import what they measure (``--report`` reads a JSON file and imports none of it).


def bare_optuna(trials: int, directory: Path) -> float:
    """Seconds per trial of a bare ask/tell loop on SQLite."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=f"sqlite:///{directory / 'bare.db'}", sampler=optuna.samplers.RandomSampler(seed=0)
    )
    started = time.perf_counter()
    for _ in range(trials):
        trial = study.ask()
        x = trial.suggest_int("x", 0, 1000000)
        study.tell(trial, float(x))
    return (time.perf_counter() - started) / trials


def worker_handoff(trials: int, directory: Path, launcher: str) -> list[float]:
    """Seconds of each ``SubprocessRunner.run`` on the no-op workload (after one warm-up)."""
    from tuner.runner.base import Slot, TrialRequest
    from tuner.runner.subprocess import SubprocessRunner

    runner = SubprocessRunner(launcher)  # type: ignore[arg-type]
    times = []
    for number in range(-1, trials):
        request = TrialRequest(
            study_name="bench",
            trial_number=number,
            workload_class="tuner.workloads.fake:NoOpWorkload",
            settings={"x": number},
            inputs={},
            seed=0,
            device="cpu",
            measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
            timeout_s=60,
            workdir=str(directory / "handoff" / str(number + 1)),
        )
        started = time.perf_counter()
        result = runner.run(request, Slot(0, None, 1))
        if number >= 0:
            times.append(time.perf_counter() - started)
        assert result.outcome.value == "OK", result.reason
    return times


def full_tuner(trials: int, directory: Path) -> tuple[float, int]:
    """Total seconds of coordinator + worker + storage + MLflow (flushed); MLflow child runs."""
    from mlflow.tracking import MlflowClient

    from tuner.runner.base import Slot
    from tuner.runner.subprocess import SubprocessRunner
    from tuner.search.objectives import plan_constraints
    from tuner.spec.loading import parse_spec
    from tuner.study.coordinator import Coordinator
    from tuner.study.studies import create_study
    from tuner.testing.noop_spec import noop_spec
    from tuner.tracking.live import MlflowTracker
    from tuner.tracking.run_info import StudyRunInfo

    text = noop_spec("noop_overhead", trials=30)
    spec = parse_spec(text)
    directory.mkdir(parents=True, exist_ok=True)
    opened = create_study(spec, text, f"sqlite:///{directory / 'tuner.db'}", "overhead", "random", trials, {})
    uri = f"sqlite:///{directory / 'mlflow.db'}"
    tracker = MlflowTracker(uri, StudyRunInfo("overhead", "overhead @ cpu", {}, {}, ("latency_p50_s",), ("minimize",)))
    tracker.wait_started()  # MLflow's import and schema creation are a one-off, not per trial
    directory.mkdir(parents=True, exist_ok=True)
    coordinator = Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=SubprocessRunner(),
        slots=[Slot(0, None, 1)],
        home=directory,
        device="cpu",
        plan=plan_constraints(spec, {}),
        budget_trials=trials,
        wall_time_s=None,
        listeners=[tracker],
    )
    started = time.perf_counter()
    coordinator.run()
    tracker.close()
    elapsed = time.perf_counter() - started
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("overhead @ cpu")
    children = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    return elapsed, len(children)


def measure(trials: int) -> dict[str, Any]:
    """Every figure of one run (seconds), as :func:`report_lines` and the raw results file take them."""
    small = max(5, trials // 4)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        bare = bare_optuna(trials, directory)
        handoff = {
            launcher: worker_handoff(min(trials, 20), directory / launcher, launcher) for launcher in ("fork", "exec")
        }
        total_small, _ = full_tuner(small, directory / "small")
        total_large, children = full_tuner(trials, directory / "large")
    per_trial = (total_large - total_small) / (trials - small)
    return {
        "budgets": [small, trials],
        "bare_optuna_s_per_trial": bare,
        "handoff_s": handoff,
        "whole_path_totals_s": [total_small, total_large],
        "whole_path_s_per_trial": per_trial,
        "one_off_s": total_small - small * per_trial,
        "mlflow_child_runs": children,
    }


def report_lines(result: dict[str, Any]) -> list[str]:
    """The table docs/benchmarks.md quotes, from one run's figures (measured now or read back)."""
    bare, per_trial, overhead = (
        result["bare_optuna_s_per_trial"],
        result["whole_path_s_per_trial"],
        result["whole_path_s_per_trial"] - result["bare_optuna_s_per_trial"],
    )
    small, large = result["budgets"]
    lines = [
        provenance(result),
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| bare Optuna ask/tell (SQLite) | {bare * 1e3:.1f} ms/trial |",
    ]
    names = {"fork": "fork server", "exec": "new interpreter (`exec`)"}
    for launcher, times in result["handoff_s"].items():
        lines.append(
            f"| worker hand-off, {names[launcher]} | {statistics.median(times) * 1e3:.1f} ms/trial "
            f"(median of {len(times)}, max {max(times) * 1e3:.1f}) |"
        )
    lines += [
        f"| whole tuner path + MLflow (slope between {small} and {large} trials; "
        f"{result['mlflow_child_runs']} MLflow child runs) | {per_trial * 1e3:.1f} ms/trial |",
        f"| fixed overhead over bare Optuna | **{overhead * 1e3:.1f} ms/trial** (target <= 150 ms: "
        f"{'met' if overhead <= 0.150 else 'NOT met'}) |",
        f"| ratio whole path / bare Optuna | {per_trial / bare:.1f}x |",
        f"| one-off cost per study (study, MLflow parent, front artifacts) | {result['one_off_s']:.2f} s |",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    raw_results.main(parser, "overhead.py", lambda args: measure(args.trials), report_lines)


if __name__ == "__main__":
    main()
