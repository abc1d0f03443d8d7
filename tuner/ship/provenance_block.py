"""The provenance fields and environment of an export, from what the storage recorded.

:func:`tuner.ship.export.build_config` fills ``provenance.source`` / ``git`` /
``packages`` / ``runtime`` / ``weights`` and the top-level ``env`` of a
``tuner.config/v1`` document (:mod:`tuner.ship.config_schema`) from here:

* ``source: trial`` -- the trial that measured the setting recorded a ``runtime``
  (:func:`tuner.runner.worker.trial_provenance`): git state of the workload's
  source, package versions, the torch / CUDA / cuDNN / driver facts
  (:func:`runtime_block`) and the declared weights' sha256, all from its worker;
* ``source: study`` -- it recorded none (measured before the worker recorded
  one) but the study has its ``provenance`` attribute, captured at creation
  (:func:`tuner.runner.provenance.study_provenance`): git state and package
  versions of the creating host; ``runtime`` is then null and ``weights`` empty;
* ``source: null`` -- neither (a study older than both): every field null / empty.

``env`` is the trial's recorded environment: the allow-listed variables and the spec's
``record_env``, secrets masked (:mod:`tuner.runner.recorded_env`; an older trial's whole
environment is filtered the same way when read, :func:`tuner.storage.records.trial_records`);
null when not recorded.

Reads plain mappings only (JSON from the storage); a malformed value is left out,
never guessed. This module never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.storage.attributes import DEVICE, ENV, INVOCATION, PROVENANCE, RUNTIME

__all__ = ["provenance_fields", "runtime_block", "recorded_env", "recorded_device"]

_GIT_KEYS = ("repository", "commit", "dirty", "reason")


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _git_block(git: Any) -> dict[str, Any] | None:
    """A stored :func:`~tuner.runner.provenance.git_state` as the ``GitState`` fields, or None."""
    found = _mapping(git)
    return None if found is None else {key: found.get(key) for key in _GIT_KEYS}


def _packages(packages: Any) -> dict[str, str | None]:
    found = _mapping(packages) or {}
    return {str(name): None if version is None else str(version) for name, version in found.items()}


def _weights(weights: Any) -> dict[str, dict[str, Any]]:
    found = _mapping(weights) or {}
    return {
        str(name): {"path": entry["path"], "bytes": entry["bytes"], "sha256": entry["sha256"]}
        for name, entry in found.items()
        if isinstance(entry, Mapping) and {"path", "bytes", "sha256"} <= set(entry)
    }


def runtime_block(runtime: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's recorded ``runtime`` as the ``Runtime`` model's fields.

    ``torch`` is the torch version, ``torch_cuda`` the CUDA runtime torch was built with,
    ``cudnn`` cuDNN's version number, ``cuda_available`` whether the worker saw a GPU,
    ``driver`` the NVIDIA driver, ``torch_threads`` torch's intra-op threads; a null value's
    reason is in ``unavailable`` as the worker recorded it (``torch``, ``torch.cuda``,
    ``torch.cudnn``, ``driver``, ``git``, ``weights.<name>``).
    """
    torch = _mapping(runtime.get("torch")) or {}
    unavailable = _mapping(runtime.get("unavailable")) or {}
    return {
        "python": runtime.get("python"),
        "platform": runtime.get("platform"),
        "torch": torch.get("version"),
        "torch_cuda": torch.get("cuda"),
        "cudnn": torch.get("cudnn"),
        "cuda_available": torch.get("cuda_available"),
        "driver": runtime.get("driver"),
        "torch_threads": torch.get("threads"),
        "unavailable": {str(key): str(why) for key, why in unavailable.items()},
    }


def provenance_fields(study_attrs: Mapping[str, Any], trial_attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``{"source", "git", "packages", "runtime", "weights", "weights_identity"}`` for the export's ``provenance`` (see module
    docs). ``trial_attrs``: the user attributes and side records (:func:`tuner.storage.records.trial_records`) of the
    trial that measured the setting."""
    runtime = _mapping(trial_attrs.get(RUNTIME))
    if runtime is not None:
        return {
            "source": "trial",
            "git": _git_block(runtime.get("git")),
            "packages": _packages(runtime.get("packages")),
            "runtime": runtime_block(runtime),
            "weights": _weights(runtime.get("weights")),
            "weights_identity": (
                str(runtime["weights_identity"]) if runtime.get("weights_identity") is not None else None
            ),
        }
    study = _mapping(study_attrs.get(PROVENANCE))
    if study is not None:
        return {
            "source": "study",
            "git": _git_block(study.get("git")),
            "packages": _packages(study.get("packages")),
            "runtime": None,
            "weights": {},
        }
    return {"source": None, "git": None, "packages": {}, "runtime": None, "weights": {}}


def recorded_env(trial_attrs: Mapping[str, Any]) -> dict[str, str] | None:
    """The allow-listed environment the trial ran with (secrets masked; as read by
    :func:`tuner.storage.records.trial_records`), or None when not recorded."""
    env = _mapping(trial_attrs.get(ENV))
    return None if env is None else {str(name): str(value) for name, value in env.items()}


def recorded_device(study_attrs: Mapping[str, Any], trial_attrs: Mapping[str, Any]) -> str:
    """Where the setting ran: the device of the trial's recorded ``invocation`` (a python adapter's), else the
    study's ``device`` attribute (resolved at creation: ``cpu`` / ``cuda``), else ``cpu``."""
    invocation = _mapping(trial_attrs.get(INVOCATION)) or {}
    device = invocation.get("device") or study_attrs.get(DEVICE)
    return str(device) if device else "cpu"
