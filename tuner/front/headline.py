"""The headline: what the chosen trial's speed-up is stated against, so that it compares with what passes.

A speed-up over a setting that the study's own export rule would never ship says little (the demo's baseline
is 6x faster than the reference but looks nothing like it). So the speed-up is stated against the
**baseline** when the baseline meets the export rule, else against the **reference** when it does (its
quality is the anchor), else against the baseline all the same — and each time the baseline fails the
rule, the headline says how: each condition it misses with its value, the bound and how far off
(``stlpips_alex 0.1062 > 0.015 (7.1x the bound)``), or that it is infeasible (a constraint of the spec).

"Meets the rule" (:func:`rule_misses`): feasible and measured (:func:`tuner.storage.records.record_feasible`)
and every condition of the rule's policy holds (``subject to ...``; the knee, a profile and ``trial N``
have none). The closing front (:mod:`tuner.session.front_lines`), ``best.yaml``'s ``selection.headline``
(:mod:`tuner.ship.export`) and the MLflow study run's ``tuner.headline`` tag all state this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tuner.spec.export_rule import Policy, PolicyError, parse_policy
from tuner.storage.records import TrialRecord, record_feasible


def rule_conditions(policy_text: str | None) -> Policy | None:
    """The parsed policy of an export rule's text (None when it is no policy: ``trial N``, empty)."""
    try:
        return parse_policy(policy_text) if policy_text else None
    except PolicyError:
        return None


def rule_misses(record: TrialRecord, policy_text: str | None) -> list[str]:
    """How ``record`` fails the export rule whose policy is ``policy_text``: one phrase per missed condition
    (its value, the bound, how far), or why it is not feasible; [] when it meets the rule."""
    if not record_feasible(record):
        violated = sorted(name for name, value in record.constraints.items() if value > 0)
        return [f"infeasible ({', '.join(violated) or record.outcome})"]
    policy = rule_conditions(policy_text)
    misses = []
    for condition in policy.conditions if policy is not None else ():
        if condition.holds(record):
            continue
        value = record.metric_value(condition.metric)
        if value is None:
            misses.append(f"{condition.metric} not measured (the rule asks {condition.op} {condition.bound:g})")
            continue
        opposite = {"<=": ">", "<": ">=", ">=": "<", ">": "<="}.get(condition.op, "vs")
        if condition.op in ("<=", "<"):
            far = f" ({value / condition.bound:.1f}x the bound)" if value > 0 and condition.bound > 0 else ""
        else:
            far = f" ({condition.bound - value:.4g} short)"
        misses.append(f"{condition.metric} {value:.4g} {opposite} {condition.bound:g}{far}")
    return misses


@dataclass(frozen=True)
class Headline:
    """The chosen trial's speed-up on ``speed_metric`` (comparator / chosen, > 1 = faster; None when either is
    unmeasured) against ``comparator`` (its ``against`` role), and how the ``baseline`` fails the rule
    (``baseline_misses``, empty when it meets it or there is none)."""

    chosen: TrialRecord
    against: str
    comparator: TrialRecord
    speed_metric: str | None
    speedup: float | None
    baseline: TrialRecord | None
    baseline_misses: tuple[str, ...]

    def text(self) -> str:
        """``1.45x faster than the reference (trial 0); the baseline (trial 1) fails the export rule: ...``."""
        if self.comparator.number == self.chosen.number:
            head = f"the {self.against} itself"
        elif self.speedup is None:
            head = f"no speed-up against the {self.against} (trial {self.comparator.number}): not measured"
        else:
            faster = f"{self.speedup:.2f}x faster" if self.speedup >= 1 else f"{1 / self.speedup:.2f}x slower"
            head = f"{faster} than the {self.against} (trial {self.comparator.number})"
        if self.baseline is not None and self.baseline_misses:
            head += f"; the baseline (trial {self.baseline.number}) fails the export rule: " + ", ".join(
                self.baseline_misses
            )
        return head

    def document(self) -> dict[str, Any]:
        """The headline as data (``best.yaml``'s ``selection.headline``)."""
        return {
            "against": self.against,
            "trial": self.comparator.number,
            "speed_metric": self.speed_metric,
            "speedup": self.speedup,
            "text": self.text(),
            "baseline_meets_rule": None if self.baseline is None else not self.baseline_misses,
            "baseline_misses": list(self.baseline_misses),
        }


def headline(
    chosen: TrialRecord,
    baseline: TrialRecord | None,
    reference: TrialRecord | None,
    policy_text: str | None,
    speed_metric: str | None,
) -> Headline | None:
    """The :class:`Headline` of ``chosen`` (see the module docstring); None without a baseline or reference."""
    base_misses = tuple(rule_misses(baseline, policy_text)) if baseline is not None else ()
    if baseline is not None and not base_misses:
        against, comparator = "baseline", baseline
    elif reference is not None and not rule_misses(reference, policy_text):
        against, comparator = "reference", reference
    elif baseline is not None:
        against, comparator = "baseline", baseline
    else:
        return None
    mine = chosen.metric_value(speed_metric) if speed_metric else None
    theirs = comparator.metric_value(speed_metric) if speed_metric else None
    speedup = theirs / mine if mine and theirs is not None and mine > 0 else None
    return Headline(chosen, against, comparator, speed_metric, speedup, baseline, base_misses)


def measured_roles(records: Sequence[TrialRecord]) -> dict[str, TrialRecord]:
    """The study's measured ``baseline`` and ``reference`` records (OK, not copies), by role."""
    return {
        r.role: r
        for r in records
        if r.outcome == "OK" and r.duplicate_of is None and r.role in ("baseline", "reference")
    }
