"""MLflow views of a running study, logged live from a background thread.

The Optuna storage is the source of truth; everything here can be rebuilt
from it with ``tuner sync-mlflow`` (:mod:`tuner.tracking.sync`), which uses the
same views (:mod:`tuner.tracking.views`) and writes (:mod:`tuner.tracking.writer`).
A slow or unreachable tracking server never slows or stops a study: failures
are counted and reported; after three in a row the tracker stops trying for
this invocation and says to rebuild with ``tuner sync-mlflow``.

Layout: experiment ``<spec name> @ <gpu type>``; a parent run named after the
study (tags, search space, front artifacts, the cost metrics ``cost_*_device_h`` and
children's ranks refreshed at most every ``refresh_s`` seconds — ``$TUNER_MLFLOW_REFRESH_S``, default 30 — while
the study runs, and once at its end); a child run per trial, named after what it
gave (``t12 · 1.32 s · PSNR 31.2 dB · front``, renamed when it joins or leaves the
front) and lasting as long as the trial did (params, metrics with units in their
names, ``device_s``, outcome, ``pareto_rank`` / ``on_front`` kept current, constraint violations,
samples); an experiment tag holding the runs-table view that compares the trials.

A killed invocation can leave a trial's run half-logged (:mod:`tuner.tracking.writer`: *partial*).
At its end the tracker looks at every finished trial's runs as the store holds them: it deletes
the partial ones and logs each finished trial that has no complete run (one found complete is
kept, whoever logged it). It never deletes a complete run — another coordinator of a fleet may
have logged it; a second complete run is ``tuner sync-mlflow``'s to remove.

Without MLflow installed (:func:`mlflow_missing`; a folder ``mlflow/`` — the default store beside a
checkout — imports as an empty namespace package and is not it) the study runs untracked after one line.

Default tracking URI: ``sqlite:///<cwd>/mlflow/mlflow.db`` with artifacts in
``<cwd>/mlflow/artifacts`` — never the Optuna SQLite file.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.storage.records import TrialRecord
from tuner.tracking.comparison import study_span_ms
from tuner.tracking.run_info import StudyRunInfo
from tuner.tracking.views import (
    build_front_views,
    child_payload,
    metric_key,
    rank_payload,
    rank_update,
    ranks_of,
    study_comparison_view,
)
from tuner.tracking.writer import (
    artifact_root_for,
    child_runs,
    default_tracking_uri,
    delete_runs,
    ensure_comparison_view,
    ensure_experiment,
    ensure_parent_run,
    kept_run,
    log_child,
    log_front,
    partial_runs,
    update_rank,
)

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient
    from optuna.trial import FrozenTrial

__all__ = [
    "MlflowTracker",
    "tracking_uri",
    "default_tracking_uri",
    "artifact_root_for",
    "metric_key",
    "prepare_http_client",
    "mlflow_missing",
]

log = logging.getLogger("tuner.tracking")
TRACKING_ENV = "MLFLOW_TRACKING_URI"
GIVE_UP_AFTER = 3
REFRESH_ENV = "TUNER_MLFLOW_REFRESH_S"  # seconds between front refreshes while a study runs (default 30)


def tracking_uri(explicit: str | None) -> str:
    """``--mlflow-uri``, else ``$MLFLOW_TRACKING_URI``, else the local store under ``mlflow/``.

    Its secrets are remembered (:func:`tuner.secrets.remember_url`): no later error text shows them.
    """
    from tuner.secrets import remember_url

    uri = explicit or os.environ.get(TRACKING_ENV) or default_tracking_uri()
    remember_url(uri)
    return uri


def mlflow_missing(needed_by: str) -> str | None:
    """One line naming the missing package and its install command when MLflow is not installed
    (:class:`tuner.spec.extras.MissingPackage`), None when it is. Imports nothing heavy."""
    from tuner.spec.extras import missing_package

    missing = missing_package("mlflow", needed_by)
    return None if missing is None else str(missing)


def prepare_http_client(uri: str) -> None:
    """For an HTTP server: one retry and a 15 s timeout per request (MLflow's default back-off
    retries for minutes), unless the user set these variables."""
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # it prints the URI, password too


@dataclass
class MlflowTracker:
    """Logs a study to MLflow from a background thread. Implements the coordinator's Listener.

    ``known_records``: the study's trials when the invocation starts (a resume),
    so ranks and the front cover the whole study; ``known_run_id``: the parent
    run recorded with the study, reused when it exists in this store.
    """

    uri: str
    info: StudyRunInfo
    known_records: list[TrialRecord] = field(default_factory=list)
    known_run_id: str | None = None
    refresh_s: float = field(default_factory=lambda: float(os.environ.get(REFRESH_ENV) or 30.0))
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        prepare_http_client(self.uri)
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="tuner-mlflow", daemon=True)
        self._client: MlflowClient | None = None
        self.run_id: str | None = None
        self.gave_up = False
        self._records: dict[int, TrialRecord] = {r.number: r for r in self.known_records}
        self._children: dict[int, str] = {}
        self._ranks: dict[int, int] = {}
        self._last_refresh = 0.0
        self._in_a_row = 0
        self._started = threading.Event()
        self._thread.start()
        self._queue.put(("start", None))

    # Listener ------------------------------------------------------------
    def on_start(
        self,
        study_name: str,
        done: int,
        total: int | None,
        wall_left_s: float | None = None,
        objectives: Sequence[str] = (),
    ) -> None:
        pass

    def on_trial(self, trial: FrozenTrial, done: int, total: int | None, front_size: int, elapsed_s: float) -> None:
        self._queue.put(("trial", TrialRecord.from_trial(trial)))

    def on_finish(self, trials: list[FrozenTrial], front: list[FrozenTrial]) -> None:
        self._queue.put(("finish", [TrialRecord.from_trial(t) for t in trials]))

    def on_trial_start(self, number: int, role: str, slot: str, timeout_s: float) -> None:
        pass  # runs are logged once a trial is told

    def on_tick(self, elapsed_s: float) -> None:
        pass

    def on_trial_dropped(self, number: int, reason: str) -> None:
        pass  # nothing of it was told: the trial's run is logged by whoever recorded it

    def wait_started(self, timeout_s: float = 60.0) -> str | None:
        """Block until the parent run exists (or failed); its id, or None."""
        self._started.wait(timeout_s)
        return self.run_id

    def close(self, timeout_s: float = 180.0) -> None:
        """Wait for queued logging to finish (at most ``timeout_s``)."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.failures.append(f"MLflow logging did not finish within {timeout_s:g} s")

    # worker thread --------------------------------------------------------
    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            kind, payload = item
            if self.gave_up or (kind != "start" and self.run_id is None):
                continue
            try:
                if kind == "start":
                    try:
                        self._start()
                    finally:
                        self._started.set()
                elif kind == "trial":
                    self._trial(payload)
                elif kind == "finish":
                    self._finish(payload)
                self._in_a_row = 0
            except Exception as error:  # noqa: BLE001 - tracking must never stop a study
                self._in_a_row += 1
                message = f"MLflow {kind} failed: {type(error).__name__}: {str(error)[:300]}"
                log.warning(message)
                self.failures.append(message)
                if self._in_a_row >= GIVE_UP_AFTER:
                    self.gave_up = True
                    self.failures.append(
                        f"MLflow failed {GIVE_UP_AFTER} times in a row: stopped logging; the "
                        f"storage has everything — rebuild with 'tuner sync-mlflow "
                        f"{self.info.study_name}'"
                    )

    def _start(self) -> None:
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(self.uri)
        self._experiment_id = ensure_experiment(self._client, self.uri, self.info.experiment_name)
        run_id = ensure_parent_run(self._client, self._experiment_id, self.info, self.known_run_id)
        ensure_comparison_view(
            self._client, self._experiment_id, study_comparison_view(list(self._records.values()), self.info)
        )
        self._children = {
            n: kept.run_id
            for n, runs in child_runs(self._client, self._experiment_id, run_id).items()
            if (kept := kept_run(runs)) is not None
        }
        self._ranks = {}  # ranks of children from earlier invocations are refreshed at the first refresh
        self._last_refresh = time.monotonic()
        self.run_id = run_id

    def _trial(self, record: TrialRecord) -> None:
        """Log the trial's child run with its rank now; other children's ranks move at the next refresh."""
        assert self._client is not None and self.run_id is not None
        self._records[record.number] = record
        step = len(self._records)
        if record.number not in self._children and record.state != "RUNNING":
            ranks = ranks_of(list(self._records.values()), self.info.directions)
            tags, metrics = rank_payload(record.number, ranks)
            self._children[record.number] = log_child(
                self._client,
                self._experiment_id,
                child_payload(record, self.info, self.run_id, ranks),
                tags,
                metrics,
                step,
            )
            if record.number in ranks:
                self._ranks[record.number] = ranks[record.number]
        if self._queue.empty() and time.monotonic() - self._last_refresh >= self.refresh_s:
            self._refresh(step)

    def _finish(self, records: list[TrialRecord]) -> None:
        assert self._client is not None and self.run_id is not None
        for record in records:
            self._records[record.number] = record
        step = len(self._records)
        ranks = ranks_of(list(self._records.values()), self.info.directions)
        existing = child_runs(self._client, self._experiment_id, self.run_id)  # as other processes left them
        for record in sorted(self._records.values(), key=lambda r: r.number):
            if record.state == "RUNNING":
                continue
            runs = existing.get(record.number, [])
            delete_runs(self._client, partial_runs(runs))
            complete = kept_run(runs)
            if complete is not None:
                if self._children.get(record.number) not in {run.run_id for run in runs if run.complete}:
                    self._children[record.number] = complete.run_id
                    self._ranks.pop(record.number, None)  # its rank and name are brought up to date below
            else:
                tags, metrics = rank_payload(record.number, ranks)
                self._children[record.number] = log_child(
                    self._client,
                    self._experiment_id,
                    child_payload(record, self.info, self.run_id, ranks),
                    tags,
                    metrics,
                    step,
                )
                if record.number in ranks:
                    self._ranks[record.number] = ranks[record.number]
        self._refresh(step)
        self._client.set_terminated(self.run_id, status="FINISHED", end_time=study_span_ms(self._records.values())[1])

    def _refresh(self, step: int) -> None:
        """Bring every child's rank and name up to date (only those whose rank changed) and rebuild the
        front artifacts."""
        assert self._client is not None
        ranks = ranks_of(list(self._records.values()), self.info.directions)
        for number, run_id in sorted(self._children.items()):
            if ranks.get(number) != self._ranks.get(number) and number in self._records:
                update_rank(self._client, run_id, *rank_update(self._records[number], self.info, ranks), step=step)
        self._ranks = {n: r for n, r in ranks.items() if n in self._children}
        self._refresh_front(step)

    def _refresh_front(self, step: int) -> None:
        assert self._client is not None and self.run_id is not None
        records = list(self._records.values())
        log_front(self._client, self.run_id, build_front_views(records, self.info, self._experiment_id), step)
        # the view names metric keys, whose units the first measured trials may declare (adapters)
        ensure_comparison_view(self._client, self._experiment_id, study_comparison_view(records, self.info))
        self._last_refresh = time.monotonic()
