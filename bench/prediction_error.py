"""How well a study predicts a setting's latency and memory before it runs (issue 38, item 2).

Each study is REPLAYED (the real coordinator, sampler and SQLite storage; a
:class:`tuner.replay.runner.ReplayRunner` answers each trial from an exhaustive table of measured settings,
``bench/tables``), ``--seeds`` seeds, ``--budget`` trials, with ``--method``: ``tpe`` (the default Optuna
sampler with nothing skipped and no proposal chosen by prediction: every proposal runs, so each prediction
meets its measurement; the figures before 2026-12-07) or ``default`` (the spec's default sampler block, what a
user's study records: a spread start, proposals by predicted gain, skip-ahead -- a skipped proposal is not
measured, an audited one is). Before each trial runs, the
coordinator records what :mod:`tuner.search.prediction` predicts of it (fitted on the study's trials measured so
far); after the study, each prediction is compared with what the table measured for that setting. Per table:
the predicted trials, the median and 90th percentile of |measured / predicted - 1| for the latency and for the
memory figure, the median of measured / predicted - 1 itself (a bias: > 0, slower than predicted), and how often the measured value fell inside the predicted interval (its nominal share: 80 %); the same for the predictions
fitted on fewer than :data:`EARLY` of the study's runs.

Usage: ``python bench/prediction_error.py [--seeds 5] [--budget 60] [--tables avatar_dit:cpu1t,avqa:cpu1t-nodnn]
[--method tpe|default] [--by PARAM]``
(``--by cache``: the errors also per value of that parameter);
raw figures in ``bench/results/prediction_error.json``; ``--report`` prints the table from them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raw_results import main, provenance  # noqa: E402

TABLE_DIR = Path(__file__).resolve().parent / "tables"
EARLY = 10
"""Predictions fitted on fewer of the study's own runs than this are also reported apart: where a warm start's
evidence from another hardware type should count most."""


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import optuna

    from tuner.replay.methods import Target, replay_once
    from tuner.replay.table import load_hardware_types, load_table
    from tuner.search.prediction import prediction_errors
    from tuner.storage.attributes import is_measured, metrics_of, prediction_of

    declared = load_hardware_types(TABLE_DIR / "hardware_types.yaml")
    rows = []
    by_rows: list[dict[str, Any]] = []
    source = Target.of(load_table(declared[args.warm_from])) if args.warm_from else None
    for label in args.tables.split(","):
        target = Target.of(load_table(declared[label]))
        errors: dict[str, list[float]] = {}
        early: dict[str, list[float]] = {}
        inside: dict[str, list[bool]] = {}
        early_inside: dict[str, list[bool]] = {}
        widths: dict[str, list[float]] = {}
        by_value: dict[tuple[str, str], list[float]] = {}  # (metric, the --by parameter's value): signed errors
        with tempfile.TemporaryDirectory() as tmp:
            for seed in range(args.seeds):
                workdir = Path(tmp) / str(seed)
                method = _method(args.method)
                if source is not None:
                    method = dataclasses.replace(method, setup=_warm_from(source, args.budget))
                replay_once(target, method, seed, args.budget, workdir)
                url = f"sqlite:///{workdir / f'{method.name}-seed{seed}.db'}"
                study = optuna.load_study(study_name=f"{method.name}-seed{seed}", storage=url)
                for trial in study.get_trials(deepcopy=False):
                    predicted = prediction_of(trial)
                    if not predicted or not is_measured(trial):
                        continue
                    measured = metrics_of(trial)
                    for name, error in prediction_errors(predicted, measured).items():
                        errors.setdefault(name, []).append(error)
                        if args.by:
                            by_value.setdefault((name, str(trial.params.get(args.by, "-"))), []).append(error)
                        value = measured[name]["value"]
                        held = predicted[name]["low"] <= value <= predicted[name]["high"]
                        inside.setdefault(name, []).append(held)
                        if int(predicted[name].get("fitted_on") or 0) < EARLY:
                            early.setdefault(name, []).append(error)
                            early_inside.setdefault(name, []).append(held)
                        if predicted[name]["low"] > 0:  # how wide: the interval's high over its low
                            widths.setdefault(name, []).append(predicted[name]["high"] / predicted[name]["low"])
        for name, values in errors.items():
            magnitude = np.abs(values)
            rows.append(
                {
                    "table": label,
                    "metric": name,
                    "predicted_trials": len(values),
                    "median_abs_error": float(np.median(magnitude)),
                    "median_error": float(np.median(values)),  # signed: > 0, the setting ran slower than predicted
                    "p90_abs_error": float(np.percentile(magnitude, 90)),
                    "inside_interval": float(np.mean(inside[name])),
                    "median_interval_ratio": float(np.median(widths[name])) if widths.get(name) else None,
                    "early_trials": len(early.get(name, [])),
                    "early_median_abs_error": float(np.median(np.abs(early[name]))) if early.get(name) else None,
                    "early_inside_interval": float(np.mean(early_inside[name])) if early_inside.get(name) else None,
                }
            )
        for (name, value), values in sorted(by_value.items()):
            by_rows.append(
                {
                    "table": label,
                    "metric": name,
                    "value": value,
                    "predicted_trials": len(values),
                    "median_abs_error": float(np.median(np.abs(values))),
                    "median_error": float(np.median(values)),
                }
            )
    warm = {"warm_from": args.warm_from} if args.warm_from else {}
    by = {"by": args.by, "by_rows": by_rows} if args.by else {}
    return {"seeds": args.seeds, "budget": args.budget, "method": args.method, **warm, "rows": rows, **by}


def _method(name: str) -> Any:
    """The replay method of ``--method`` (see the module docstring)."""
    from tuner.replay.methods import DEFAULT_GAIN, DEFAULT_SKIP, Method
    from tuner.spec.models import DEFAULT_SAMPLER

    if name == "tpe":
        return Method("default", DEFAULT_SAMPLER)  # its study name as before the option
    return Method("spec-default", DEFAULT_SAMPLER, skip_dominated=DEFAULT_SKIP, predicted_gain=DEFAULT_GAIN)


def _warm_from(source: Any, budget: int) -> Any:
    """A method's ``setup``: replay a default study of ``budget`` trials on ``source`` (another hardware type of
    the same space, same seed) into the target's storage, and give its trials to the coordinator as the
    predictions' other-hardware evidence (what ``tuner run --warm-start`` does)."""
    from tuner.replay.methods import Method, replay_once
    from tuner.spec.models import DEFAULT_SAMPLER

    def setup(opened: Any, context: Any) -> dict[str, Any]:
        done = replay_once(
            source,
            Method("default", DEFAULT_SAMPLER),
            context.seed,
            budget,
            context.workdir / "source",
            storage_url=opened.storage_url,
            study_name="source",
        )
        del done
        import optuna

        trials = optuna.load_study(study_name="source", storage=opened.storage_url).get_trials(deepcopy=False)
        return {"prediction_prior": trials}

    return setup


def report_lines(result: dict[str, Any]) -> list[str]:
    early = any("early_trials" in row for row in result["rows"])
    wide = any(row.get("median_interval_ratio") for row in result["rows"])  # results since 2026-12-07
    early_held = any("early_inside_interval" in row for row in result["rows"])  # since 2026-12-07, evening
    warm = f", each warm-started from a replayed study on {result['warm_from']}" if result.get("warm_from") else ""
    kind = (
        "studies of the spec's default sampler block (only the trials it ran)"
        if result.get("method") == "default"
        else "TPE studies (every proposal runs)"
    )
    lines = [
        provenance(result) + f"; {result['seeds']} replayed {kind} of {result['budget']} trials per table{warm}",
        "",
        "| table | metric | predicted trials | median abs. error | median error (measured / predicted - 1) "
        "| p90 abs. error | inside the interval |"
        + (" interval high / low (median) |" if wide else "")
        + (
            f" fitted on < {EARLY} runs: trials, median abs. error{', inside' if early_held else ''} |" if early else ""
        ),
        "| --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if wide else "") + (" --- |" if early else ""),
    ]
    for row in result["rows"]:
        median = row.get("early_median_abs_error")
        signed = row.get("median_error")
        lines.append(
            f"| {row['table']} | {row['metric']} | {row['predicted_trials']} | {row['median_abs_error']:.1%} | "
            + ("- | " if signed is None else f"{signed:+.1%} | ")
            + f"{row['p90_abs_error']:.1%} | {row['inside_interval']:.0%} |"
            + (
                f" {row['median_interval_ratio']:.2f} |"
                if wide and row.get("median_interval_ratio")
                else " - |"
                if wide
                else ""
            )
            + (
                f" {row.get('early_trials', 0)}, {'-' if median is None else f'{median:.1%}'}"
                + (f", {_share(row.get('early_inside_interval'))}" if early_held else "")
                + " |"
                if early
                else ""
            )
        )
    return lines + by_lines(result)


def by_lines(result: dict[str, Any]) -> list[str]:
    """The errors per value of the ``--by`` parameter (results with ``by_rows``), one row per table, metric and
    value; nothing for results without them."""
    if not result.get("by_rows"):
        return []
    lines = [
        "",
        f"by {result['by']}:",
        "",
        f"| table | metric | {result['by']} | predicted trials | median abs. error | median error |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["by_rows"]:
        lines.append(
            f"| {row['table']} | {row['metric']} | {row['value']} | {row['predicted_trials']} | "
            f"{row['median_abs_error']:.1%} | {row['median_error']:+.1%} |"
        )
    return lines


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--tables", default="avatar_dit:cpu1t,avqa:cpu1t-nodnn")
    parser.add_argument("--method", choices=("tpe", "default"), default="tpe")
    parser.add_argument("--by", default=None, help="a parameter: also report the errors per value of it (e.g. cache)")
    parser.add_argument(
        "--warm-from",
        default=None,
        help="a table of another hardware type of the same space (e.g. avqa:cpu1t): each study's predictions "
        "also use a replayed study on it, as after tuner run --warm-start",
    )
    main(parser, "prediction_error.py", measure, report_lines)
