"""Skip a proposal the current front beats wherever it could land; audit a share of those skips (issue 38).

Before a search trial runs, its *best case* on each objective is bounded (:func:`best_case`):

* ``latency_p50_s`` and the study's predicted memory figure: the low end of the prediction's interval
  (:mod:`tuner.search.prediction`: the 10 % quantile of the fit's held-out errors, at least 2 % below);
* a quality metric that compares the output with the reference setting's (``psnr_db``, ``stlpips_alex``,
  ``text_f1``, ...: :data:`tuner.spec.metrics.QUALITY_FAMILIES` says which): the reference's own value -- no
  setting agrees with the reference better than the reference itself (``psnr_db`` 100, ``stlpips_alex`` 0);
* a metric scored against ground truth (``text_gt_exact_match``, ...): its best possible value (:data:`IDEAL`);
* any other objective (throughput, a reference-free quality figure): unbounded, so such a study never skips.

The proposal is *dominated* when a trial of the current front is no worse than that best case on every objective
and better on one (:func:`tuner.pareto.dominates`). It is then recorded ``SKIPPED_PREDICTED_DOMINATED`` with its
prediction and the front trial that beats it, never run, not counted against the trial budget, and told to the
sampler as a wall (like a predicted OOM). Nothing enters the front unmeasured: a skipped trial has no values of its own.

**Audit.** A seeded share ``audit_share`` of the proposals that would be skipped runs anyway (the draw depends on
the study's seed and the trial's number only, so a replay repeats it); such a trial carries ``skip_audit``: the
front's values when the skip was decided. :func:`audit_counts` judges each audited trial once measured: the skip
was *wrong* when the trial, measured, is feasible and not dominated by that front (it would have joined it).
The wrong-skip rate is wrong / audited (``tuner status``, the replay benchmark).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.pareto import dominates, is_measured_feasible
from tuner.spec.metrics import QUALITY_FAMILIES
from tuner.storage.attributes import skip_audit_of

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from tuner.search.prediction import Prediction
    from tuner.spec.models import StudySpec

IDEAL: dict[str, float] = {
    "text_gt_exact_match": 1.0,
    "text_gt_f1": 1.0,
    "text_gt_rouge_l": 1.0,
    "text_gt_chrf": 100.0,
    "text_gt_bleu": 100.0,
    "text_truncated_fraction": 0.0,
}
"""Quality metrics scored against ground truth (not the reference), by their best possible value."""
REFERENCE_BOUNDED: frozenset[str] = frozenset(
    name
    for family in QUALITY_FAMILIES
    for name in family.metrics
    if family.needs_reference_for(name) and name not in IDEAL
)
"""Quality metrics computed against the reference setting's output: the reference's own value bounds them."""


@dataclass(frozen=True)
class DominanceVerdict:
    """Whether to skip a proposal: ``skip`` (recorded, not run), ``audit`` (would be skipped, runs anyway), or
    neither; ``dominated_by`` the front trial's number, ``bound`` the proposal's best case per objective and
    ``reason`` one line naming both."""

    skip: bool
    audit: bool = False
    dominated_by: int | None = None
    bound: tuple[float, ...] = ()
    reason: str = ""
    front_values: tuple[tuple[float, ...], ...] = ()

    def audit_record(self) -> dict[str, Any]:
        """The ``skip_audit`` attribute of an audited trial (JSON)."""
        return {"front": [list(v) for v in self.front_values], "dominated_by": self.dominated_by}


def best_case(
    spec: StudySpec, predictions: Mapping[str, Prediction], reference_values: Sequence[float] | None
) -> tuple[float, ...] | None:
    """The proposal's best possible value per objective (see the module docstring); None when one of the
    predicted objectives has no prediction yet. An unbounded objective is its ideal (-inf or +inf)."""
    bound = [_bound(spec, index, predictions, reference_values) for index in range(len(spec.objectives))]
    return None if any(value is None for value in bound) else tuple(value for value in bound if value is not None)


def _bound(
    spec: StudySpec, index: int, predictions: Mapping[str, Prediction], reference_values: Sequence[float] | None
) -> float | None:
    """Objective ``index``'s best possible value for the proposal (:func:`best_case`); None when it is predictable
    but not predicted yet (too few runs)."""
    objective = spec.objectives[index]
    predicted = predictions.get(objective.metric)
    if predicted is not None:
        return predicted.low if objective.direction == "minimize" else predicted.high
    if objective.metric == "latency_p50_s" or objective.metric.startswith("peak_"):
        return None
    if objective.metric in REFERENCE_BOUNDED and reference_values is not None:
        return float(reference_values[index])
    if objective.metric in IDEAL:
        return IDEAL[objective.metric]
    return -math.inf if objective.direction == "minimize" else math.inf


def latency_ceiling(
    spec: StudySpec, predictions: Mapping[str, Prediction], reference: FrozenTrial | None, front: Sequence[FrozenTrial]
) -> float | None:
    """The latency (seconds) past which a proposal is dominated: the lowest latency of a front trial at least as
    good as the proposal's best case on every other objective. None when ``latency_p50_s`` is not a minimised
    objective, there is no successful reference, another objective is not bounded, or no front trial qualifies.
    The worker stops repeating once its timed calls are all past it (:class:`tuner.evaluators.latency.LatencySettings`)."""
    names = [objective.metric for objective in spec.objectives]
    if "latency_p50_s" not in names or reference is None or reference.values is None:
        return None
    at = names.index("latency_p50_s")
    if spec.objectives[at].direction != "minimize":
        return None
    others = [index for index in range(len(names)) if index != at]
    bound = {index: _bound(spec, index, predictions, reference.values) for index in others}
    if any(value is None or math.isinf(value) for value in bound.values()):
        return None
    qualified = [
        t.values[at]
        for t in front
        if t.values is not None
        and all(
            (t.values[i] <= bound[i]) if spec.objectives[i].direction == "minimize" else (t.values[i] >= bound[i])  # type: ignore[operator]
            for i in others
        )
    ]
    return float(min(qualified)) if qualified else None


@dataclass(frozen=True)
class RepeatLimits:
    """Where a search trial's latency repeats may stop early: ``ceiling_s`` (past it, the front surely beats the
    trial: :func:`latency_ceiling`) and ``thresholds_s`` (clear of them all, its place is settled:
    :func:`latency_thresholds`). Seconds; the defaults stop nothing."""

    ceiling_s: float | None = None
    thresholds_s: tuple[float, ...] = ()


def latency_thresholds(spec: StudySpec, front: Sequence[FrozenTrial]) -> tuple[float, ...]:
    """The latencies (seconds, ascending) at which a trial's place on the current front changes: every front
    trial's ``latency_p50_s``. A trial faster or slower than each of them, by more than the timing noise, keeps
    its place whatever more repeats give (:func:`tuner.evaluators.latency.settled`). Empty -- no early stop --
    when ``latency_p50_s`` is not a minimised objective, the spec measures several inputs (its latency is their
    combination) or the front is empty."""
    names = [objective.metric for objective in spec.objectives]
    if "latency_p50_s" not in names or spec.cases is not None:
        return ()
    at = names.index("latency_p50_s")
    if spec.objectives[at].direction != "minimize":
        return ()
    return tuple(sorted({float(t.values[at]) for t in front if t.values is not None and t.values[at] > 0}))


def judge_proposal(
    spec: StudySpec,
    predictions: Mapping[str, Prediction],
    reference: FrozenTrial | None,
    front: Sequence[FrozenTrial],
    trial_number: int,
    audit_share: float,
) -> DominanceVerdict:
    """Skip, audit or run the proposal numbered ``trial_number`` (see the module docstring). ``reference``: the
    study's successful reference (None: nothing bounds quality yet, so nothing is skipped)."""
    if reference is None or reference.values is None or not front:
        return DominanceVerdict(False)
    bound = best_case(spec, predictions, reference.values)
    if bound is None or any(math.isinf(value) for value in bound):
        return DominanceVerdict(False)
    directions = [objective.direction for objective in spec.objectives]
    beaten_by = next((t for t in front if t.values is not None and dominates(t.values, bound, directions)), None)
    if beaten_by is None:
        return DominanceVerdict(False)
    assert beaten_by.values is not None
    shown = ", ".join(
        f"{objective.metric} {value:.4g}" for objective, value in zip(spec.objectives, bound, strict=True)
    )
    theirs = ", ".join(f"{value:.4g}" for value in beaten_by.values)
    reason = f"predicted dominated: at best {shown}; trial {beaten_by.number} has {theirs}"
    audit = random.Random(f"{spec.seed}:{trial_number}").random() < audit_share
    front_values = tuple(tuple(t.values) for t in front if t.values is not None)
    return DominanceVerdict(not audit, audit, beaten_by.number, bound, reason, front_values)


@dataclass(frozen=True)
class AuditCounts:
    """Audited proposals judged so far: ``audited`` measured, ``wrong`` of them would have joined the front."""

    audited: int
    wrong: int

    @property
    def wrong_rate(self) -> float | None:
        """wrong / audited (None before any audited trial was measured)."""
        return self.wrong / self.audited if self.audited else None


def audit_counts(trials: Sequence[FrozenTrial], directions: Sequence[str]) -> AuditCounts:
    """Judge each finished audited trial: wrong when it is measured feasible and no value of the front it was
    judged against dominates it (see the module docstring)."""
    from optuna.trial import TrialState

    audited = wrong = 0
    for trial in trials:
        record = skip_audit_of(trial)
        if not isinstance(record, Mapping) or trial.state != TrialState.COMPLETE:
            continue
        audited += 1
        if not is_measured_feasible(trial) or trial.values is None:
            continue
        front = [tuple(values) for values in record.get("front") or []]
        if not any(dominates(values, trial.values, directions) for values in front):
            wrong += 1
    return AuditCounts(audited, wrong)


def skip_summary(trials: Sequence[FrozenTrial], directions: Sequence[str]) -> str | None:
    """One line on the dominance skips of a study's ``trials`` (None when it had none): how many were skipped,
    how many audits ran and how many of those would have joined the front (the wrong-skip rate)."""
    from tuner.results import Outcome
    from tuner.storage.attributes import outcome_of

    skipped = sum(1 for t in trials if outcome_of(t) == Outcome.SKIPPED_PREDICTED_DOMINATED.value)
    counts = audit_counts(trials, directions)
    if not skipped and not counts.audited:
        return None
    rate = f" (wrong-skip rate {counts.wrong_rate:.0%})" if counts.wrong_rate is not None else ""
    return (
        f"{skipped} skipped as predicted dominated (never run); {counts.audited} audited (run anyway), "
        f"{counts.wrong} of them joined the front{rate}"
    )
