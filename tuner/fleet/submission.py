"""Creating a study from a spec submitted over HTTP (``POST /api/studies``), for workers to pick up.

:func:`submit` checks, in this order, and raises :class:`Refused` (an HTTP status and one
line) at the first problem; nothing is written to the storage before every check passed:

1. the spec parses (:func:`tuner.spec.loading.parse_spec`, source ``submitted spec``;
   its YAML limits apply: 1 MiB, nesting, aliases) -- 400;
2. it runs no code the submitter chose unless the service allows it
   (``--allow-command-workloads``): a ``command`` block is an argv the workers execute,
   and a ``python`` block calls any ``module:callable`` with any kwargs
   (``subprocess:run`` with ``args``), so both are refused alike -- 403;
3. it would start (:func:`tuner.study.preflight.check_runnable` with ``host=False``:
   the sampler and the spec file, not this host, which may have no GPU) -- 400;
4. the GPU type agrees with ``workload.device`` (``cpu`` for a CPU spec, given for any
   other) -- 400;
5. the name is a valid study name (:func:`tuner.storage.opening.check_study_name`:
   no path separator, no ``..``) -- 400; and no study has it yet -- 409.

The study is created by :func:`tuner.study.studies.create_study` with the provenance of
:func:`tuner.study.studies.study_attributes` minus this host's fingerprint (the service
host is not the host that measures), ``gpu_type`` (workers on a host of that type pick
the study up), ``cancelled = False`` and ``submitted_at`` (UTC, ISO 8601).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.errors import StudyError, TunerError
from tuner.fleet.api_models import SubmitRequest
from tuner.secrets import redact_url
from tuner.spec.loading import parse_spec
from tuner.spec.models import SamplerName, SpecError, StudySpec
from tuner.storage import attributes as names
from tuner.storage.opening import check_study_name
from tuner.study.preflight import check_runnable
from tuner.study.studies import create_study, default_study_name, study_attributes

if TYPE_CHECKING:
    import optuna

SOURCE = "submitted spec"
CODE_ADAPTERS = ("command", "python")
"""Workload blocks that execute code named by the spec: refused unless ``--allow-command-workloads``."""


@dataclass
class Refused(TunerError):
    """A submission that is not accepted: the HTTP status and the one-line reason."""

    status: int
    detail: str

    def __str__(self) -> str:
        return self.detail


def _target_gpu_type(spec: StudySpec, given: str | None) -> tuple[str, str]:
    """(gpu_type, device) of the submitted study; Refused when they contradict ``workload.device``."""
    device = spec.workload.device
    if given is None:
        if device == "cpu":
            return "cpu", "cpu"
        raise Refused(
            400,
            f"gpu_type is required: the spec's workload.device is '{device}'; give the GPU type the "
            "study targets as workers report it (e.g. 'NVIDIA H200'), or 'cpu'",
        )
    chosen = given.strip()
    if device == "cpu" and chosen.lower() != "cpu":
        raise Refused(400, f"gpu_type '{chosen}' contradicts workload.device 'cpu': a CPU study targets 'cpu'")
    if device == "cuda" and chosen.lower() == "cpu":
        raise Refused(400, "gpu_type 'cpu' contradicts workload.device 'cuda': give a GPU type, e.g. 'NVIDIA H200'")
    return ("cpu", "cpu") if chosen.lower() == "cpu" else (chosen, "cuda")


def check_submission(request: SubmitRequest, allow_command_workloads: bool) -> tuple[StudySpec, str, str, str]:
    """(spec, study name, gpu_type, device) of an acceptable submission; Refused otherwise (checks 1-5,
    the name's existence aside)."""
    try:
        spec = parse_spec(request.spec_yaml, source=SOURCE)
    except SpecError as error:  # every YAML problem too, control characters included
        raise Refused(400, str(error)) from None
    adapter = spec.workload.adapter
    if adapter in CODE_ADAPTERS and not allow_command_workloads:
        raise Refused(
            403,
            f"{SOURCE}: workload.{adapter}: a {adapter} workload runs code the spec names on every "
            "worker; this service refuses it (start 'tuner serve --allow-command-workloads' to "
            "accept them)",
        )
    sampler: SamplerName = request.sampler or spec.sampler.name
    try:
        check_runnable(spec, request.spec_yaml, SOURCE, sampler, host=False)
    except SpecError as error:
        raise Refused(400, str(error)) from None
    gpu_type, device = _target_gpu_type(spec, request.gpu_type)
    try:
        name = check_study_name(request.name) if request.name is not None else default_study_name(spec, gpu_type)
    except StudyError as error:
        raise Refused(400, str(error)) from None
    return spec, name, gpu_type, device


def submit(
    request: SubmitRequest, storage_url: str, storage: optuna.storages.BaseStorage, allow_command_workloads: bool
) -> optuna.Study:
    """Create the study ``request`` describes in the storage at ``storage_url`` (opened as ``storage``);
    Refused (400 / 403 / 409 / 503) when it is not accepted."""
    spec, name, gpu_type, device = check_submission(request, allow_command_workloads)
    if exists(storage, name):
        raise Refused(409, f"study '{name}' already exists: pick another name")
    sampler: SamplerName = request.sampler or spec.sampler.name
    attributes = {
        key: value
        for key, value in study_attributes(spec, request.spec_yaml, device, gpu_type).items()
        if key != names.FINGERPRINT
    }
    attributes.update({names.CANCELLED: False, names.SUBMITTED_AT: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    try:
        opened = create_study(
            spec,
            request.spec_yaml,
            storage_url,
            name,
            sampler,
            request.trials,
            attributes,
            device_hours=request.device_hours,
        )
    except StudyError as error:
        if exists(storage, name):
            raise Refused(409, f"study '{name}' already exists: pick another name") from None
        raise Refused(503, str(error)) from None
    except Exception as error:  # noqa: BLE001 - optuna's DuplicatedStudyError when two submissions race
        if exists(storage, name):
            raise Refused(409, f"study '{name}' already exists: pick another name") from None
        raise Refused(
            503, f"cannot create study '{name}' in {redact_url(storage_url)}: {type(error).__name__}"
        ) from None
    return opened.study


def exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    """Whether a study named ``name`` is in ``storage`` (a storage error propagates: it is not a "no")."""
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True
