"""Who a study's parent MLflow run is: its experiment, tags and params, read from the storage only.

* :class:`StudyRunInfo` -- what the parent run needs: names, tags, the search space, the device and budget,
  the export rule (every view module and the writer take it);
* :func:`study_run_info` -- built for a study: the experiment name ``<spec name> @ <gpu type>``
  (:func:`experiment_name`), the parent run's tags (spec hash, sampler, storage URL without secrets,
  workload, GPU / host fingerprint as ``host.*``) and params (the search space).

Pure functions, no MLflow import.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.front.cost import budget_hours
from tuner.spec.export_rule import DEFAULT_RULE, ExportRule
from tuner.storage.records import StudyRecord

if TYPE_CHECKING:
    import optuna

    from tuner.spec.models import StudySpec


@dataclass(frozen=True)
class StudyRunInfo:
    """What the parent run needs: names, tags and the search space; the device (``cuda`` / ``cpu``: the
    unit of its cost, else the ``tuner.device`` tag's) and the device-hour budget (None: none)."""

    study_name: str
    experiment_name: str
    tags: Mapping[str, str]
    params: Mapping[str, str]
    objective_names: tuple[str, ...] = ()
    directions: tuple[str, ...] = ()
    search_space: Mapping[str, Any] = field(default_factory=dict)
    device: str | None = None
    budget_device_hours: float | None = None
    export_rule: ExportRule = DEFAULT_RULE


def study_run_info(study: optuna.Study, spec: StudySpec, storage_url: str) -> StudyRunInfo:
    """The parent run's identity, tags and params for ``study`` (created from ``spec``, stored at
    ``storage_url``; read from the storage only)."""
    from tuner.secrets import redact_url

    stored = StudyRecord.of(study)
    gpu_type = str(stored.gpu_type if stored.gpu_type is not None else "cpu")
    tags = {
        "tuner.study": study.study_name,
        "tuner.spec_name": spec.name,
        "tuner.spec_hash": str(stored.spec_hash),
        "tuner.sampler": str(stored.sampler),
        "tuner.storage": redact_url(storage_url),
        "tuner.device": str(stored.device),
        "tuner.gpu_type": gpu_type,
        "tuner.workload": str(stored.workload_class),
        **{f"host.{k}": str(v) for k, v in stored.fingerprint.items()},
    }
    space = {name: json.loads(p.model_dump_json()) for name, p in spec.parameters.items()}
    params = {f"space.{name}": json.dumps(value, sort_keys=True) for name, value in space.items()}
    params.update({f"objective.{o.metric}": o.direction for o in spec.objectives})
    return StudyRunInfo(
        study.study_name,
        experiment_name(spec.name, gpu_type),
        tags,
        params,
        tuple(spec.objective_names),
        tuple(o.direction for o in spec.objectives),
        {"parameters": space, "derived": dict(spec.derived), "rules": [r.model_dump() for r in spec.rules]},
        stored.device,
        budget_hours(stored.budget_device_hours),
        spec.export_rule,
    )


def experiment_name(family: str, gpu_type: str) -> str:
    """One experiment per (workload family, GPU type): ``avatar_demo @ NVIDIA H200``."""
    return f"{family} @ {gpu_type}"
