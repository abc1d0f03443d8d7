"""Where a study's latency-prediction error comes from: its few runs, or the model's form (issue 38, item 2).

``bench/prediction_error.py`` compares each prediction a replayed study recorded with what its table measured;
``bench/prediction_ceiling.py`` fits the same model on random table rows. This puts the two side by side *on the
same settings*: each study's predicted trials, scored twice --

- **study**: the prediction the coordinator recorded before the trial ran (fitted on the study's own runs so
  far, :mod:`tuner.search.prediction`);
- **same form, half the table**: the study's latency model (split or plain, :mod:`tuner.search.fitting.split_latency`)
  fitted once on a random half of the table's OK rows that does not hold the setting (two folds; each setting is
  predicted by the fold without it), so it never sees the measurement it is scored against.

Both against the one measurement the table holds, so both carry the table's own noise
(``bench/tables/remeasure.py``: a setting measured again in another process). Per table and method, the median
|measured / predicted - 1| of both, overall and by how many of the study's own runs the prediction was fitted
on. If the half-table column sits well below the study's at the same settings, the gap is the study's data (few
runs, chosen by its sampler), not the model's form.

Usage: ``python bench/prediction_gap.py [--tables wan_tiny:cpu1t,omni_tiny:cpu1t] [--methods tpe,default]
[--seeds 10] [--budget 60]``; raw figures in ``bench/results/prediction_gap.json``; ``--report`` prints them.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raw_results import main, provenance  # noqa: E402

TABLE_DIR = Path(__file__).resolve().parent / "tables"
BINS = ((3, 10), (10, 20), (20, 40), (40, 10**6))
"""Ranges of the study's own runs a prediction was fitted on (low inclusive, high exclusive)."""


def _half_table_models(table: Any, seed: int = 0) -> tuple[dict[int, int], list[Any], list[int]]:
    """Two latency models of the study's form, each fitted on one random half of the table's OK rows: the fold of
    each row (by ``id``), the two models, and the cost model's feature columns."""
    from prediction_ceiling import _split

    from tuner.results import Outcome
    from tuner.search.fitting.split_latency import split_parts
    from tuner.search.prediction import cost_columns, setting_features
    from tuner.spec.space import distributions

    space = distributions(table.spec)
    columns = cost_columns(space)
    kept = [
        row for row in table.rows.values() if row.outcome is Outcome.OK and (row.values.get("latency_p50_s") or 0) > 0
    ]
    order = np.random.default_rng(seed).permutation(len(kept))
    fold_of = {id(kept[index]): position % 2 for position, index in enumerate(order)}
    models = []
    for fold in (0, 1):
        rows = [row for row in kept if fold_of[id(row)] == fold]
        features = np.asarray([setting_features(row.params, space, prior=False) for row in rows])[:, columns]
        logs = np.log([row.values["latency_p50_s"] for row in rows])
        parts = []
        for row in rows:
            figures = {name: {"value": value} for name, value in row.values.items()}
            parts.append(split_parts(row.values["latency_p50_s"], figures) or (math.nan, math.nan))
        models.append(_split(features, logs, np.asarray(parts)))
    return fold_of, models, columns


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import optuna
    from prediction_error import _method

    from tuner.replay.methods import Target, replay_once
    from tuner.replay.table import load_hardware_types, load_table
    from tuner.search.prediction import LATENCY, setting_features
    from tuner.spec.space import distributions
    from tuner.storage.attributes import is_measured, metrics_of, prediction_of

    declared = load_hardware_types(TABLE_DIR / "hardware_types.yaml")
    out = []
    for label in args.tables.split(","):
        table = load_table(declared[label])
        target = Target.of(table)
        space = distributions(table.spec)
        fold_of, models, columns = _half_table_models(table)
        for method_name in args.methods.split(","):
            method = _method(method_name)
            pairs: list[tuple[int, float, float]] = []  # (fitted on, study error, half-table error)
            with tempfile.TemporaryDirectory() as tmp:
                for seed in range(args.seeds):
                    workdir = Path(tmp) / str(seed)
                    replay_once(target, method, seed, args.budget, workdir)
                    name = f"{method.name}-seed{seed}"
                    study = optuna.load_study(study_name=name, storage=f"sqlite:///{workdir / (name + '.db')}")
                    for trial in study.get_trials(deepcopy=False):
                        predicted = prediction_of(trial).get(LATENCY)
                        measured = (metrics_of(trial).get(LATENCY) or {}).get("value") if is_measured(trial) else None
                        row = table.lookup(trial.params)
                        if not predicted or not measured or row is None or id(row) not in fold_of:
                            continue
                        features = np.asarray(setting_features(trial.params, space, prior=False))[columns]
                        other = models[1 - fold_of[id(row)]]
                        half = math.exp(other.predict(features)[0])
                        pairs.append(
                            (int(predicted["fitted_on"]), measured / predicted["value"] - 1.0, measured / half - 1.0)
                        )
            out.append({"table": label, "method": method_name, **_summary(pairs)})
    return {"seeds": args.seeds, "budget": args.budget, "rows": out}


def _summary(pairs: list[tuple[int, float, float]]) -> dict[str, Any]:
    """The medians of |error| of both predictions, overall and per :data:`BINS` of runs fitted on."""
    data = np.asarray(pairs, dtype=float).reshape(-1, 3)
    bins = []
    for low, high in BINS:
        inside = data[(data[:, 0] >= low) & (data[:, 0] < high)]
        bins.append(
            {
                "runs": [low, high],
                "trials": len(inside),
                "study": float(np.median(np.abs(inside[:, 1]))) if len(inside) else None,
                "half_table": float(np.median(np.abs(inside[:, 2]))) if len(inside) else None,
            }
        )
    return {
        "predicted_trials": len(data),
        "study": float(np.median(np.abs(data[:, 1]))),
        "half_table": float(np.median(np.abs(data[:, 2]))),
        "bins": bins,
    }


def report_lines(result: dict[str, Any]) -> list[str]:
    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    bins = " | ".join(f"{low}-{high - 1 if high < 10**6 else ''} runs" for low, high in BINS)
    lines = [
        provenance(result) + f"; {result['seeds']} replayed studies of {result['budget']} trials per table and "
        "method; each cell: the study's median abs. latency error / the same model form's, fitted on the half of "
        "the table without the setting",
        "",
        f"| table | method | predicted trials | all | {bins} |",
        "| --- | --- | --- | --- |" + " --- |" * len(BINS),
    ]
    for row in result["rows"]:
        cells = " | ".join(f"{shown(b['study'])} / {shown(b['half_table'])} (n {b['trials']})" for b in row["bins"])
        lines.append(
            f"| {row['table']} | {row['method']} | {row['predicted_trials']} | "
            f"{shown(row['study'])} / {shown(row['half_table'])} | {cells} |"
        )
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tables", default="wan_tiny:cpu1t,omni_tiny:cpu1t")
    parser.add_argument("--methods", default="tpe,default")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=60)
    main(parser, "prediction_gap.py", measure, report_lines)
