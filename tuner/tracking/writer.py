"""Writing the views of :mod:`tuner.tracking.views` to MLflow with ``MlflowClient``.

Idempotent building blocks used by the live tracker and by ``tuner
sync-mlflow``: find or create the experiment and the study's parent run, list
the child runs already there, log one child run, update ranks, log the front
artifacts, the comparison view. Times given to MLflow are ms since the epoch.

A child run is *complete* once it is terminated (FINISHED or FAILED, the trial's outcome) and
carries the tag ``tuner.logged``, the last write :func:`log_child` makes. Anything less — an
outage mid-log, a coordinator killed while it logged — is a *partial* run. :func:`child_runs`
finds every active run of each trial (paged, so no store's page size hides one);
:func:`partial_runs` and :func:`kept_run` say which to delete and which one to keep, the same
choice in every process (oldest complete run first, then the run id).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tuner.tracking.comparison import ComparisonView
from tuner.tracking.run_info import StudyRunInfo
from tuner.tracking.views import TABLE_FILES, ChildPayload, FrontViews

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

LOGGED_TAG = "tuner.logged"
SAMPLE_ARTIFACT_DIR = "sample"
LOGGED_ARTIFACTS_TAG = "mlflow.loggedArtifacts"
# The MLflow 3 UI opens an experiment of this kind on its runs table, not on the GenAI trace overview.
EXPERIMENT_KIND_TAG, TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"


def default_tracking_uri(base: Path | None = None) -> str:
    """``sqlite:///<base>/mlflow/mlflow.db`` (base: the working directory)."""
    root = (base or Path.cwd()).absolute() / "mlflow"
    return f"sqlite:///{root / 'mlflow.db'}"


def artifact_root_for(uri: str) -> str | None:
    """For a local SQLite store, artifacts go beside it; servers choose their own."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").absolute().as_uri()
    return None


def ensure_experiment(client: MlflowClient, uri: str, name: str) -> str:
    """The id of experiment ``name``, created (artifacts beside a local store) when missing; tagged as
    a model-development experiment so the MLflow UI opens it on its runs."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        if experiment.tags.get(EXPERIMENT_KIND_TAG) != TRAINING_KIND:
            client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
        return str(experiment.experiment_id)
    root = artifact_root_for(uri)
    location = None
    if root is not None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        location = f"{root}/{safe}"
    return str(client.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: TRAINING_KIND}))


def find_parent_run(client: MlflowClient, experiment_id: str, study_name: str) -> str | None:
    """The study's parent run (tag ``tuner.study``, no parent), oldest first; None if absent."""
    runs = client.search_runs(
        [experiment_id],
        f"tags.`tuner.study` = '{_quoted(study_name)}'",
        max_results=50000,
        order_by=["attributes.start_time ASC"],
    )
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return str(parents[0].info.run_id) if parents else None


def ensure_parent_run(
    client: MlflowClient,
    experiment_id: str,
    info: StudyRunInfo,
    known_run_id: str | None = None,
    start_time_ms: int | None = None,
) -> str:
    """The parent run's id: ``known_run_id`` when it exists here, else found by tag, else created
    (starting at ``start_time_ms``, e.g. the first trial's start on a rebuild; None: now).

    Tags are (re)set every time; params are logged once (MLflow params are immutable).
    """
    run_id = None
    if known_run_id:
        try:
            run = client.get_run(known_run_id)
            if run.info.experiment_id == experiment_id and run.info.lifecycle_stage == "active":
                run_id = known_run_id
        except Exception:  # noqa: BLE001 - a run id from another store: look it up by tag
            run_id = None
    run_id = run_id or find_parent_run(client, experiment_id, info.study_name)
    if run_id is None:
        run = client.create_run(experiment_id, start_time=start_time_ms, run_name=info.study_name, tags=dict(info.tags))
        run_id = str(run.info.run_id)
    else:
        log_batch(client, run_id, tags=info.tags)
    present = set(client.get_run(run_id).data.params)
    log_batch(client, run_id, params={k: v for k, v in info.params.items() if k[:250] not in present})
    return run_id


TERMINAL_STATUSES = frozenset({"FINISHED", "FAILED", "KILLED"})
PAGE_SIZE = 1000  # runs per search request while listing a parent's children


class ChildRun(NamedTuple):
    """A trial's run as found in the store."""

    run_id: str
    complete: bool  # terminated and tagged ``tuner.logged`` (its last write)
    start_time_ms: int | None


def child_runs(client: MlflowClient, experiment_id: str, parent_run_id: str) -> dict[int, list[ChildRun]]:
    """Trial number -> every active run of that trial under the parent, in :func:`kept_run`'s order
    (complete ones first, then oldest, then by run id). Runs without an integer ``tuner.trial_number``
    are not trial runs and are left out."""
    found: dict[int, list[ChildRun]] = {}
    token: str | None = None
    while True:
        page = client.search_runs(
            [experiment_id], f"tags.mlflow.parentRunId = '{parent_run_id}'", max_results=PAGE_SIZE, page_token=token
        )
        for run in page:
            number = run.data.tags.get("tuner.trial_number", "")
            if not number.isdigit():
                continue
            complete = run.data.tags.get(LOGGED_TAG) == "1" and run.info.status in TERMINAL_STATUSES
            found.setdefault(int(number), []).append(ChildRun(str(run.info.run_id), complete, run.info.start_time))
        token = page.token
        if not token:
            break
    for runs in found.values():
        runs.sort(key=lambda r: (not r.complete, r.start_time_ms if r.start_time_ms is not None else 0, r.run_id))
    return found


def kept_run(runs: Sequence[ChildRun]) -> ChildRun | None:
    """The run of a trial to keep among ``runs``: the first complete one in :func:`child_runs`' order
    (so every process chooses the same), or None when none is complete."""
    return next((run for run in runs if run.complete), None)


def partial_runs(runs: Sequence[ChildRun]) -> list[ChildRun]:
    """The runs of ``runs`` that are not complete (half-logged)."""
    return [run for run in runs if not run.complete]


def delete_runs(client: MlflowClient, runs: Sequence[ChildRun]) -> int:
    """Delete ``runs`` (MLflow's delete: gone from the UI and every search, purged by ``mlflow gc``;
    deleting a run twice is harmless). Returns how many."""
    for run in runs:
        client.delete_run(run.run_id)
    return len(runs)


def log_child(
    client: MlflowClient,
    experiment_id: str,
    payload: ChildPayload,
    rank_tags: Mapping[str, str],
    rank_metrics: Mapping[str, float],
    step: int,
) -> str:
    """Create one trial's child run with its params, metrics, rank, samples; returns its id.

    The run starts and ends when the trial did (``payload.start_time_ms`` / ``end_time_ms``), so
    its duration in the UI is the trial's. Metrics are logged at ``step`` (trials recorded when
    logged); ranks later move to newer steps.
    """
    run = client.create_run(
        experiment_id, start_time=payload.start_time_ms, run_name=payload.run_name, tags={**payload.tags, **rank_tags}
    )
    run_id = str(run.info.run_id)
    log_batch(client, run_id, params=payload.params, metrics={**payload.metrics, **rank_metrics}, step=step)
    missing = []
    for name, path in sorted(payload.samples.items()):
        if Path(path).is_file():
            client.log_artifact(run_id, path, SAMPLE_ARTIFACT_DIR)
        else:
            missing.append(name)
    client.set_terminated(run_id, status=payload.status, end_time=payload.end_time_ms)
    done = {LOGGED_TAG: "1", **({"tuner.samples_missing": ", ".join(missing)} if missing else {})}
    log_batch(client, run_id, tags=done)  # last, after the status: a run without it is incomplete
    return run_id


def update_rank(
    client: MlflowClient, run_id: str, rank_tags: Mapping[str, str], rank_metrics: Mapping[str, float], step: int
) -> None:
    """Set a child run's rank tags (a ``mlflow.runName`` among them renames the run) and log its rank
    metrics at ``step`` (trials recorded)."""
    log_batch(client, run_id, tags=rank_tags, metrics=rank_metrics, step=step)


def log_front(client: MlflowClient, run_id: str, views: FrontViews, step: int) -> None:
    """Write the front artifacts (one upload, replacing the previous ones; ``front.json`` and
    ``trials.json`` are registered as MLflow tables), the description and the summary metrics to
    the parent run."""
    with tempfile.TemporaryDirectory(prefix="tuner-front-") as folder:
        for relative, content in views.artifacts.items():
            target = Path(folder) / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        client.log_artifacts(run_id, folder)
    logged = json.loads(client.get_run(run_id).data.tags.get(LOGGED_ARTIFACTS_TAG, "[]"))
    missing = [entry for entry in ({"path": path, "type": "table"} for path in TABLE_FILES) if entry not in logged]
    tags = dict(views.tags)
    if missing:
        tags[LOGGED_ARTIFACTS_TAG] = json.dumps([*logged, *missing])
    log_batch(client, run_id, metrics=views.metrics, tags=tags, step=step)


def ensure_comparison_view(client: MlflowClient, experiment_id: str, view: ComparisonView) -> None:
    """Store the study's runs-table view as the experiment tag the MLflow UI reads for
    ``?viewStateShareKey=<key>`` (written only when it differs)."""
    experiment = client.get_experiment(experiment_id)
    if experiment.tags.get(view.tag) != view.tag_value:
        client.set_experiment_tag(experiment_id, view.tag, view.tag_value)


def log_batch(
    client: MlflowClient,
    run_id: str,
    params: Mapping[str, str] | None = None,
    metrics: Mapping[str, float] | None = None,
    tags: Mapping[str, str] | None = None,
    step: int = 0,
) -> None:
    """Params, metrics and tags in batches of 100 (MLflow's limit per call)."""
    from mlflow.entities import Metric, Param, RunTag

    stamp = int(time.time() * 1000)
    param_list = [Param(k[:250], str(v)[:6000]) for k, v in (params or {}).items()]
    metric_list = [Metric(k[:250], float(v), stamp, step) for k, v in (metrics or {}).items()]
    tag_list = [RunTag(k[:250], str(v)[:8000]) for k, v in (tags or {}).items()]
    longest = max(len(param_list), len(metric_list), len(tag_list))
    for start in range(0, longest, 100):
        client.log_batch(
            run_id,
            metrics=metric_list[start : start + 100],
            params=param_list[start : start + 100],
            tags=tag_list[start : start + 100],
        )


def _quoted(text: str) -> str:
    return text.replace("'", "\\'")
