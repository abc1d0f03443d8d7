"""Create or load a study in the Optuna storage, with everything needed to resume it.

The storage is the one source of truth. A study's user attributes hold the
spec's YAML text (so ``tuner resume`` needs nothing else), its hash, the
budget, the host fingerprint, the provenance of the creating host (git commit,
package versions) and the MLflow run id. Each trial's user
attributes hold its role (``reference`` / ``baseline`` / ``search``), its
candidate key, outcome, reason, log tail, metrics (with units and reasons for
unavailable ones), derived values, timings, and what the trial ran with:
``env`` and ``runtime``. Every name is a constant of :mod:`tuner.storage.attributes`; they are
written through :mod:`tuner.storage.store` and read through :mod:`tuner.storage.records`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import StudyError
from tuner.search.objectives import ensure_metric_names
from tuner.search.samplers import make_sampler
from tuner.secrets import redact_url
from tuner.spec.models import SamplerName, StudySpec, spec_hash
from tuner.storage import attributes as names
from tuner.storage.coordination.lock import ensure_tuner_tables
from tuner.storage.opening import STUDY_NAME_MAX, check_study_name, open_storage, open_stored_study
from tuner.storage.store import enqueue, record_study_created

if TYPE_CHECKING:
    import optuna


def study_directory(home: Path, name: str) -> Path:
    """``home / name``, the study's own directory; StudyError when ``name`` is not a valid study name
    (:func:`check_study_name`) or the directory would not lie inside ``home`` once resolved."""
    directory = home / check_study_name(name)
    root = home.resolve()
    if root not in directory.resolve().parents:
        raise StudyError(f"study '{name}': its directory {directory} resolves outside the tuner home {root}")
    return directory


def default_study_name(spec: StudySpec, gpu_type: str) -> str:
    """``<spec name>-<gpu type>-<UTC time>``, e.g. ``avatar_demo-cpu-20261130-120301``; always a valid
    study name (:func:`check_study_name`): unsafe characters become ``_``, long parts are cut."""
    device = re.sub(r"[^A-Za-z0-9]+", "_", gpu_type).strip("_").lower()[:40] or "cpu"
    base = re.sub(r"[^A-Za-z0-9_.\-]+", "_", spec.name).lstrip(".")[: STUDY_NAME_MAX - 64] or "study"
    return check_study_name(f"{base}-{device}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")


def study_attributes(spec: StudySpec, spec_text: str, device: str, gpu_type: str) -> dict[str, Any]:
    """The provenance a new study stores: spec name and hash, workload, device, GPU type, host fingerprint,
    and ``provenance`` (:func:`tuner.runner.provenance.study_provenance`: the git commit of the workload's
    source, or of the working directory for a command / http workload, and package versions; each trial
    records its own in ``runtime``, which exports prefer)."""
    from tuner.gpu import fingerprint
    from tuner.runner.provenance import study_provenance

    factory = spec.workload.python.factory if spec.workload.python is not None else None
    return {
        names.SPEC_NAME: spec.name,
        names.SPEC_HASH: spec_hash(spec_text),
        names.WORKLOAD_CLASS: spec.workload.target,
        names.DEVICE: device,
        names.GPU_TYPE: gpu_type,
        names.FINGERPRINT: fingerprint(),
        names.PROVENANCE: study_provenance(spec.workload.target, factory),
    }


@dataclass
class OpenStudy:
    """A study handle plus the spec it was created from."""

    study: optuna.Study
    spec: StudySpec
    spec_text: str
    storage_url: str
    created: bool


def create_study(
    spec: StudySpec,
    spec_text: str,
    url: str,
    name: str,
    sampler: SamplerName,
    trials: int | None,
    attributes: dict[str, Any],
    device_hours: float | None = None,
) -> OpenStudy:
    """Create a new study; StudyError when ``name`` is not a valid study name (:func:`check_study_name`,
    checked before the storage is opened) or exists (use resume for that) — also when another run
    creates it between this check and the create (two ``tuner run --study-name X`` at once): the
    storage's unique name decides, and the loser touches nothing of the winner's study."""
    import optuna

    check_study_name(name)
    storage = open_storage(url)
    if any(s.study_name == name for s in storage.get_all_studies()):
        raise StudyError(
            f"study '{name}' already exists in {redact_url(url)}: "
            f"continue it with 'tuner resume {name}' or pick another --study-name"
        )
    try:
        study = optuna.create_study(
            storage=storage,
            study_name=name,
            sampler=make_sampler(sampler, spec, spec.seed),
            directions=[o.direction for o in spec.objectives],
        )
    except optuna.exceptions.DuplicatedStudyError:
        raise StudyError(
            f"study '{name}' already exists in {redact_url(url)} (created by another run just now): "
            f"continue it with 'tuner resume {name}' or pick another --study-name"
        ) from None
    ensure_metric_names(study, spec)  # the objectives' names (optuna-dashboard's labels)
    budget_trials = trials if trials is not None else spec.budget.trials
    record_study_created(
        study,
        spec_text,
        sampler,
        budget_trials,
        spec.budget.wall_time_s,
        [o.metric for o in spec.objectives],
        attributes,
        budget_device_hours=device_hours if device_hours is not None else spec.budget.device_hours,
    )
    if spec.reference is not None:
        enqueue(study, spec.reference, names.REFERENCE)
    if spec.baseline is not None and spec.baseline != spec.reference:
        enqueue(study, spec.baseline, names.BASELINE)
    ensure_tuner_tables(study)
    return OpenStudy(study, spec, spec_text, url, created=True)


def sampler_seed(spec_seed: int, stored_trials: int, salt: str | None = None) -> int:
    """The seed of a loaded study's sampler: ``spec_seed + stored_trials``, plus a stable 31-bit hash of
    ``salt`` when given (CRC-32: the same on every host and Python run); always in [0, 2**32)."""
    import zlib

    mixed = spec_seed + stored_trials + (zlib.crc32(salt.encode()) if salt else 0)
    return mixed % 2**32


def load_study(
    url: str, name: str, sampler: SamplerName | None = None, read_only: bool = False, seed_salt: str | None = None
) -> OpenStudy:
    """Load a study created by tuner, rebuilding its spec and sampler from the storage; StudyError
    when ``name`` is not a valid study name (checked before the storage is opened) or not there.
    ``read_only``: for commands that only read (see :func:`~tuner.storage.opening.open_storage`).

    The sampler's seed is the spec's seed plus the number of trials stored, so a resumed study does not
    replay its first proposals; ``seed_salt`` (a fleet worker's identity, ``host:pid``) is mixed in too, so
    workers that load one study at the same moment do not propose the same settings."""
    import optuna

    stored = open_stored_study(url, name, read_only=read_only)
    spec = stored.spec
    chosen: SamplerName = sampler or stored.sampler or spec.sampler.name  # type: ignore[assignment]
    seed = sampler_seed(spec.seed, len(stored.study.trials), seed_salt)
    study = optuna.load_study(study_name=name, storage=stored.storage, sampler=make_sampler(chosen, spec, seed))
    return OpenStudy(study, spec, stored.spec_text, url, created=False)
