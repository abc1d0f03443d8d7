"""``tuner sync-mlflow``: rebuild every MLflow view of a study from the Optuna storage.

After an MLflow outage, for an old study, or into another tracking store. The
result is what a study logged live shows: the same experiment, parent run
(found by its ``tuner.study`` tag, or created), one complete child run per
finished trial (missing ones logged, half-logged ones replaced), current
ranks on every child, and the front artifacts. Running it twice changes
nothing but the ranks' and metrics' timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.study.records import TrialRecord
from tuner.tracking.live import prepare_http_client
from tuner.tracking.views import build_front_views, child_payload, rank_payload, ranks_of, study_run_info
from tuner.tracking.writer import child_runs, ensure_experiment, ensure_parent_run, log_child, log_front, update_rank

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


def sync_study(opened: "OpenStudy", uri: str) -> SyncReport:
    """Rebuild the MLflow views of ``opened`` in the tracking store at ``uri``."""
    from mlflow.tracking import MlflowClient

    from tuner.secrets import redact_url

    prepare_http_client(uri)
    client = MlflowClient(uri)
    info = study_run_info(opened)
    study = opened.study
    attrs = study.user_attrs
    known = attrs.get("mlflow_run_id") if attrs.get("mlflow_uri") == redact_url(uri) else None
    experiment_id = ensure_experiment(client, uri, info.experiment_name)
    parent = ensure_parent_run(client, experiment_id, info, known)
    records = [TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)]
    finished = [r for r in records if r.state != "RUNNING"]
    ranks = ranks_of(records, info.directions)
    step = len(records)
    existing = child_runs(client, experiment_id, parent)
    logged = replaced = kept = 0
    for record in sorted(finished, key=lambda r: r.number):
        tags, metrics = rank_payload(record.number, ranks)
        run = existing.get(record.number)
        if run is not None and run[1]:
            update_rank(client, run[0], tags, metrics, step)
            kept += 1
            continue
        if run is not None:
            client.delete_run(run[0])
            replaced += 1
        else:
            logged += 1
        log_child(client, experiment_id, child_payload(record, info, parent), tags, metrics, step)
    views = build_front_views(records, info)
    log_front(client, parent, views, step)
    client.set_terminated(parent, status="FINISHED")
    if not attrs.get("mlflow_run_id") or known is not None:
        study.set_user_attr("mlflow_run_id", parent)
        study.set_user_attr("mlflow_uri", redact_url(uri))
    return SyncReport(experiment_id, info.experiment_name, parent, logged, replaced, kept, len(views.front))
