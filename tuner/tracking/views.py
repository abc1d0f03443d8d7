"""What the MLflow views of a study contain, computed from stored trial records only.

Pure functions, no MLflow import: :mod:`tuner.tracking.writer` writes what these
build, both live (:class:`~tuner.tracking.live.MlflowTracker`) and on rebuild
(``tuner sync-mlflow``), so a rebuilt study shows exactly what a live one does.

* the parent run's identity comes from :mod:`tuner.tracking.run_info`.
* :func:`child_payload` — a trial's child run: params (``derived.*`` for derived
  values), every available metric (unit in the name), constraint violations
  (``constraint.*``), the device-seconds its run held (``device_s``), outcome / role / reason tags,
  where it ran (``tuner.host``, ``tuner.worker``: :func:`trial_host_tags`), and the sample files.
  Its name (``t12 · 1.32 s · PSNR 31.2 dB · front``) and real start / end times come from
  :mod:`tuner.tracking.comparison`.
* :func:`rank_payload` — ``pareto_rank`` / ``on_front`` (tags and metrics) of a trial;
  :func:`rank_update` adds the run name, which says ``front``.
* :func:`build_front_views` — the parent run's artifacts (front table as CSV and
  as an MLflow table, ``front.json``; every trial as ``trials.json`` / ``trials.csv``; pairwise
  Pareto PNGs, interactive HTML, hypervolume history, latency–throughput curve), its
  description and summary metrics, among them what the study cost (:func:`cost_views`):
  ``cost_used_device_h``, ``cost_wasted_device_h``, ``cost_avoided_device_h``,
  ``cost_recorded_device_h`` (= used + wasted: the trials' ``device_s`` summed, in hours) and
  ``cost_wasted_runs``, refreshed with the front; the tag ``tuner.cost`` says it in one line. The tag
  ``tuner.chosen`` names the trial the export rule chooses and the rule (:func:`chosen_view`); the
  description says it too and marks that trial in its front table. The tag ``tuner.headline`` states
  its speed-up against the baseline when the baseline meets the rule, else the reference (:func:`headline_view`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.front.choice import PolicyError, choose_by_rule
from tuner.front.cost import cost_metrics, cost_of_records
from tuner.front.report import columns, front_csv, front_table, hypervolume_png, pairwise_pngs
from tuner.front.throughput import throughput_png
from tuner.pareto import Point, hypervolume_history, pareto_ranks
from tuner.spec.metrics import objective_units
from tuner.storage.records import TrialRecord, record_feasible
from tuner.tracking.comparison import (
    NOTE_TAG,
    RUN_NAME_TAG,
    ComparisonView,
    child_run_name,
    comparison_view,
    study_cost_lines,
    study_description,
    trial_times_ms,
    trials_table,
)
from tuner.tracking.run_info import StudyRunInfo

HOST_TAG_KEYS = (
    "tuner.device",
    "tuner.gpu_type",
    "host.hostname",
    "host.gpu_name",
    "host.driver_version",
    "host.torch_version",
    "host.cpu_model",
)
INFEASIBLE_RANK = "infeasible"
TABLE_FILE = "front.json"  # an MLflow table: pandas "split" JSON, listed in the run's mlflow.loggedArtifacts
CHOSEN_TAG = "tuner.chosen"  # the study run's mark of the trial its export rule chooses (chosen_view)
HEADLINE_TAG = "tuner.headline"  # what the chosen trial's speed-up is stated against (headline_view)
TRIALS_TABLE_FILE = "trials.json"  # every trial (key params, objectives, outcome, front flag): an MLflow table
TABLE_FILES = (TABLE_FILE, TRIALS_TABLE_FILE)


def metric_key(name: str, unit: str) -> str:
    """Metric names carry their unit: ``latency_p50_s`` stays, ``psnr`` + dB -> ``psnr_db``; a figure over
    inputs keeps it on its metric: ``psnr_db:worst`` -> ``psnr_db.worst`` (MLflow keys have no ``:``)."""
    base, _, how = name.partition(":")
    suffix = {"s": "_s", "GB": "_gb", "dB": "_db"}.get(unit, "")
    key = base if not suffix or base.endswith(suffix) else f"{base}{suffix}"
    return f"{key}.{how}" if how else key


def safe_key(key: str) -> str:
    """An MLflow-legal key (letters, digits, ``-_./`` and space)."""
    return "".join(c if c.isalnum() or c in "-_./ " else "_" for c in key)


@dataclass(frozen=True)
class ChildPayload:
    """One child run: name, tags, params, metrics, terminal status, sample files, and the trial's
    real start and end (ms since the epoch; None: the run's own creation / termination time)."""

    run_name: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    status: str
    samples: dict[str, str]
    start_time_ms: int | None = None
    end_time_ms: int | None = None


def child_payload(
    record: TrialRecord, info: StudyRunInfo, parent_run_id: str, ranks: Mapping[int, int] | None = None
) -> ChildPayload:
    """The child run of ``record`` (placeholders never become metrics; unavailable metrics are tags).

    ``ranks`` (trial number -> Pareto rank, :func:`ranks_of`) decide whether its name says ``front``.
    """
    tags = trial_host_tags(record, info)
    tags.update(
        {
            "mlflow.parentRunId": parent_run_id,
            "tuner.study": info.study_name,
            "tuner.trial_number": str(record.number),
            "tuner.role": record.role,
            "tuner.outcome": record.outcome,
            "tuner.state": record.state,
        }
    )
    if record.reason:
        tags["tuner.reason"] = record.reason[:4000]
    if record.slot:
        tags["tuner.slot"] = record.slot
    if record.duplicate_of is not None:
        tags["tuner.duplicate_of"] = str(record.duplicate_of)
    if record.warm_start_from:
        tags["tuner.warm_start_from"] = record.warm_start_from[:4000]
    if record.prediction_witness:
        tags["tuner.prediction_witness"] = record.prediction_witness[:4000]
    if record.predicted_peak_gb is not None:
        tags["tuner.predicted_peak_gb"] = f"{record.predicted_peak_gb:.4g}"
    params = {
        **{k: str(v) for k, v in record.params.items()},
        **{f"derived.{k}": str(v) for k, v in record.derived.items()},
    }
    metrics: dict[str, float] = {}
    for name, metric in record.metrics.items():
        key = metric_key(name, metric.get("unit", ""))
        if record.placeholder:
            continue
        if metric.get("value") is not None:
            metrics[key] = float(metric["value"])
        else:
            tags[f"unavailable.{safe_key(key)}"] = str(metric.get("reason", "unknown"))[:4000]
    if not record.placeholder:
        metrics.update(per_input_metrics(record))
    if record.cliffs:
        tags["tuner.cliffs"] = "; ".join(record.cliffs)[:4000]
    metrics.update(prediction_metrics(record))
    for key, value in record.constraints.items():
        metrics[f"constraint.{safe_key(key)}"] = float(value)
    if record.duplicate_of is None:
        for key, seconds in (
            ("worker_wall_time_s", record.wall_time_s),
            ("eval_time_s", record.eval_time_s),
            ("device_s", record.device_s),
        ):
            if seconds is not None:
                metrics[key] = float(seconds)
    status = "FINISHED" if record.outcome == "OK" else "FAILED"
    start, end = trial_times_ms(record)
    return ChildPayload(
        child_run_name(record, info, ranks or {}), tags, params, metrics, status, dict(record.samples), start, end
    )


def per_input_metrics(record: TrialRecord) -> dict[str, float]:
    """Each input's available figures of a trial of several inputs: ``input.<input>.<metric key>``."""
    return {
        f"input.{safe_key(case)}.{metric_key(name, str(record.metrics.get(name, {}).get('unit', '')))}": float(
            figure["value"]
        )
        for case, figures in record.per_input.items()
        for name, figure in figures.items()
        if figure.get("value") is not None
    }


def trial_host_tags(record: TrialRecord, info: StudyRunInfo) -> dict[str, str]:
    """The child run's host tags: the study's (``tuner.device``, ``tuner.gpu_type``, ``host.*``)
    and where the trial ran: ``tuner.host``, ``tuner.worker`` (``host:pid``), ``tuner.fingerprint_note``.

    The latter come from the trial's ``host`` / ``worker`` / ``fingerprint_note`` attributes
    (trials from before the fleet have none, and keep the study's tags only). A trial that
    ran on another host than the one whose fingerprint the study holds gets
    ``host.hostname`` = its host, and the study's other ``host.*`` facts are left out of its
    run: they describe another machine.
    """
    tags = {k: v for k, v in info.tags.items() if k in HOST_TAG_KEYS}
    facts = {
        key: getattr(record, attr, None)
        for key, attr in (
            ("tuner.host", "host"),
            ("tuner.worker", "worker"),
            ("tuner.fingerprint_note", "fingerprint_note"),
        )
    }
    tags.update({key: str(value)[:4000] for key, value in facts.items() if value})
    host = tags.get("tuner.host")
    if host is not None and host != info.tags.get("host.hostname"):
        tags = {k: v for k, v in tags.items() if not k.startswith("host.")}
        tags["host.hostname"] = host
    return tags


def ranks_of(records: Sequence[TrialRecord], directions: Sequence[str]) -> dict[int, int]:
    """Trial number -> Pareto rank (0: on the front) over the feasible measured records."""
    points = [Point(r.number, tuple(r.values)) for r in records if record_feasible(r) and r.values is not None]
    return pareto_ranks(points, directions)


def rank_payload(number: int, ranks: Mapping[int, int]) -> tuple[dict[str, str], dict[str, float]]:
    """Tags and metrics saying where trial ``number`` stands: rank and front membership."""
    rank = ranks.get(number)
    if rank is None:
        return {"tuner.pareto_rank": INFEASIBLE_RANK, "tuner.on_front": "false"}, {"on_front": 0.0}
    return (
        {"tuner.pareto_rank": str(rank), "tuner.on_front": str(rank == 0).lower()},
        {"pareto_rank": float(rank), "on_front": float(rank == 0)},
    )


def rank_update(
    record: TrialRecord, info: StudyRunInfo, ranks: Mapping[int, int]
) -> tuple[dict[str, str], dict[str, float]]:
    """:func:`rank_payload` plus the run name (``mlflow.runName``): a run joining or leaving the
    front is renamed (``... · front``)."""
    tags, metrics = rank_payload(record.number, ranks)
    return {**tags, RUN_NAME_TAG: child_run_name(record, info, ranks)}, metrics


def objective_metric_keys(records: Sequence[TrialRecord], info: StudyRunInfo) -> dict[str, str]:
    """Objective -> its MLflow metric key (:func:`metric_key` with its unit)."""
    units = objective_units(info.objective_names, (r.metrics for r in records))
    return {name: metric_key(name, units[name]) for name in info.objective_names}


def study_comparison_view(records: Sequence[TrialRecord], info: StudyRunInfo) -> ComparisonView:
    """The runs-table view comparing the study's trials (:func:`tuner.tracking.comparison.comparison_view`)."""
    return comparison_view(info, objective_metric_keys(records, info))


def chosen_view(records: Sequence[TrialRecord], info: StudyRunInfo) -> tuple[int | None, str]:
    """The trial the study's export rule chooses among ``records`` (what ``best.yaml`` and ``tuner export``
    ship: :func:`tuner.front.choice.choose_by_rule`) and the ``tuner.chosen`` tag saying it with the rule:
    ``trial 12 by knee (default: ...)``, or ``none: <why>`` (number None)."""
    feasible = [r for r in records if record_feasible(r)]
    try:
        choice = choose_by_rule(feasible, info.objective_names, info.directions, info.export_rule)
    except PolicyError as error:
        return None, f"none: {error} (rule: {info.export_rule.describe()})"[:4000]
    return choice.record.number, f"trial {choice.record.number} by {choice.rule}"[:4000]


def headline_view(records: Sequence[TrialRecord], info: StudyRunInfo) -> str:
    """The ``tuner.headline`` tag: the chosen trial's speed-up against the baseline when it meets the export rule,
    else the reference, and how the baseline fails it (:mod:`tuner.front.headline`, as the closing summary and
    ``best.yaml`` say it); ``none: <why>`` when nothing is chosen or there is nothing to compare with."""
    from tuner.front.headline import headline, measured_roles

    feasible = [r for r in records if record_feasible(r)]
    try:
        choice = choose_by_rule(feasible, info.objective_names, info.directions, info.export_rule)
    except PolicyError as error:
        return f"none: {error}"[:4000]
    units = objective_units(info.objective_names, (r.metrics for r in records))
    speed = next((n for n in info.objective_names if units.get(n) == "s"), None)
    roles = measured_roles(records)
    said = headline(choice.record, roles.get("baseline"), roles.get("reference"), choice.policy, speed)
    if said is None:
        return "none: the study has no measured baseline or reference"
    return f"trial {choice.record.number}: {said.text()}"[:4000]


def cost_views(records: Sequence[TrialRecord], info: StudyRunInfo) -> tuple[dict[str, float], str]:
    """The study run's cost metrics (:func:`tuner.front.cost.cost_metrics`, device-hours) and its one-line
    summary (the ``tuner.cost`` tag), from ``records``: the same figures ``tuner status`` prints."""
    return cost_metrics(cost_of_records(records)), study_cost_lines(records, info)[0]


@dataclass
class FrontViews:
    """The parent run's front artifacts (path -> bytes), MLflow table, metrics and tags."""

    ranks: dict[int, int]
    front: list[int]
    artifacts: dict[str, bytes]
    table: dict[str, list[Any]]
    metrics: dict[str, float]
    tags: dict[str, str]


def completion_order(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Feasible measured records in the order they finished (ties: trial number)."""
    return sorted((r for r in records if record_feasible(r)), key=lambda r: (r.datetime_complete or "", r.number))


def build_front_views(
    records: Sequence[TrialRecord], info: StudyRunInfo, experiment_id: str | None = None
) -> FrontViews:
    """Everything the parent run shows about the front of ``records``; with ``experiment_id`` its
    description links to the comparison view of the experiment's runs table."""
    from tuner.front.html import front_html
    from tuner.front.throughput import throughput_curve

    names, directions = list(info.objective_names), list(info.directions)
    ranks = ranks_of(records, directions)
    front = sorted(n for n, rank in ranks.items() if rank == 0)
    rows = front_table(records, set(front), names)
    artifacts: dict[str, bytes] = {"front.csv": front_csv(rows).encode()}
    pairs = pairwise_pngs(records, set(front), names, directions)
    artifacts.update({f"pareto/{name}": png for name, png in pairs.items()})
    artifacts["front.png"] = next(iter(pairs.values()))
    title = f"{info.study_name} — {info.experiment_name}"
    artifacts["front.html"] = front_html(records, set(front), names, directions, title).encode()
    history = hypervolume_history(
        [Point(r.number, tuple(r.values or ())) for r in completion_order(records)], directions
    )
    artifacts["hypervolume.png"] = hypervolume_png(history, names, records)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["feasible_trials", "trial", "hypervolume"])
    writer.writerows((count, number, value) for count, (number, value) in enumerate(history, start=1))
    artifacts["hypervolume.csv"] = buffer.getvalue().encode()
    curve = throughput_curve(records)
    tags: dict[str, str] = {}
    if isinstance(curve, str):
        artifacts["latency_throughput.txt"] = f"unavailable: {curve}\n".encode()
        tags["tuner.knee_batch_size"] = f"unavailable: {curve}"[:4000]
    else:
        artifacts["latency_throughput.png"] = throughput_png(curve)
        artifacts["latency_throughput.csv"] = curve.csv().encode()
        summary = (
            f"knee: batch {curve.knee.batch_size} (trial {curve.knee.trial})"
            if curve.knee
            else f"no knee: {curve.knee_reason}"
        )
        artifacts["latency_throughput.txt"] = (summary + "\n").encode()
        tags["tuner.knee_batch_size"] = (
            str(curve.knee.batch_size) if curve.knee else f"unavailable: {curve.knee_reason}"
        )
    artifacts["search_space.json"] = json.dumps(info.search_space, indent=2, sort_keys=True, default=str).encode()
    metrics = {
        "front_size": float(len(front)),
        "trials": float(len(records)),
        "feasible_trials": float(len(history)),
        "hypervolume": history[-1][1] if history else 0.0,
    }
    cost, tags["tuner.cost"] = cost_views(records, info)
    chosen, tags[CHOSEN_TAG] = chosen_view(records, info)
    tags[HEADLINE_TAG] = headline_view(records, info)
    metrics.update(cost)
    keys = columns(rows)
    table = {key: [row.get(key) for row in rows] for key in keys}
    artifacts[TABLE_FILE] = json.dumps(
        {"columns": keys, "data": [[row.get(k) for k in keys] for row in rows]}, default=str
    ).encode()
    trials = trials_table(records, info, ranks)
    trial_rows = [list(row) for row in zip(*trials.values())]
    artifacts[TRIALS_TABLE_FILE] = json.dumps({"columns": list(trials), "data": trial_rows}, default=str).encode()
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([list(trials), *trial_rows])
    artifacts["trials.csv"] = buffer.getvalue().encode()  # the header even when no trial has finished
    route = study_comparison_view(records, info).route(experiment_id) if experiment_id is not None else None
    tags[NOTE_TAG] = study_description(records, info, ranks, route, chosen)
    return FrontViews(ranks, front, artifacts, table, metrics, tags)


def prediction_metrics(record: TrialRecord) -> dict[str, float]:
    """What was predicted of the trial before it ran (``predicted.<metric>``, ``.low``, ``.high``) and, once
    measured, the error (``prediction_error.<metric>``: measured / predicted - 1): :mod:`tuner.search.prediction`."""
    from tuner.search.prediction import prediction_errors

    out: dict[str, float] = {}
    for name, predicted in (record.prediction or {}).items():
        for part, key in (
            ("value", f"predicted.{name}"),
            ("low", f"predicted.{name}.low"),
            ("high", f"predicted.{name}.high"),
        ):
            if isinstance(predicted.get(part), (int, float)):
                out[key] = float(predicted[part])
    if record.duplicate_of is None and not record.placeholder:
        out.update(
            {
                f"prediction_error.{name}": error
                for name, error in prediction_errors(record.prediction, record.metrics).items()
            }
        )
    return out
