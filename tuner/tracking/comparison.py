"""What makes a study's runs readable at a glance: trial run names and times, the trials table,
the parent run's description and the runs-table view that opens on the comparison.

Pure functions, no MLflow import (like :mod:`tuner.tracking.views`, which uses them):

* :func:`child_run_name` — ``t12 · 1.32 s · ST-LPIPS 0.013 · front``; ``t7 · OOM``. The name
  depends on the trial's front membership, so it is set again whenever the trial's rank changes.
* :func:`trial_times_ms` — the trial's real start and end (the Optuna trial's
  ``datetime_start`` / ``datetime_complete``), in ms since the epoch, for the run's duration.
* :func:`trials_table` — every trial: run name, outcome, front flag, rank, objectives (labelled
  with units), ``device_s`` (what its run cost), key parameters: ``trials.json`` (an MLflow table)
  and ``trials.csv``.
* :func:`comparison_view` — an MLflow *shared view state* (experiment tag
  ``mlflow.sharedViewState.<key>``, opened by ``#/experiments/<id>/runs?viewStateShareKey=<key>``):
  the study's trial runs, sorted by the first objective, with the objectives, front flag,
  outcome and key parameters as the first columns.
* :func:`study_description` — the parent run's description (``mlflow.note.content``, markdown
  shown on the run's overview): what the study cost (:func:`study_cost_lines`), the link to that
  view and the front as a table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tuner.front.cost import cost_lines, cost_of_records, device_s_text
from tuner.front.labels import format_number, metric_label, metric_value_text
from tuner.spec.metrics import objective_units
from tuner.storage.records import TrialRecord, record_feasible

if TYPE_CHECKING:
    from tuner.tracking.run_info import StudyRunInfo

SEPARATOR = " · "
FRONT_WORD = "front"
RUN_NAME_TAG = "mlflow.runName"  # set through log_batch, MLflow renames the run
SHARED_VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # the MLflow UI's shared runs-table views
NOTE_TAG = "mlflow.note.content"  # a run's description (markdown) in the MLflow UI
DESCRIPTION_FRONT_ROWS = 25
# the runs table's column ids (ag-grid ``col-id`` in MLflow 3.17; Run Name and Created are pinned left)
RUN_NAME_COLUMN, DURATION_COLUMN = "attributes.`Run Name`", "duration"
RUN_NAME_WIDTH_PX = 380
DEVICE_S = "device_s"  # a trial's device-seconds: its child run's metric and the trials table's column
UNMEASURED_WORDS = "objective unavailable"  # ran OK, but an objective's metric could not be computed (FAIL)
_OUTCOME_WORDS = {
    "SKIPPED_PREDICTED_OOM": "skipped: predicted OOM",
    "SKIPPED_PREDICTED_DOMINATED": "skipped: predicted dominated",
    "FAIL": "failed",
    "PRUNED": "pruned",
}


def to_epoch_ms(stamp: str | None) -> int | None:
    """An ISO time as Optuna stores it (naive: the host's local time) -> ms since the epoch."""
    if not stamp:
        return None
    return int(round(datetime.fromisoformat(stamp).timestamp() * 1000))


def trial_times_ms(record: TrialRecord) -> tuple[int | None, int | None]:
    """(start, end) of the trial in ms since the epoch: from when it was asked (the worker starts
    right after) to when it was told (metrics evaluated); None when the storage has no time."""
    return to_epoch_ms(record.datetime_start), to_epoch_ms(record.datetime_complete)


def study_span_ms(records: Iterable[TrialRecord]) -> tuple[int | None, int | None]:
    """(first trial's start, last trial's end) in ms since the epoch: the study run's honest span
    (None when no trial has that time)."""
    starts, ends = [], []
    for record in records:
        start, end = trial_times_ms(record)
        starts += [start] if start is not None else []
        ends += [end] if end is not None else []
    return (min(starts) if starts else None), (max(ends) if ends else None)


def child_run_name(record: TrialRecord, info: StudyRunInfo, ranks: Mapping[int, int]) -> str:
    """The trial run's name: ``t<n>``, its role when not a search trial, then what it gave.

    Measured: each objective's value with its unit and name (``PSNR 31.2 dB``, ``ST-LPIPS 0.013``;
    the one objective in seconds by its unit alone: ``1.32 s``, two are named: ``latency p95 1.4 s``),
    then ``front`` when on the Pareto front or ``infeasible`` when a constraint is violated. An OOM / timeout / crash /
    invalid / skipped trial says so (``t7 · OOM``: its placeholder values are never shown), one that
    ran but lacks an objective's value says ``objective unavailable``; a copy names its original
    (``t9 · copy of t4``). At most 250 characters (MLflow's limit).
    """
    parts = [f"t{record.number}"]
    if record.role not in ("search", ""):
        parts.append(record.role)
    if record.duplicate_of is not None:
        parts.append(f"copy of t{record.duplicate_of}")
    elif record.outcome != "OK" or record.placeholder:
        parts.append(_OUTCOME_WORDS.get(record.outcome, record.outcome))
    elif record.values is None:
        parts.append(UNMEASURED_WORDS)
    else:
        names = list(info.objective_names)
        units = objective_units(names, [record.metrics])
        for name, value in zip(names, record.values):
            alone = units[name] == "s" and sum(1 for other in names if units[other] == "s") == 1
            parts.append(metric_value_text(name, value, units[name], with_name=not alone))
        if ranks.get(record.number) == 0:
            parts.append(FRONT_WORD)
        elif not record_feasible(record):
            parts.append("infeasible")
    return SEPARATOR.join(parts)[:250]


def key_parameters(info: StudyRunInfo) -> list[str]:
    """The search space's parameter names, in spec order (the settings a user compares)."""
    return list(dict(info.search_space.get("parameters", {})))


def trials_table(records: Sequence[TrialRecord], info: StudyRunInfo, ranks: Mapping[int, int]) -> dict[str, list[Any]]:
    """Column -> values, one row per finished trial: the front first, then by rank and the first
    objective, then the trials without a rank (OOM, infeasible, failed) by number.

    Columns: ``trial``, ``run`` (the run name), ``outcome``, ``on front``, ``Pareto rank``, each
    objective under its label (``latency p50 [s]``; empty for placeholders), ``device_s`` (the
    device-seconds its run held; empty for a copy or a skip), then the key parameters under their names.
    """
    names, directions = list(info.objective_names), list(info.directions)
    units = objective_units(names, (r.metrics for r in records))
    sign = -1.0 if directions and directions[0] == "maximize" else 1.0

    def order(record: TrialRecord) -> tuple[int, float, int]:
        rank = ranks.get(record.number)
        first = record.values[0] * sign if rank is not None and record.values else 0.0
        return (rank if rank is not None else 1 << 30, first, record.number)

    rows = sorted((r for r in records if r.state != "RUNNING"), key=order)
    labels = [metric_label(name, units[name]) for name in names]
    table: dict[str, list[Any]] = {"trial": [], "run": [], "outcome": [], "on front": [], "Pareto rank": []}
    table.update({label: [] for label in labels})
    table[DEVICE_S] = []
    params = key_parameters(info)
    table.update({name: [] for name in params if name not in table})
    for record in rows:
        measured = record.values is not None and not record.placeholder and record.duplicate_of is None
        table["trial"].append(record.number)
        table["run"].append(child_run_name(record, info, ranks))
        table["outcome"].append(record.outcome)
        table["on front"].append(ranks.get(record.number) == 0)
        table["Pareto rank"].append(ranks.get(record.number))
        for label, value in zip(labels, record.values if measured and record.values else [None] * len(labels)):
            table[label].append(value)
        table[DEVICE_S].append(record.device_s)
        for name in params:
            table[name].append(record.params.get(name))
    return table


@dataclass(frozen=True)
class ComparisonView:
    """A shared runs-table view: the experiment tag that holds it and the URL part that opens it."""

    key: str
    tag: str
    state: dict[str, Any]

    @property
    def tag_value(self) -> str:
        return json.dumps(self.state, sort_keys=True)

    def route(self, experiment_id: str) -> str:
        """The UI route (after ``#``): ``/experiments/<id>/runs?viewStateShareKey=<key>``."""
        return f"/experiments/{experiment_id}/runs?viewStateShareKey={self.key}"


def comparison_view(info: StudyRunInfo, metric_keys: Mapping[str, str]) -> ComparisonView:
    """The runs-table view comparing the study's trials: its trial runs only (filter
    ``tags.tuner.study = <study> AND tags.tuner.trial_number LIKE '%'``), sorted by the first
    objective (best first), the run name column widened, then the duration, objectives (their MLflow
    metric keys, ``metric_keys``), ``tuner.on_front``, ``tuner.outcome``, key parameters.
    Store-independent (no ids). Format: the MLflow 3 UI's shared view state (search facets and
    runs-table UI state, JSON); an older or newer UI that does not know it ignores it."""
    names = list(info.objective_names)
    columns = [f"metrics.`{metric_keys.get(name, name)}`" for name in names]
    columns += ["tags.`tuner.on_front`", "tags.`tuner.outcome`"]
    columns += [f"params.`{name}`" for name in key_parameters(info)]
    quoted = info.study_name.replace("'", "\\'")
    state: dict[str, Any] = {
        "searchFilter": f"tags.`tuner.study` = '{quoted}' AND tags.`tuner.trial_number` LIKE '%'",
        "orderByKey": columns[0] if names else "attributes.start_time",
        "orderByAsc": bool(info.directions) and info.directions[0] == "minimize",
        "selectedColumns": columns,
        "runsHiddenMode": "SHOW_ALL",
        # the run name (which carries the objectives) wide enough to read, the duration beside it
        "columnOrder": [RUN_NAME_COLUMN, DURATION_COLUMN, *columns],
        "columnWidths": {RUN_NAME_COLUMN: RUN_NAME_WIDTH_PX},
    }
    key = view_key(info.study_name)
    return ComparisonView(key, SHARED_VIEW_TAG_PREFIX + key, state)


def study_cost_lines(records: Sequence[TrialRecord], info: StudyRunInfo) -> list[str]:
    """What the study cost, in the words of ``tuner status`` (:func:`tuner.front.cost.cost_lines`): its
    device (``info.device``, else the ``tuner.device`` tag) gives the unit."""
    return cost_lines(cost_of_records(records), info.device or info.tags.get("tuner.device"), info.budget_device_hours)


def view_key(study_name: str) -> str:
    """The share key of a study's comparison view: ``tuner-<study>`` (URL- and tag-safe)."""
    return "tuner-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in study_name)


def study_description(
    records: Sequence[TrialRecord],
    info: StudyRunInfo,
    ranks: Mapping[int, int],
    compare_route: str | None,
    chosen: int | None = None,
) -> str:
    """Markdown for the parent run's overview: counts, what the study cost (:func:`study_cost_lines`), the
    link to the comparison view (a route inside the UI), the trial the export rule chooses (``chosen``, with
    the rule: :attr:`StudyRunInfo.export_rule`) and the front (run names, objectives with units, the
    device-seconds each run held, key parameters; the chosen run marked)."""
    names, directions = list(info.objective_names), list(info.directions)
    units = objective_units(names, (r.metrics for r in records))
    front = sorted(
        (r for r in records if ranks.get(r.number) == 0),
        key=lambda r: (r.values[0] if r.values else 0.0) * (-1 if directions[:1] == ["maximize"] else 1),
    )
    goals = ", ".join(metric_label(n, units[n], d) for n, d in zip(names, directions))
    lines = [
        f"**{info.study_name}**: {sum(1 for r in records if r.state != 'RUNNING')} trials, "
        f"{sum(1 for r in records if record_feasible(r))} feasible, {len(front)} on the Pareto front. "
        f"Objectives: {goals}.",
        "",
        *(f"{line}  " for line in study_cost_lines(records, info)),
        "",
    ]
    if chosen is not None:
        named = next((child_run_name(r, info, ranks) for r in records if r.number == chosen), f"t{chosen}")
        lines += [f"Chosen for export: **{named}**, by {info.export_rule.describe()}.", ""]
    if compare_route:
        lines += [f"[Compare all trials: objectives, outcome and key parameters as columns](#{compare_route})", ""]
    params = key_parameters(info)
    header = ["trial run", *(metric_label(n, units[n]) for n in names), "device-s", *params]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for record in front[:DESCRIPTION_FRONT_ROWS]:
        mark = " (chosen)" if record.number == chosen else ""
        cells = [
            child_run_name(record, info, ranks) + mark,
            *(format_number(v) for v in (record.values or ())),
            device_s_text(record.device_s),
            *(str(record.params.get(p, "")) for p in params),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if len(front) > DESCRIPTION_FRONT_ROWS:
        lines.append(f"\n... and {len(front) - DESCRIPTION_FRONT_ROWS} more: see `front.csv`.")
    return "\n".join(lines)[:7900]
