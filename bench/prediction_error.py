"""How well a study predicts a setting's latency and memory before it runs (issue 38, item 2).

Each study is REPLAYED (the real coordinator, sampler and SQLite storage; a
:class:`tuner.replay.runner.ReplayRunner` answers each trial from an exhaustive table of measured settings,
``bench/tables``): the default sampler with ``skip_dominated`` off (every proposal runs, so each prediction
meets its measurement), ``--seeds`` seeds, ``--budget`` trials. Before each trial runs, the
coordinator records what :mod:`tuner.search.prediction` predicts of it (fitted on the study's trials measured so
far); after the study, each prediction is compared with what the table measured for that setting. Per table:
the predicted trials, the median and 90th percentile of |measured / predicted - 1| for the latency and for the
memory figure, and how often the measured value fell inside the predicted interval (its nominal share: 80 %).

Usage: ``python bench/prediction_error.py [--seeds 5] [--budget 60] [--tables avatar_dit:cpu1t,avqa:cpu1t-nodnn]``;
raw figures in ``bench/results/prediction_error.json``; ``--report`` prints the table from them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raw_results import main, provenance  # noqa: E402

TABLE_DIR = Path(__file__).resolve().parent / "tables"


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import optuna

    from tuner.replay.methods import Method, Target, replay_once
    from tuner.replay.table import load_hardware_types, load_table
    from tuner.search.prediction import prediction_errors
    from tuner.spec.models import DEFAULT_SAMPLER
    from tuner.storage.attributes import PREDICTION, is_measured, metrics_of

    declared = load_hardware_types(TABLE_DIR / "hardware_types.yaml")
    rows = []
    for label in args.tables.split(","):
        target = Target.of(load_table(declared[label]))
        errors: dict[str, list[float]] = {}
        inside: dict[str, list[bool]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for seed in range(args.seeds):
                replay_once(target, Method("default", DEFAULT_SAMPLER), seed, args.budget, Path(tmp) / str(seed))
                url = f"sqlite:///{Path(tmp) / str(seed) / f'default-seed{seed}.db'}"
                study = optuna.load_study(study_name=f"default-seed{seed}", storage=url)
                for trial in study.get_trials(deepcopy=False):
                    predicted = trial.user_attrs.get(PREDICTION)
                    if not predicted or not is_measured(trial):
                        continue
                    measured = metrics_of(trial)
                    for name, error in prediction_errors(predicted, measured).items():
                        errors.setdefault(name, []).append(error)
                        value = measured[name]["value"]
                        inside.setdefault(name, []).append(predicted[name]["low"] <= value <= predicted[name]["high"])
        for name, values in errors.items():
            magnitude = np.abs(values)
            rows.append(
                {
                    "table": label,
                    "metric": name,
                    "predicted_trials": len(values),
                    "median_abs_error": float(np.median(magnitude)),
                    "p90_abs_error": float(np.percentile(magnitude, 90)),
                    "inside_interval": float(np.mean(inside[name])),
                }
            )
    return {"seeds": args.seeds, "budget": args.budget, "rows": rows}


def report_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        provenance(result) + f"; {result['seeds']} replayed default studies of {result['budget']} trials per table",
        "",
        "| table | metric | predicted trials | median abs. error | p90 abs. error | inside the interval |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['table']} | {row['metric']} | {row['predicted_trials']} | {row['median_abs_error']:.1%} | "
            f"{row['p90_abs_error']:.1%} | {row['inside_interval']:.0%} |"
        )
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--tables", default="avatar_dit:cpu1t,avqa:cpu1t-nodnn")
    main(parser, "prediction_error.py", measure, report_lines)
