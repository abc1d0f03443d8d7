"""MLflow views of a study: one parent run per study, one child run per trial.

The Optuna storage is the source of truth; everything here can be rebuilt
from it. Logging happens on a background thread, so a slow or unreachable
tracking server never slows or stops a study: failures are counted and
reported, and nothing measured is lost (the storage has it).

Layout: experiment ``<spec name> @ <gpu type>`` (``avatar_demo @ cpu``);
parent run named after the study, tagged with the spec hash, sampler,
storage URL (no password) and host fingerprint; child runs named
``trial <n>`` with params, derived values, every available metric (units in
the name), the outcome, the reason and the slot. At the end the front is
attached to the parent run as ``front.csv``, ``front.json`` (an MLflow table)
and ``front.png``.

Default tracking URI: ``sqlite:///<cwd>/mlflow/mlflow.db`` with artifacts in
``<cwd>/mlflow/artifacts`` — never the Optuna SQLite file.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from tuner.records import TrialRecord

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient
    from optuna.trial import FrozenTrial

log = logging.getLogger("tuner.tracking")
TRACKING_ENV = "MLFLOW_TRACKING_URI"


def default_tracking_uri(base: Path | None = None) -> str:
    """``sqlite:///<base>/mlflow/mlflow.db`` (base: the working directory)."""
    root = (base or Path.cwd()).absolute() / "mlflow"
    return f"sqlite:///{root / 'mlflow.db'}"


def tracking_uri(explicit: str | None) -> str:
    """``--mlflow-uri``, else ``$MLFLOW_TRACKING_URI``, else the local store under ``mlflow/``."""
    return explicit or os.environ.get(TRACKING_ENV) or default_tracking_uri()


def artifact_root_for(uri: str) -> str | None:
    """For a local SQLite store, artifacts go beside it; servers choose their own."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").absolute().as_uri()
    return None


def metric_key(name: str, unit: str) -> str:
    """Metric names carry their unit: ``latency_p50_s`` stays, ``psnr`` + dB -> ``psnr_db``."""
    suffix = {"s": "_s", "GB": "_gb", "dB": "_db"}.get(unit, "")
    return name if not suffix or name.endswith(suffix) else f"{name}{suffix}"


@dataclass
class StudyRunInfo:
    """What the parent run needs: names, tags and the search space."""

    study_name: str
    experiment_name: str
    tags: Mapping[str, str]
    params: Mapping[str, str]
    existing_run_id: str | None = None


@dataclass
class MlflowTracker:
    """Logs a study to MLflow from a background thread. Implements the coordinator's Listener."""

    uri: str
    info: StudyRunInfo
    directions: list[str]
    objective_names: list[str]
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="tuner-mlflow", daemon=True)
        self._client: MlflowClient | None = None
        self.run_id: str | None = self.info.existing_run_id
        self._children: dict[int, str] = {}
        self._started = threading.Event()
        self._thread.start()
        self._queue.put(("start", None))

    # Listener ------------------------------------------------------------
    def on_start(self, study_name: str, done: int, total: int | None) -> None:
        pass

    def on_trial(self, trial: "FrozenTrial", done: int, total: int | None, front_size: int,
                 elapsed_s: float) -> None:
        self._queue.put(("trial", TrialRecord.from_trial(trial)))

    def on_finish(self, trials: list["FrozenTrial"], front: list["FrozenTrial"]) -> None:
        self._queue.put(("front", ([TrialRecord.from_trial(t) for t in trials],
                                   {t.number for t in front})))

    def wait_started(self, timeout_s: float = 60.0) -> str | None:
        """Block until the parent run exists (or failed); its id, or None."""
        self._started.wait(timeout_s)
        return self.run_id

    def close(self, timeout_s: float = 120.0) -> None:
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
            try:
                if kind == "start":
                    try:
                        self._start()
                    finally:
                        self._started.set()
                elif kind == "trial" and self.run_id is not None:
                    self._log_trial(payload)
                elif kind == "front" and self.run_id is not None:
                    records, front = payload
                    for record in records:
                        if record.number not in self._children and record.state != "RUNNING":
                            self._log_trial(record)
                    self._log_front(records, front)
            except Exception as error:  # noqa: BLE001 - tracking must never stop a study
                message = f"MLflow {kind} failed: {type(error).__name__}: {error}"
                log.warning(message)
                self.failures.append(message)

    def _start(self) -> None:
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(self.uri)
        experiment = self._client.get_experiment_by_name(self.info.experiment_name)
        if experiment is None:
            experiment_id = self._client.create_experiment(
                self.info.experiment_name, artifact_location=_experiment_artifacts(self.uri, self.info))
        else:
            experiment_id = experiment.experiment_id
        if self.run_id is None:
            run = self._client.create_run(experiment_id, run_name=self.info.study_name,
                                          tags={"tuner.study": self.info.study_name, **self.info.tags})
            self.run_id = run.info.run_id
            _log_batch(self._client, self.run_id, params=self.info.params)
        else:
            self._children = {int(r.data.tags["tuner.trial_number"]): r.info.run_id
                              for r in self._client.search_runs(
                                  [experiment_id], f"tags.mlflow.parentRunId = '{self.run_id}'",
                                  max_results=50000)
                              if "tuner.trial_number" in r.data.tags}
        self._experiment_id = experiment_id

    def _log_trial(self, record: TrialRecord) -> None:
        assert self._client is not None and self.run_id is not None
        if record.number in self._children:
            return
        host_tags = {k: v for k, v in self.info.tags.items()
                     if k in ("tuner.device", "tuner.gpu_type", "host.hostname", "host.gpu_name",
                              "host.driver_version", "host.torch_version", "host.cpu_model")}
        tags = {**host_tags, "mlflow.parentRunId": self.run_id, "tuner.study": self.info.study_name,
                "tuner.trial_number": str(record.number), "tuner.role": record.role,
                "tuner.outcome": record.outcome, "tuner.state": record.state}
        if record.reason:
            tags["tuner.reason"] = record.reason[:4000]
        if record.slot:
            tags["tuner.slot"] = record.slot
        if record.duplicate_of is not None:
            tags["tuner.duplicate_of"] = str(record.duplicate_of)
        run = self._client.create_run(self._experiment_id, run_name=f"trial {record.number}", tags=tags)
        params = {**{k: str(v) for k, v in record.params.items()},
                  **{f"derived.{k}": str(v) for k, v in record.derived.items()}}
        metrics: dict[str, float] = {}
        if not record.placeholder:
            for name, metric in record.metrics.items():
                if metric.get("value") is not None:
                    metrics[metric_key(name, metric.get("unit", ""))] = float(metric["value"])
        for key, value in record.constraints.items():
            metrics[f"constraint.{_safe_key(key)}"] = float(value)
        if record.duplicate_of is None:
            for key, seconds in (("worker_wall_time_s", record.wall_time_s), ("eval_time_s", record.eval_time_s)):
                if seconds is not None:
                    metrics[key] = float(seconds)
        _log_batch(self._client, run.info.run_id, params=params, metrics=metrics)
        status = "FINISHED" if record.outcome == "OK" else "FAILED"
        self._client.set_terminated(run.info.run_id, status=status)
        self._children[record.number] = run.info.run_id

    def _log_front(self, records: list[TrialRecord], front: set[int]) -> None:
        from tuner.front_report import front_csv, front_plot_png, front_table

        assert self._client is not None and self.run_id is not None
        rows = front_table(records, front, self.objective_names)
        self._client.log_text(self.run_id, front_csv(rows), "front.csv")
        self._client.log_table(self.run_id, data=_columns(rows), artifact_file="front.json")
        self._client.log_image(self.run_id, front_plot_png(records, front, self.objective_names,
                                                           self.directions), "front.png")
        _log_batch(self._client, self.run_id, metrics={"front_size": float(len(front)),
                                                       "trials": float(len(records))})


def _experiment_artifacts(uri: str, info: StudyRunInfo) -> str | None:
    root = artifact_root_for(uri)
    if root is None:
        return None
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in info.experiment_name)
    return f"{root}/{safe}"


def _safe_key(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_./ " else "_" for c in key)


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    return {k: [row.get(k) for row in rows] for k in keys}


def _log_batch(client: "MlflowClient", run_id: str, params: Mapping[str, str] | None = None,
               metrics: Mapping[str, float] | None = None) -> None:
    from mlflow.entities import Metric, Param

    stamp = int(time.time() * 1000)
    param_list = [Param(k[:250], str(v)[:6000]) for k, v in (params or {}).items()]
    metric_list = [Metric(k[:250], v, stamp, 0) for k, v in (metrics or {}).items()]
    for start in range(0, max(len(param_list), len(metric_list), 1), 100):
        client.log_batch(run_id, metrics=metric_list[start:start + 100], params=param_list[start:start + 100])
