"""What stops a study early instead of letting it burn its budget, and the timeouts trials get.

* **Reference first.** Every quality metric compares with the reference's
  output, so a reference that fails (OOM, TIMEOUT, CRASH, INVALID, or an
  objective it cannot report) stops the search at once, with a message that
  says what to change. ``tuner resume`` runs the reference again.
* **The same failure over and over.** When the first :data:`SAME_FAILURE_STOP`
  runs of a study (none of them OK) fail with the same outcome and reason — a
  flag the program refuses, a missing executable — the study stops and prints
  that reason whole.
* **Timeouts that adapt.** The reference (the most expensive setting, likely
  to meet a busy host) gets :data:`REFERENCE_TIMEOUT_FACTOR` x
  ``workload.timeout_s``; search trials get ``max(timeout_s,``
  :data:`SEARCH_TIMEOUT_FACTOR` ``x the reference's wall time)``. A spec pins
  the timeout with ``workload.timeout_mode: fixed``. ``tuner resume --timeout
  S`` replaces ``timeout_s`` (a study event records it). ``timeout_s`` is per input: a trial of a spec
  with ``cases`` (several inputs) gets it times their number; ``measurement.sustained`` adds
  :data:`SUSTAINED_TIMEOUT_FACTOR` x its levels' seconds to it.
* **Measurement overrides.** ``tuner resume --warmup / --min-repeats /
  --max-repeats / --cv-target`` replace the stored spec's measurement settings
  from then on (:func:`measurement_settings`), also recorded as a study event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome
from tuner.storage.attributes import (
    MEASUREMENT_OVERRIDES,
    REFERENCE,
    TIMEOUT_OVERRIDE,
    is_measured,
    is_placeholder,
    outcome_of,
    reason_of,
    role_of,
    wall_time_s_of,
)

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from tuner.spec.models import StudySpec

REFERENCE_TIMEOUT_FACTOR = 3.0
SEARCH_TIMEOUT_FACTOR = 3.0
SUSTAINED_TIMEOUT_FACTOR = 2.0
"""A spec with ``measurement.sustained`` adds this x its levels' seconds to ``timeout_s`` (per input): the
levels' windows, the calls in flight at each window's end, inside the measurement's share of the timeout."""
SAME_FAILURE_STOP = 3


@dataclass(frozen=True)
class StudyStop:
    """Why a study stopped before its budget because continuing would waste it; ``message`` is whole."""

    message: str


def successful_reference(trials: Sequence[FrozenTrial]) -> FrozenTrial | None:
    """The reference trial that ran OK and produced values (not a placeholder), if any."""
    for trial in trials:
        if (
            role_of(trial) == REFERENCE
            and outcome_of(trial) == Outcome.OK.value
            and trial.values is not None
            and not is_placeholder(trial)
        ):
            return trial
    return None


def reference_stop(study_name: str, trial: FrozenTrial) -> StudyStop | None:
    """A :class:`StudyStop` when the finished reference ``trial`` cannot serve as the reference."""
    if successful_reference([trial]) is not None:
        return None
    outcome = outcome_of(trial)
    reason = reason_of(trial) or "no reason recorded"
    hint = {
        "TIMEOUT": f"a larger workload.timeout_s, or 'tuner resume {study_name} --timeout S'",
        "OOM": "a cheaper reference setting (smaller frames, resolution or batch) or a larger GPU",
    }.get(outcome, f"the workload or a cheaper reference setting, then 'tuner resume {study_name}'")
    return StudyStop(
        f"the reference setting failed ({outcome}: {reason}); every quality metric compares "
        f"with it, so the search stopped after trial {trial.number}. Fix: {hint}"
    )


def _signature(trial: FrozenTrial) -> tuple[str, str]:
    reason = reason_of(trial) or ""
    return outcome_of(trial), re.sub(r"\d+", "N", reason)[:500]


def same_failure_stop(trials: Sequence[FrozenTrial]) -> StudyStop | None:
    """A :class:`StudyStop` when the study's first runs all failed the same way (none OK yet)."""
    measured = [t for t in trials if is_measured(t)]
    if len(measured) < SAME_FAILURE_STOP or any(outcome_of(t) == Outcome.OK.value for t in measured):
        return None
    first = measured[:SAME_FAILURE_STOP]
    if len({_signature(t) for t in first}) != 1:
        return None
    outcome = outcome_of(first[0])
    reason = reason_of(first[0]) or "no reason recorded"
    numbers = ", ".join(str(t.number) for t in first)
    return StudyStop(
        f"the first {SAME_FAILURE_STOP} runs (trials {numbers}) all failed the same way, so the "
        f"study stopped instead of spending its budget: {outcome}: {reason}"
    )


def trial_timeout_s(
    spec: StudySpec, role: str, study_attrs: Mapping[str, Any], trials: Sequence[FrozenTrial], inputs: int = 1
) -> float:
    """The wall-clock limit in seconds for a trial of ``role`` (see the module docstring) running ``inputs``
    inputs (the spec's ``cases``): ``timeout_s`` is per input, so the base is ``inputs`` times it."""
    sustained = spec.measurement.sustained
    extra = SUSTAINED_TIMEOUT_FACTOR * sustained.total_s if sustained is not None else 0.0
    base = (float(study_attrs.get(TIMEOUT_OVERRIDE) or spec.workload.timeout_s) + extra) * max(1, inputs)
    if spec.workload.timeout_mode == "fixed":
        return base
    if role == REFERENCE:
        return base * REFERENCE_TIMEOUT_FACTOR
    reference = successful_reference(trials)
    wall = wall_time_s_of(reference) if reference is not None else None
    return max(base, SEARCH_TIMEOUT_FACTOR * float(wall)) if wall else base


def measurement_settings(spec: StudySpec, study_attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's ``measurement`` block with the study's overrides applied (validated like the spec).

    Raises ``ValueError`` naming the problem when the overrides contradict the
    spec (e.g. ``min_repeats`` above ``max_repeats``).
    """
    from pydantic import ValidationError

    from tuner.spec.measure.measurement import MeasurementSpec

    merged = {**spec.measurement.model_dump(), **dict(study_attrs.get(MEASUREMENT_OVERRIDES) or {})}
    try:
        return MeasurementSpec(**merged).model_dump()
    except ValidationError as error:
        problem = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise ValueError(f"measurement overrides: {problem}") from None


def unwritable(directory: Path) -> str | None:
    """None when the trial directory can be created and written; else the cause, in one line."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".tuner-write-probe"
        probe.write_bytes(b"0" * 4096)
        probe.unlink()
    except OSError as error:
        return (
            f"environment: cannot write the trial directory {directory}: {error.strerror or error} "
            f"(check --home / TUNER_HOME: permissions and free disk); nothing was measured"
        )
    return None
