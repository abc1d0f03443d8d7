"""The reference output as an MLflow artifact: how it reaches hosts without a shared file system.

:class:`MlflowReferenceStore` implements :class:`tuner.study.reference.ReferenceStore`.

Where it goes. ``publish`` logs the file to a dedicated run in the study's experiment
(``<spec name> @ <gpu type>``), named ``<study> reference output`` and tagged
``tuner.reference_of = <study>``, ``tuner.reference_trial = <n>``, ``tuner.reference_sha256``,
``tuner.host``; the file is its artifact ``reference/<file name>``. A dedicated run rather
than the study's parent run because (1) the parent run is the live tracker's, created on
its background thread — a second writer could race it into two parents; (2) ``tuner
sync-mlflow`` rebuilds the parent and trial runs from the storage alone, so a rebuild
still equals the live log (the reference output is not in the storage); (3) it works
whether or not this invocation logs the study live. It has no ``tuner.study`` tag, so
it is never mistaken for the study's parent run.

How it travels. With ``mlflow server --artifacts-destination DIR_OR_S3`` (proxied
artifacts, the default) the run's artifact URI is ``mlflow-artifacts:/...``: the upload
and every download go through the tracking server's HTTP API — no shared file system and
no storage credentials on the workers. ``reference_output_uri`` holds that URI (never a
password: MLflow's artifact URIs carry none, and it is redacted anyway).

``fetch`` downloads at most once per destination: a verified copy already there (or the
reference trial's own file on its own host) is used as it is; a download lands in a
temporary folder beside the destination, is checked against ``reference_output_sha256``
and only then renamed into place (atomic: a reader never sees half a file; two workers
on one host may both download, the last rename wins, both copies are verified).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.runner.provenance import sha256_file
from tuner.storage.attributes import REFERENCE_OUTPUT_RUN_ID
from tuner.study.reference import (
    PUBLISH_ERROR_ATTR,
    SHA256_ATTR,
    URI_ATTR,
    local_attributes,
    missing_reason,
    short,
    verified_local,
)
from tuner.tracking.live import prepare_http_client
from tuner.tracking.run_info import experiment_name
from tuner.tracking.writer import ensure_experiment

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

RUN_ID_ATTR = REFERENCE_OUTPUT_RUN_ID
ARTIFACT_DIR = "reference"
REFERENCE_OF_TAG = "tuner.reference_of"
REFERENCE_TRIAL_TAG = "tuner.reference_trial"
REFERENCE_SHA_TAG = "tuner.reference_sha256"
QUIET_ENV = {
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",  # "View run ... at: <URI with its password>"
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}  # a tqdm bar across the live display


@dataclass
class MlflowReferenceStore:
    """The reference output through the MLflow tracking store at ``tracking_uri``.

    ``experiment_name``: the study's experiment (:meth:`for_study` computes it).
    ``downloads`` counts the files this store downloaded (a verified local copy costs none).
    """

    tracking_uri: str
    experiment_name: str
    downloads: int = field(default=0, init=False)

    @classmethod
    def for_study(cls, tracking_uri: str, spec_name: str, gpu_type: str | None) -> MlflowReferenceStore:
        """The store of a study of the spec ``spec_name`` on ``gpu_type`` (None: a CPU study): its experiment is
        ``<spec name> @ <gpu type>``, as the live tracker's."""
        return cls(tracking_uri, experiment_name(spec_name, str(gpu_type if gpu_type is not None else "cpu")))

    def _client(self) -> MlflowClient:
        from mlflow.tracking import MlflowClient

        _prepare(self.tracking_uri)
        return MlflowClient(self.tracking_uri)

    # ------------------------------------------------------------- publish
    def publish(self, study_name: str, trial_number: int, path: Path) -> dict[str, str]:
        """Log ``path`` as ``reference/<name>`` of the study's reference run; the trial attributes.

        Returns the SHA-256, the artifact URI, the run id and the size in bytes. When MLflow
        fails, the local attributes (``file://`` URI) and ``reference_output_publish_error``
        (redacted, one line): the study goes on; other hosts then say why they lack it.
        """
        from tuner.secrets import redact_text, redact_url

        attrs = local_attributes(path)
        try:
            client = self._client()
            experiment_id = ensure_experiment(client, self.tracking_uri, self.experiment_name)
            run_id = self._reference_run(client, experiment_id, study_name, trial_number, attrs[SHA256_ATTR])
            client.log_artifact(run_id, str(path), ARTIFACT_DIR)
            client.set_terminated(run_id, status="FINISHED")
            artifact_uri = str(client.get_run(run_id).info.artifact_uri).rstrip("/")
        except Exception as error:  # noqa: BLE001 - tracking never stops a study
            text = redact_text(f"{type(error).__name__}: {error}")
            attrs[PUBLISH_ERROR_ATTR] = " ".join(text.split())[:500]
            return attrs
        attrs[URI_ATTR] = redact_url(f"{artifact_uri}/{ARTIFACT_DIR}/{path.name}")
        attrs[RUN_ID_ATTR] = run_id
        return attrs

    def _reference_run(
        self, client: MlflowClient, experiment_id: str, study_name: str, trial_number: int, sha: str
    ) -> str:
        """The id of the study's reference run for ``trial_number``, created when missing."""
        # study names are [A-Za-z0-9_.-] (tuner.study.studies): nothing to quote
        query = f"tags.`{REFERENCE_OF_TAG}` = '{study_name}' and tags.`{REFERENCE_TRIAL_TAG}` = '{trial_number}'"
        runs = client.search_runs([experiment_id], query, max_results=1, order_by=["attributes.start_time ASC"])
        tags = {
            REFERENCE_OF_TAG: study_name,
            REFERENCE_TRIAL_TAG: str(trial_number),
            REFERENCE_SHA_TAG: sha,
            "tuner.host": socket.gethostname(),
        }
        if runs:
            run_id = str(runs[0].info.run_id)
            for key, value in tags.items():
                client.set_tag(run_id, key, value)
            return run_id
        return str(client.create_run(experiment_id, run_name=f"{study_name} reference output", tags=tags).info.run_id)

    # --------------------------------------------------------------- fetch
    def fetch(self, attrs: Mapping[str, Any], destination: Path) -> tuple[Path | None, str | None]:
        """A local copy of the reference output whose SHA-256 is the recorded one; else None and why.

        Order: a verified copy at ``destination`` or the trial's own path (no download);
        else one download of ``reference_output_uri`` into ``destination`` (renamed into
        place only once verified). A trial stored before hashes existed is used as before:
        its local file, unverified, or nothing.
        """
        path, mismatch = verified_local(attrs, destination)
        if path is not None:
            return path, None
        expected, uri = attrs.get(SHA256_ATTR), str(attrs.get(URI_ATTR) or "")
        if expected is None or not uri or (uri.startswith("file:") and not attrs.get(RUN_ID_ATTR)):
            return None, mismatch or missing_reason(attrs)
        return self._download(uri, str(expected), destination)

    def _download(self, uri: str, expected: str, destination: Path) -> tuple[Path | None, str | None]:
        from mlflow.artifacts import download_artifacts

        from tuner.secrets import redact_text, redact_url

        destination.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=".reference-download-", dir=destination.parent))
        try:
            _prepare(self.tracking_uri)
            try:
                self.downloads += 1
                local = Path(download_artifacts(artifact_uri=uri, dst_path=str(folder), tracking_uri=self.tracking_uri))
            except Exception as error:  # noqa: BLE001 - an unreachable store is a reason, not a crash
                text = " ".join(redact_text(f"{type(error).__name__}: {error}").split())[:300]
                return None, f"reference output could not be downloaded from {redact_url(uri)}: {text}"
            found = sha256_file(local)
            if found != expected:
                return None, (
                    f"reference output hash mismatch: {redact_url(uri)} has sha256 {short(found)}…, "
                    f"the reference trial recorded {short(expected)}… (not used)"
                )
            os.replace(local, destination)
            return destination, None
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _prepare(uri: str) -> None:
    """HTTP timeouts as the live tracker's, and MLflow kept off this process's stdout / stderr
    (unless the user set these variables)."""
    prepare_http_client(uri)
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
