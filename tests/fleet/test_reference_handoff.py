"""The reference output between hosts: stored once, fetched once per host, checked by hash.

Units of :mod:`tuner.study.reference` (the same-host store, the fingerprint note), then
:class:`tuner.tracking.reference_artifact.MlflowReferenceStore` against a real ``mlflow server``
with proxied artifacts (``--artifacts-destination``): published from one "host" (folder A),
fetched into another (folder B) after A's file is gone, a tampered artifact refused.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tuner.host import free_port
from tuner.runner.provenance import sha256_file
from tuner.study.reference import LocalReferenceStore, fingerprint_difference, reference_fingerprint
from tuner.testing.mlflow_server import MlflowServer, running_mlflow_server
from tuner.tracking.reference_artifact import ARTIFACT_DIR, RUN_ID_ATTR, MlflowReferenceStore

NAME = "reference_output.npz"
EXPERIMENT = "fake_demo @ cpu"


def reference_file(folder: Path, size: int = 300_000) -> Path:
    """A reference output as the coordinator saves it: ``<home>/<study>/reference_output.npz``."""
    path = folder / "handoff" / NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


# ------------------------------------------------------------------------ units
def test_sha256_file_is_the_hash_of_the_bytes(tmp_path: Path) -> None:
    path = reference_file(tmp_path, size=3 * (1 << 20) + 7)  # more than one read chunk
    assert sha256_file(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_local_store_uses_the_file_only_when_its_hash_matches(tmp_path: Path) -> None:
    store = LocalReferenceStore()
    path = reference_file(tmp_path)
    attrs = {**store.publish("handoff", 0, path), "reference_output": str(path)}
    assert attrs["reference_output_sha256"] == sha256_file(path)
    assert attrs["reference_output_uri"] == path.absolute().as_uri()
    assert store.fetch(attrs, path) == (path, None)
    assert store.fetch(attrs, tmp_path / "elsewhere" / NAME) == (path, None), "the trial's own path is used"

    path.write_bytes(b"changed")
    found, reason = store.fetch(attrs, path)
    assert found is None and reason is not None and reason.startswith("reference output hash mismatch"), reason

    path.unlink()
    found, reason = store.fetch(attrs, path)
    assert found is None and reason is not None and "not on this host" in reason, reason
    assert store.fetch({}, path) == (None, "no reference output: the reference trial recorded none")


def test_local_store_keeps_an_unhashed_reference_from_before(tmp_path: Path) -> None:
    path = reference_file(tmp_path)
    assert LocalReferenceStore().fetch({"reference_output": str(path)}, path) == (path, None)


def test_fingerprint_difference_names_gpu_driver_and_torch() -> None:
    reference = {"gpu_type": "NVIDIA A100", "driver_version": "535.1", "torch_version": "2.13.0", "hostname": "a"}
    here = {"gpu_type": "NVIDIA H200", "driver_version": "550.54", "torch_version": "2.14.1", "hostname": "b"}
    assert fingerprint_difference(reference, here) == (
        "this host differs from the reference's: gpu NVIDIA H200 vs NVIDIA A100, driver 550.54 vs 535.1, "
        "torch 2.14.1 vs 2.13.0"
    )
    assert fingerprint_difference(reference, {**reference, "hostname": "b"}) is None, "a host name is no difference"
    assert fingerprint_difference(reference, {**reference, "torch_version": "2.14.1"}) == (
        "this host differs from the reference's: torch 2.14.1 vs 2.13.0"
    )
    cpu = {"gpu_type": "cpu", "driver_version": "unavailable (NVML: no driver)", "torch_version": "2.14.1"}
    assert fingerprint_difference(cpu, {**cpu, "driver_version": "550.54"}) is None, "unknown facts are not compared"
    assert fingerprint_difference({}, here) is None and fingerprint_difference(here, {}) is None


def test_reference_fingerprint_prefers_the_trials_own() -> None:
    own, study = {"fingerprint": {"gpu_type": "A"}}, {"fingerprint": {"gpu_type": "B"}}
    assert reference_fingerprint(own, study) == {"gpu_type": "A"}
    assert reference_fingerprint({}, study) == {"gpu_type": "B"}
    assert reference_fingerprint({}, {}) == {}


# ------------------------------------------------------------ a real MLflow server
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    with running_mlflow_server(tmp_path_factory.mktemp("mlflow-handoff")) as running:
        yield running


@pytest.mark.slow
def test_published_on_one_host_fetched_once_on_another_tampering_refused(server: MlflowServer, tmp_path: Path) -> None:
    host_a, host_b, host_c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    original = reference_file(host_a)
    expected = sha256_file(original)
    attrs: dict[str, str] = {
        **MlflowReferenceStore(server.url, EXPERIMENT).publish("handoff", 0, original),
        "reference_output": str(original),
    }  # the coordinator stores the local path too
    assert attrs["reference_output_sha256"] == expected
    assert attrs["reference_output_uri"].startswith("mlflow-artifacts:/"), "proxied: it goes through the server"
    assert attrs["reference_output_uri"].endswith(f"/{ARTIFACT_DIR}/{NAME}")
    stored = list(server.artifacts.rglob(NAME))
    assert len(stored) == 1 and sha256_file(stored[0]) == expected, "the artifact lies in the artifacts destination"
    original.unlink()  # no shared file system: host B never sees A's file

    on_b = MlflowReferenceStore(server.url, EXPERIMENT)
    destination = host_b / "handoff" / NAME
    assert on_b.fetch(attrs, destination) == (destination, None)
    assert sha256_file(destination) == expected and on_b.downloads == 1
    assert on_b.fetch(attrs, destination) == (destination, None)
    assert on_b.downloads == 1, "the second fetch uses the verified local copy"
    assert sorted(p.name for p in destination.parent.iterdir()) == [NAME], "no temporary download is left"

    stored[0].write_bytes(b"tampered" + stored[0].read_bytes()[8:])
    on_c = MlflowReferenceStore(server.url, EXPERIMENT)
    found, reason = on_c.fetch(attrs, host_c / "handoff" / NAME)
    assert found is None and on_c.downloads == 1
    assert reason is not None and reason.startswith("reference output hash mismatch"), reason
    assert not (host_c / "handoff" / NAME).exists() and list((host_c / "handoff").iterdir()) == []

    destination.write_bytes(b"corrupted locally")  # B's copy damaged: fetched again, and refused (tampered)
    found, reason = on_b.fetch(attrs, destination)
    assert found is None and on_b.downloads == 2 and reason is not None and "hash mismatch" in reason


@pytest.mark.slow
def test_republishing_reuses_the_reference_run(server: MlflowServer, tmp_path: Path) -> None:
    store = MlflowReferenceStore(server.url, EXPERIMENT)
    first = store.publish("again", 0, reference_file(tmp_path / "1"))
    second = store.publish("again", 0, reference_file(tmp_path / "2"))
    assert first[RUN_ID_ATTR] == second[RUN_ID_ATTR]
    assert first["reference_output_sha256"] != second["reference_output_sha256"]
    fetched, reason = store.fetch(second, tmp_path / "3" / NAME)
    assert reason is None and fetched is not None and sha256_file(fetched) == second["reference_output_sha256"]


def test_an_unreachable_tracker_is_a_reason_never_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    url = f"http://alice:hunter2-secret@127.0.0.1:{free_port()}"  # nothing listens there
    path = reference_file(tmp_path / "a")
    attrs = {**MlflowReferenceStore(url, EXPERIMENT).publish("down", 0, path), "reference_output": str(path)}
    assert attrs["reference_output_sha256"] == sha256_file(path)
    assert attrs["reference_output_uri"] == path.absolute().as_uri()
    assert "reference_output_publish_error" in attrs and "hunter2-secret" not in str(attrs)
    path.unlink()
    found, reason = MlflowReferenceStore(url, EXPERIMENT).fetch(attrs, tmp_path / "b" / NAME)
    assert found is None and reason is not None and "not on this host and was not published" in reason, reason
    assert "hunter2-secret" not in reason
