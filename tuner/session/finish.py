"""Finishing a run: close the tracker, say what happened (and what it cost), export the best setting, refresh
the dashboard view.

The export (``<home>/<study>/best.yaml``, the trial the spec's export rule chooses, by
default the knee of the front: :func:`tuner.ship.export.choose`) and the optuna-dashboard
view are views of the storage: a failure of either is one warning, never the study's.
The closing front (:func:`front_summary`) marks the same trial.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.secrets import redact_text, redact_url
from tuner.session.events import FrontSummary, Notice, SessionListener
from tuner.storage.records import StudyRecord, TrialRecord
from tuner.study.listeners import Summary
from tuner.study.studies import study_directory

if TYPE_CHECKING:
    import optuna

    from tuner.front.choice import Choice
    from tuner.ship.export import ExportError
    from tuner.spec.models import StudySpec
    from tuner.tracking.live import MlflowTracker

MLFLOW_CLOSE_TIMEOUT_S = 20.0  # at exit, wait at most this long for MLflow; the views can be rebuilt
FINISH_RESERVE_S = 10.0
"""Of a wall-time budget, the seconds kept for what follows the last trial (MLflow's last writes, the summary,
the export, the dashboard view): about what the demo's finish takes on a loaded 2-core machine."""
FINISH_RESERVE_SHARE = 0.1  # never more than this share of the budget (a budget of seconds, in tests)


def finish_reserve_s(wall_time_s: float | None) -> float:
    """Seconds of a ``wall_time_s`` budget kept for the finish: :data:`FINISH_RESERVE_S`, at most
    :data:`FINISH_RESERVE_SHARE` of it (0 without a budget)."""
    return 0.0 if not wall_time_s else min(FINISH_RESERVE_S, FINISH_RESERVE_SHARE * wall_time_s)


def close_tracker(tracker: MlflowTracker, study_name: str, listener: SessionListener) -> None:
    """Let the tracker finish (at most :data:`MLFLOW_CLOSE_TIMEOUT_S`); each of its failures is a line."""
    tracker.close(timeout_s=MLFLOW_CLOSE_TIMEOUT_S)
    for failure in tracker.failures:
        listener.on_notice(Notice("mlflow_failure", failure))
    if tracker.failures:
        listener.on_notice(
            Notice(
                "mlflow_incomplete",
                f"MLflow views may be incomplete: rebuild them from the storage with 'tuner sync-mlflow {study_name}'",
            )
        )


def choose_export(study: optuna.Study) -> Choice | ExportError:
    """The trial the study's export rule chooses (:func:`tuner.ship.export.choose`), or why none can be:
    chosen once per run, for the closing front's mark and for ``best.yaml``."""
    from tuner.ship.export import ExportError, choose

    try:
        return choose(study)
    except ExportError as error:
        return error


def say_summary(
    study: optuna.Study, spec: StudySpec, summary: Summary, listener: SessionListener, chosen: Choice | ExportError
) -> None:
    """Why the run stopped early or was interrupted (when it was), the counts, the cost (:func:`say_cost`)
    and the Pareto front, ``chosen`` (:func:`choose_export`) marked."""
    study_name = study.study_name
    if summary.failure is not None:
        listener.on_notice(Notice.emphasised("study_stopped", "", "study stopped:", f" {summary.failure}"))
    if summary.interrupted:
        listener.on_notice(
            Notice(
                "interrupted",
                f"interrupted: trials in flight that had not finished were recorded "
                f"INTERRUPTED and queued again; continue with 'tuner resume {study_name}'",
            )
        )
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items()))
    listener.on_notice(
        Notice.emphasised(
            "summary",
            "study ",
            summary.study_name,
            f": {summary.measured} measured ({summary.ran} this run), "
            f"{summary.recorded} trials recorded ({outcomes}); stopped: {summary.stopped_because}",
        )
    )
    records = [TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)]
    say_cost(StudyRecord.of(study), records, listener)
    listener.on_front(front_summary(spec, records, summary.front, chosen))


def front_summary(
    spec: StudySpec, records: Sequence[TrialRecord], front: Sequence[int], chosen: Choice | ExportError
) -> FrontSummary:
    """The closing front of a study of ``spec``: the trials numbered ``front`` among ``records`` (best first on
    the first objective), the trial its export rule chooses marked (none when nothing can be chosen), its
    measured baseline and reference, speed-ups on the first objective measured in seconds."""
    from tuner.front.choice import Choice
    from tuner.front.headline import headline, measured_roles
    from tuner.spec.metrics import objective_units

    names, directions = spec.objective_names, [o.direction for o in spec.objectives]
    by_number = {r.number: r for r in records}
    sign = -1.0 if directions[0] == "maximize" else 1.0
    shown = sorted(
        (by_number[n] for n in front if n in by_number), key=lambda r: (sign * (r.values or (0.0,))[0], r.number)
    )
    units = objective_units(names, (r.metrics for r in records))
    roles = measured_roles(records)
    speed = next((n for n in names if units.get(n) == "s"), None)
    if isinstance(chosen, Choice):
        number, rule, record = chosen.record.number, chosen.rule, chosen.record
        said = headline(record, roles.get("baseline"), roles.get("reference"), chosen.policy, speed)
    else:
        number, rule, record, said = None, None, None, None
    return FrontSummary(
        tuple(names),
        tuple(directions),
        units,
        tuple(shown),
        number,
        rule,
        roles.get("baseline"),
        roles.get("reference"),
        speed,
        record,
        said,
    )


def say_cost(stored: StudyRecord, records: Sequence[TrialRecord], listener: SessionListener) -> None:
    """What the study (``stored``, its ``records``) has cost so far (every run, every host): device-hours used / wasted / avoided, the
    device-seconds they add up to, the budget when set, and how ``avoided`` was estimated
    (:func:`tuner.front.cost.cost_lines`); ``summary`` notices."""
    from tuner.front.cost import budget_hours, cost_lines, cost_of_records

    lines = cost_lines(cost_of_records(records), stored.device, budget_hours(stored.budget_device_hours))
    for line in lines:
        listener.on_notice(Notice("summary", line))


def export_best(
    study: optuna.Study, storage_url: str, home: Path, listener: SessionListener, chosen: Choice | ExportError
) -> Path | None:
    """Export the trial the study's export rule chooses (:func:`tuner.ship.export.choose`; a noisy one replaced
    by a stable one) to ``<home>/<study>/best.yaml``; its path, or None (one warning) when nothing can be
    chosen. The notice names the rule."""
    from tuner.ship.export import ExportError, build_config, write_config

    try:
        if isinstance(chosen, ExportError):
            raise chosen
        document = build_config(
            study,
            chosen.record,
            storage_url,
            chosen.policy,
            chosen.profile,
            replaced_noisy=chosen.replaced.number if chosen.replaced else None,
            rule=chosen.rule,
        )
        path = write_config(document, study_directory(home, study.study_name) / "best.yaml")
    except ExportError as error:
        listener.on_notice(Notice("nothing_exported", f"nothing exported: {error}"))
        return None
    replaced = f" (stable, in place of noisy trial {chosen.replaced.number})" if chosen.replaced else ""
    listener.on_notice(
        Notice("exported", f"chosen by {chosen.rule}: trial {chosen.record.number}{replaced} -> exported to {path}")
    )
    for warning in document.get("warnings") or []:
        listener.on_notice(Notice("export_warning", f"warning: {warning}"))
    return path


def refresh_dashboard_view(storage_url: str, study_name: str, home: Path, listener: SessionListener) -> None:
    """Bring the optuna-dashboard view of the study ``study_name`` in ``storage_url`` (:mod:`tuner.tracking.dashboard`, ``<home>/dashboard.db``)
    up to date; a failure is one warning, never the study's (the view is rebuilt by ``tuner dashboard``)."""
    from tuner.tracking.dashboard import default_view_url, refresh_view

    try:
        refresh_view(storage_url, study_name, default_view_url(home))
    except Exception as error:  # noqa: BLE001 - a view never fails the study
        listener.on_notice(
            Notice(
                "dashboard_stale",
                f"dashboard view not refreshed ({type(error).__name__}: "
                f"{redact_text(str(error))[:200]}): rebuild it with 'tuner dashboard "
                f"{study_name} --refresh-only'",
            )
        )


def say_where(name: str, storage_url: str, tracker: MlflowTracker | None, listener: SessionListener) -> None:
    """Where to look next for the study ``name``: the MLflow run (when tracked) and the storage."""
    if tracker is not None and tracker.run_id is not None:
        listener.on_notice(
            Notice(
                "mlflow_run",
                f"MLflow: {redact_url(tracker.uri)} — experiment "
                f"'{tracker.info.experiment_name}', run {tracker.run_id} (browse with: tuner ui "
                f"{name})",
            )
        )
    listener.on_notice(Notice("storage", f"storage: {redact_url(storage_url)} — inspect with 'tuner status {name}'"))
