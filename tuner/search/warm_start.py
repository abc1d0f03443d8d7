"""A warm start from a finished study of the same spec on another GPU type (issue 14).

``tuner run SPEC --warm-start STUDY`` (``tuner.create_study(..., warm_start=STUDY)``):

* the source is checked first (:func:`open_source`): it exists, it measured
  something, its parameters are this spec's — else one line (``StudyError``) and
  nothing is created;
* its Pareto front (feasible, measured trials) is enqueued right after the
  reference and the baseline, best first on the source's first objective
  (:func:`enqueue_front`): the new study measures the other type's front first.
  These trials keep the role ``search`` (they are copied, claimed, timed and
  exported like any search trial) and carry ``warm_start_from`` = the source
  study. A setting this spec's space does not hold is dropped and counted;
  the reference's and baseline's are already queued. The new study records
  ``warm_start`` = {study, storage (redacted), same_storage, front_enqueued,
  dropped, already_queued, observations};
* its measured trials are evidence for the predictions (:mod:`.prediction`: runs of another GPU type,
  their own column, its scale fitted once this study has measured three runs), reloaded like the memory's;
* its memory evidence (OOM trials and measured ``peak_*_gb``) is the memory
  model's prior (:mod:`.feasibility`), reloaded from the source on every run and
  resume (:func:`load_prior`). Peaks from other hardware are taken as they are:
  the same model at the same setting allocates the same activations whatever
  the GPU type; the limit is this host's. An OOM the source had on a GPU with
  less memory than this host's says nothing here and is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.errors import StudyError
from tuner.pareto import front_trials
from tuner.search.feasibility import Observation, observation_of
from tuner.secrets import MASK, redact_url
from tuner.spec.space import check_setting, resolve
from tuner.storage import attributes as names
from tuner.storage.opening import open_stored_study
from tuner.storage.records import StudyRecord
from tuner.storage.store import enqueue, set_study_attribute

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.spec.models import StudySpec

WARM_START_ATTR = names.WARM_START  # on the new study: where it started from, what was enqueued
WARM_START_FROM = names.WARM_START_FROM  # on each enqueued trial: the source study's name


@dataclass(frozen=True)
class WarmStartSource:
    """A finished study a new one starts from: its name, storage, trials and objective directions."""

    study_name: str
    storage_url: str
    trials: list[FrozenTrial]
    directions: list[str]
    gpu_memory_gb: float | None  # the source host's GPU memory, when its fingerprint knows it

    @property
    def source(self) -> str:
        """How prior observations name where they come from: ``warm_start:<study>``."""
        return f"warm_start:{self.study_name}"

    def observations(self) -> list[Observation]:
        """The source's memory evidence: every OK trial that ran (with its peaks) and every OOM."""
        found = (observation_of(t, self.source) for t in self.trials)
        return [o for o in found if o is not None]


def open_source(url: str, name: str, spec: StudySpec) -> WarmStartSource:
    """The study ``name`` in ``url``, checked as a warm start for ``spec``; StudyError (one line) when it
    does not exist, measured nothing, or its parameters are not ``spec``'s."""
    try:
        opened = open_stored_study(url, name)
    except StudyError as error:
        raise StudyError(f"warm start: {error}") from None
    except Exception as error:  # noqa: BLE001  (its stored spec no longer parses)
        raise StudyError(f"warm start: study '{name}' cannot be read: {str(error).splitlines()[0][:200]}") from None
    theirs, ours = set(opened.spec.parameters), set(spec.parameters)
    if theirs != ours:
        differ = "; ".join(
            f"only {where}: {', '.join(sorted(names))}"
            for where, names in ((f"in '{name}'", theirs - ours), ("in this spec", ours - theirs))
            if names
        )
        raise StudyError(
            f"warm start: study '{name}' has other parameters than this spec ({differ}): "
            f"a warm start needs the same spec"
        )
    trials = opened.study.get_trials(deepcopy=False)
    if not any(names.is_measured(t) for t in trials):
        raise StudyError(f"warm start: study '{name}' in {redact_url(url)} has no measured trials")
    return WarmStartSource(
        name,
        url,
        trials,
        [d.name.lower() for d in opened.study.directions],
        _gpu_memory_gb(StudyRecord.of(opened.study).fingerprint),
    )


def _gpu_memory_gb(fingerprint: Any) -> float | None:
    try:
        return float(fingerprint.get("gpu_memory_gb"))  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError):
        return None


def enqueue_front(study: optuna.Study, spec: StudySpec, storage_url: str, source: WarmStartSource) -> dict[str, Any]:
    """Queue ``source``'s front on the new ``study`` of ``spec``, stored at ``storage_url`` (best first on the
    source's first objective, behind the reference and baseline already queued); record and return the
    ``warm_start`` attribute."""
    sign = -1.0 if source.directions[0] == "maximize" else 1.0
    front = sorted(front_trials(source.trials, source.directions), key=lambda t: (sign * t.values[0], t.number))
    queued = {_key(spec, setting) for setting in (spec.reference, spec.baseline) if setting is not None}
    enqueued = dropped = already = 0
    for trial in front:
        params = dict(trial.params)
        if check_setting(spec, params) is not None:
            dropped += 1
            continue
        key = _key(spec, params)
        if key in queued:
            already += 1
            continue
        queued.add(key)
        enqueue(study, params, names.SEARCH, warm_start_from=source.study_name)
        enqueued += 1
    record = {
        "study": source.study_name,
        "storage": redact_url(source.storage_url),
        "same_storage": source.storage_url == storage_url,
        "front_enqueued": enqueued,
        "dropped": dropped,
        "already_queued": already,
        "observations": len(source.observations()),
    }
    set_study_attribute(study, names.WARM_START, record)
    return record


def _key(spec: StudySpec, params: Any) -> str:
    candidate, _ = resolve(spec, dict(params))
    return candidate.key if candidate is not None else repr(sorted(dict(params).items()))


def load_source(
    study: optuna.Study, spec: StudySpec, study_storage_url: str, storage_url: str | None = None
) -> tuple[WarmStartSource | None, list[str]]:
    """The warm start's source of ``study`` (of ``spec``, stored at ``study_storage_url``), read again (None: no
    warm start, or it cannot be read), and notes to print (why not). ``storage_url`` replaces the source's stored
    (redacted) storage URL."""
    record = StudyRecord.of(study).warm_start
    if record is None or not record.get("study"):
        return None, []
    name = str(record["study"])
    url = storage_url or (study_storage_url if record.get("same_storage") else str(record.get("storage") or ""))
    if not url or MASK in url:
        return None, [
            f"warm start: the evidence of '{name}' (memory, predictions) was not loaded: its storage "
            f"{redact_url(url)} needs its credentials again (--warm-start-storage)"
        ]
    try:
        return open_source(url, name, spec), []
    except StudyError as error:
        return None, [f"{error}; the memory model and the predictions run without its evidence"]


def load_prior(
    study: optuna.Study,
    spec: StudySpec,
    study_storage_url: str,
    gpu_memory_gb: float | None,
    storage_url: str | None = None,
) -> tuple[list[Observation], list[str]]:
    """The memory model's prior of the warm-started ``study`` of ``spec`` (stored at ``study_storage_url``),
    read again from its source (:func:`load_source`), and notes to print (why nothing was loaded, what was left
    out). ``gpu_memory_gb`` is this host's GPU memory (None on a CPU host)."""
    source, notes = load_source(study, spec, study_storage_url, storage_url)
    if source is None:
        return [], notes
    return memory_evidence(source, gpu_memory_gb)


def memory_evidence(source: WarmStartSource, gpu_memory_gb: float | None) -> tuple[list[Observation], list[str]]:
    """``source``'s memory evidence for a host with ``gpu_memory_gb`` (an OOM on a GPU with less memory than
    this one's left out), and notes to print."""
    name = source.study_name
    observations = source.observations()
    notes: list[str] = []
    if gpu_memory_gb is not None and source.gpu_memory_gb is not None and source.gpu_memory_gb < gpu_memory_gb:
        ooms = sum(1 for o in observations if o.oom)
        observations = [o for o in observations if not o.oom]
        if ooms:
            notes.append(
                f"warm start: {ooms} OOM trial(s) of '{name}' left out of the memory model: its GPU "
                f"({source.gpu_memory_gb:g} GB) has less memory than this one ({gpu_memory_gb:g} GB)"
            )
    return observations, notes
