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
Usage: ``python bench/overhead.py [--trials 40]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import optuna

from tuner.runner.base import Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner
from tuner.spec.loading import parse_spec
from tuner.study.coordinator import Coordinator
from tuner.study.objectives import plan_constraints
from tuner.study.studies import create_study
from tuner.testing.noop_spec import noop_spec
from tuner.tracking.live import MlflowTracker, StudyRunInfo

SPEC = noop_spec("noop_overhead", trials=30)


def bare_optuna(trials: int, directory: Path) -> float:
    """Seconds per trial of a bare ask/tell loop on SQLite."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{directory / 'bare.db'}",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    started = time.perf_counter()
    for _ in range(trials):
        trial = study.ask()
        x = trial.suggest_int("x", 0, 1000000)
        study.tell(trial, float(x))
    return (time.perf_counter() - started) / trials


def worker_handoff(trials: int, directory: Path, launcher: str) -> list[float]:
    """Seconds of each ``SubprocessRunner.run`` on the no-op workload (after one warm-up)."""
    runner = SubprocessRunner(launcher)  # type: ignore[arg-type]
    times = []
    for number in range(-1, trials):
        request = TrialRequest(
            study_name="bench", trial_number=number, workload_class="tuner.workloads.fake:NoOpWorkload",
            settings={"x": number}, inputs={}, seed=0, device="cpu",
            measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1}, timeout_s=60,
            workdir=str(directory / "handoff" / str(number + 1)))
        started = time.perf_counter()
        result = runner.run(request, Slot(0, None, 1))
        if number >= 0:
            times.append(time.perf_counter() - started)
        assert result.outcome.value == "OK", result.reason
    return times


def full_tuner(trials: int, directory: Path) -> tuple[float, int]:
    """Total seconds of coordinator + worker + storage + MLflow (flushed); MLflow child runs."""
    from mlflow.tracking import MlflowClient

    spec = parse_spec(SPEC)
    directory.mkdir(parents=True, exist_ok=True)
    opened = create_study(spec, SPEC, f"sqlite:///{directory / 'tuner.db'}", "overhead", "random", trials, {})
    uri = f"sqlite:///{directory / 'mlflow.db'}"
    tracker = MlflowTracker(uri, StudyRunInfo("overhead", "overhead @ cpu", {}, {}, ("latency_p50_s",), ("minimize",)))
    tracker.wait_started()  # MLflow's import and schema creation are a one-off, not per trial
    directory.mkdir(parents=True, exist_ok=True)
    coordinator = Coordinator(opened=opened, runner=SubprocessRunner(), slots=[Slot(0, None, 1)], home=directory,
                              device="cpu", plan=plan_constraints(spec, {}), budget_trials=trials,
                              wall_time_s=None, listeners=[tracker])
    started = time.perf_counter()
    coordinator.run()
    tracker.close()
    elapsed = time.perf_counter() - started
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("overhead @ cpu")
    children = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    return elapsed, len(children)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args()
    small = max(5, args.trials // 4)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        bare = bare_optuna(args.trials, directory)
        handoff = {launcher: worker_handoff(min(args.trials, 20), directory / launcher, launcher)
                   for launcher in ("fork", "exec")}
        total_small, _ = full_tuner(small, directory / "small")
        total_large, children = full_tuner(args.trials, directory / "large")
    per_trial = (total_large - total_small) / (args.trials - small)
    one_off = total_small - small * per_trial
    overhead = per_trial - bare
    print(f"budgets measured                 : {small} and {args.trials} trials")
    print(f"bare Optuna ask/tell (SQLite)    : {bare * 1e3:8.1f} ms/trial")
    for launcher, times in handoff.items():
        print(f"worker hand-off ({launcher:4s})           : {statistics.median(times) * 1e3:8.1f} ms/trial "
              f"(median of {len(times)}, max {max(times) * 1e3:.1f})")
    print(f"tuner, whole path + MLflow       : {per_trial * 1e3:8.1f} ms/trial "
          f"(slope; {children} MLflow child runs at {args.trials} trials)")
    print(f"one-off cost per study           : {one_off:8.2f} s (study, MLflow parent, front artifacts)")
    print(f"fixed overhead over bare Optuna  : {overhead * 1e3:8.1f} ms/trial (target <= 150 ms: "
          f"{'met' if overhead <= 0.150 else 'NOT met'})")
    print(f"ratio tuner / bare Optuna        : {per_trial / bare:8.1f}x")


if __name__ == "__main__":
    main()
