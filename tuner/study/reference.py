"""The reference output between hosts: published once, fetched once per host, checked by hash.

Every quality metric compares a trial's output with the reference trial's output
(``<home>/<study>/reference_output.npz`` on the host that ran the reference). Workers on
other hosts share the storage but no file system, so the file travels through a
:class:`ReferenceStore`: :class:`LocalReferenceStore` here (same host only: it hashes and
checks the local file), ``tuner.tracking.reference_artifact.MlflowReferenceStore`` through
MLflow's artifact store (proxied by ``mlflow server --artifacts-destination``, so through
the tracking server).

Contract with the coordinator:

* After the reference trial succeeds (its output saved at ``path``)::

      attrs = store.publish(study_name, trial_number, path)  # recorded on the trial (tuner.storage.store.record_result)

  ``attrs`` always holds ``reference_output_sha256`` (hex SHA-256 of the file) and
  ``reference_output_uri`` (where other hosts get it; a ``file://`` URI when only this
  host has it). ``publish`` never raises for an unreachable tracker: the attributes then
  say so in ``reference_output_publish_error`` and other hosts report the reason.
* Before running a trial that needs the reference output, once per coordinator (cache
  the answer)::

      path, reason = store.fetch(attributes_of(reference_trial), home / study / "reference_output.npz")

  ``path`` is a local file whose SHA-256 equals ``reference_output_sha256`` (the trial's
  ``reference_output``), or None and ``reason`` says why in one line (quality metrics are
  then unavailable with that reason). A trial stored before hashes existed (no
  ``reference_output_sha256``) is used unverified when its file is on this host, as before.
* The host note: ``fingerprint_difference(reference_fingerprint, tuner.gpu.fingerprint())``
  is stored as the trial attribute ``fingerprint_note`` when not None.

Study layer: no MLflow import here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tuner.runner.provenance import sha256_file
from tuner.storage import attributes as names
from tuner.storage.attributes import attributes_of

if TYPE_CHECKING:
    from tuner.spec.models import StudySpec

SHA256_ATTR = names.REFERENCE_OUTPUT_SHA256
URI_ATTR = names.REFERENCE_OUTPUT_URI
BYTES_ATTR = names.REFERENCE_OUTPUT_BYTES
PUBLISH_ERROR_ATTR = names.REFERENCE_OUTPUT_PUBLISH_ERROR
LOCAL_PATH_ATTR = names.REFERENCE_OUTPUT  # the path the coordinator stored on the reference trial
NOTE_ATTR = names.FINGERPRINT_NOTE

# (word in the note, fingerprint key) — the facts that make a measurement from another host incomparable.
COMPARED_FACTS = (("gpu", "gpu_type"), ("driver", "driver_version"), ("torch", "torch_version"))


class ReferenceStore(Protocol):
    """Where the reference output lives between hosts (see the module docstring for the contract)."""

    def publish(self, study_name: str, trial_number: int, path: Path) -> dict[str, str]:
        """Make ``path`` (the reference trial's output) reachable; the attributes to store on that trial."""
        ...

    def fetch(self, attrs: Mapping[str, Any], destination: Path) -> tuple[Path | None, str | None]:
        """A verified local copy of the reference output described by ``attrs``; else None and why."""
        ...


def short(sha: str) -> str:
    """The first 16 hex digits of a hash, for messages."""
    return sha[:16]


def local_attributes(path: Path) -> dict[str, str]:
    """What every store records: hash, a ``file://`` URI of ``path`` and its size in bytes."""
    return {SHA256_ATTR: sha256_file(path), URI_ATTR: path.absolute().as_uri(), BYTES_ATTR: str(path.stat().st_size)}


def verified_local(attrs: Mapping[str, Any], destination: Path) -> tuple[Path | None, str | None]:
    """The destination, else the trial's own local path, when it exists and its hash matches.

    (None, None): neither file is here. (None, reason): a file is here with another hash.
    Without a stored hash (a trial from before hashes) an existing file is used unverified.
    """
    expected = attrs.get(SHA256_ATTR)
    mismatch: str | None = None
    for candidate in _local_candidates(attrs, destination):
        if not candidate.is_file():
            continue
        if expected is None:
            return candidate, None
        found = sha256_file(candidate)
        if found == expected:
            return candidate, None
        mismatch = (
            f"reference output hash mismatch: {candidate} has sha256 {short(found)}…, "
            f"the reference trial recorded {short(str(expected))}…"
        )
    return None, mismatch


def _local_candidates(attrs: Mapping[str, Any], destination: Path) -> list[Path]:
    paths = [destination]
    stored = attrs.get(LOCAL_PATH_ATTR)
    if stored and Path(str(stored)) != destination:
        paths.append(Path(str(stored)))
    return paths


class LocalReferenceStore:
    """Same host only: ``publish`` hashes the file, ``fetch`` uses it when it is here and matches."""

    def publish(self, study_name: str, trial_number: int, path: Path) -> dict[str, str]:
        return local_attributes(path)

    def fetch(self, attrs: Mapping[str, Any], destination: Path) -> tuple[Path | None, str | None]:
        path, mismatch = verified_local(attrs, destination)
        if path is not None or mismatch is not None:
            return path, mismatch
        return None, missing_reason(attrs)


def missing_reason(attrs: Mapping[str, Any]) -> str:
    """Why no reference output is available on this host, in one line."""
    stored = attrs.get(LOCAL_PATH_ATTR)
    if not stored:
        return "no reference output: the reference trial recorded none"
    reason = (
        f"the reference output {stored} is not on this host and was not published "
        f"(log to a shared MLflow server: --mlflow-uri)"
    )
    error = attrs.get(PUBLISH_ERROR_ATTR)
    return f"{reason}: {error}" if error else reason


def fingerprint_difference(reference: Mapping[str, Any], here: Mapping[str, Any]) -> str | None:
    """One line naming the facts on which this host differs from the reference's host; None when none do.

    Compares GPU type, driver version and torch version (keys ``gpu_type``, ``driver_version``,
    ``torch_version`` of :func:`tuner.gpu.fingerprint`), each written ``<here> vs <reference>``:
    ``"this host differs from the reference's: gpu NVIDIA H200 vs NVIDIA A100, torch 2.14.1 vs 2.13.0"``.
    A fact missing on either side, or ``unavailable (...)`` there, is not compared; with no
    facts on one side the answer is None.
    """
    differences = []
    for word, key in COMPARED_FACTS:
        ours, theirs = _fact(here, key), _fact(reference, key)
        if ours is not None and theirs is not None and ours != theirs:
            differences.append(f"{word} {ours} vs {theirs}")
    return "this host differs from the reference's: " + ", ".join(differences) if differences else None


def reference_fingerprint(reference_attrs: Mapping[str, Any], study_attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The fingerprint of the host that ran the reference: the reference trial's ``fingerprint``
    attribute when it has one, else the study's (the host that created the study), else ``{}``."""
    found = reference_attrs.get(names.FINGERPRINT) or study_attrs.get(names.FINGERPRINT) or {}
    return found if isinstance(found, Mapping) else {}


def _fact(fingerprint: Mapping[str, Any], key: str) -> str | None:
    value = fingerprint.get(key)
    if value is None:
        return None
    text = str(value).strip()
    return None if not text or text.startswith("unavailable") else text


class ReferenceHandOff:
    """What a coordinator does with the reference output, through a :class:`ReferenceStore`.

    :meth:`publish` after the reference trial ran OK (attributes to store on it, with this host's
    ``fingerprint``); :meth:`output` gives later trials a verified local copy, fetched once per
    coordinator and cached (None, with :attr:`reason`, when there is none); :attr:`note` is the
    one-line fingerprint difference between this host and the reference's, or None.
    """

    def __init__(self, store: ReferenceStore, destination: Path) -> None:
        self.store = store
        self.destination = destination
        self.path: str | None = None
        self.reason: str | None = None
        self.note: str | None = None

    def publish(self, study_name: str, trial_number: int, path: Path) -> dict[str, Any]:
        from tuner.gpu import fingerprint

        return {**self.store.publish(study_name, trial_number, path), names.FINGERPRINT: fingerprint()}

    def output(self, trials: Sequence[Any], study_attrs: Mapping[str, Any]) -> str | None:
        if self.path is not None:
            return self.path
        from tuner.gpu import fingerprint

        for trial in trials:
            attrs = attributes_of(trial)
            if attrs.get(names.REFERENCE_OUTPUT) and attrs.get(names.OUTCOME) == "OK":  # a reference's output
                found, self.reason = self.store.fetch(attrs, self.destination)
                if found is not None:
                    self.path = str(found)
                    self.note = fingerprint_difference(reference_fingerprint(attrs, study_attrs), fingerprint())
                    return self.path
        return None


def reference_settings(spec: StudySpec) -> dict[str, Any] | None:
    """The reference's settings, derived values included (its raw parameters when they do not resolve);
    None for a spec without a reference."""
    from tuner.spec.space import resolve

    if spec.reference is None:
        return None
    candidate, _ = resolve(spec, spec.reference)
    return candidate.settings if candidate is not None else dict(spec.reference)
