"""``tuner sync-mlflow``: rebuild every MLflow view of a study from the Optuna storage.

After an MLflow outage, for an old study, or into another tracking store. The
result is what a study logged live shows: the same experiment, parent run
(found by its ``tuner.study`` tag, or created), exactly one complete child run per
finished trial (missing ones logged; partial ones — an outage or a killed coordinator
mid-log — and ones whose start is not the trial's — logged before runs carried the
trials' times — deleted and logged again; a second complete run of a trial deleted, the one
:func:`~tuner.tracking.writer.kept_run` chooses kept), current ranks and names on every
child, the front artifacts and the comparison view. Running it twice changes nothing but
the ranks' and metrics' timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.storage.records import StudyRecord, TrialRecord
from tuner.storage.store import record_mlflow_run
from tuner.tracking.comparison import study_span_ms, trial_times_ms
from tuner.tracking.live import prepare_http_client
from tuner.tracking.run_info import study_run_info
from tuner.tracking.views import (
    build_front_views,
    child_payload,
    rank_payload,
    rank_update,
    ranks_of,
    study_comparison_view,
)
from tuner.tracking.writer import (
    child_runs,
    delete_runs,
    ensure_comparison_view,
    ensure_experiment,
    ensure_parent_run,
    kept_run,
    log_child,
    log_front,
    update_rank,
)

TIME_TOLERANCE_MS = 1000  # a kept run starts within this of its trial (MLflow keeps ms; Optuna µs)

if TYPE_CHECKING:
    from tuner.study.studies import OpenStudy


@dataclass(frozen=True)
class SyncReport:
    """What a rebuild did."""

    experiment_id: str
    experiment_name: str
    parent_run_id: str
    logged: int
    replaced: int
    kept: int
    front_size: int
    removed: int = 0  # runs deleted beside a kept one: partial ones, second complete ones


def sync_study(opened: OpenStudy, uri: str) -> SyncReport:
    """Rebuild the MLflow views of ``opened`` in the tracking store at ``uri``."""
    from mlflow.tracking import MlflowClient

    from tuner.secrets import redact_url

    prepare_http_client(uri)
    client = MlflowClient(uri)
    info = study_run_info(opened.study, opened.spec, opened.storage_url)
    study = opened.study
    stored = StudyRecord.of(study)
    known = stored.mlflow_run_id if stored.mlflow_uri == redact_url(uri) else None
    experiment_id = ensure_experiment(client, uri, info.experiment_name)
    records = [TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)]
    started, ended = study_span_ms(records)
    parent = ensure_parent_run(client, experiment_id, info, known, start_time_ms=started)
    ensure_comparison_view(client, experiment_id, study_comparison_view(records, info))
    finished = [r for r in records if r.state != "RUNNING"]
    ranks = ranks_of(records, info.directions)
    step = len(records)
    existing = child_runs(client, experiment_id, parent)
    logged = replaced = kept = removed = 0
    for record in sorted(finished, key=lambda r: r.number):
        runs = existing.get(record.number, [])
        start_ms = trial_times_ms(record)[0]
        keep = kept_run([run for run in runs if _same_start(run.start_time_ms, start_ms)])
        if keep is not None:
            removed += delete_runs(client, [run for run in runs if run != keep])
            update_rank(client, keep.run_id, *rank_update(record, info, ranks), step)
            kept += 1
            continue
        if runs:
            delete_runs(client, runs)
            replaced += 1
        else:
            logged += 1
        tags, metrics = rank_payload(record.number, ranks)
        log_child(client, experiment_id, child_payload(record, info, parent, ranks), tags, metrics, step)
    views = build_front_views(records, info, experiment_id)
    log_front(client, parent, views, step)
    client.set_terminated(parent, status="FINISHED", end_time=ended)
    if not stored.mlflow_run_id or known is not None:
        record_mlflow_run(study, parent, redact_url(uri))
    return SyncReport(experiment_id, info.experiment_name, parent, logged, replaced, kept, len(views.front), removed)


def _same_start(run_start_ms: int | None, trial_start_ms: int | None) -> bool:
    """True when a run starts when its trial did (or the trial has no time to compare)."""
    return trial_start_ms is None or (
        run_start_ms is not None and abs(run_start_ms - trial_start_ms) <= TIME_TOLERANCE_MS
    )
