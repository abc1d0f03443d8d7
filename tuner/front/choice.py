"""Which trial to ship: selection policies and profiles over a study's feasible measured trials.

:func:`choose_by_rule` applies an export rule (:class:`tuner.spec.export_rule.ExportRule`: the
spec's ``export``, the command line's, or the default, the knee); the export
(:mod:`tuner.ship.export`), the closing summary and the MLflow study run's ``tuner.chosen``
tag all choose through it. Policies (parsed by :func:`tuner.spec.export_rule.parse_policy`)::

    minimize latency_p50_s subject to stlpips_alex <= 0.15 and peak_vram_gb <= 40
    maximize psnr_db subject to latency_p50_s < 0.5
    knee
    lexicographic latency_p50_s, psnr_db            # directions from the metrics
    lexicographic min latency_p50_s, max psnr_db    # or given

Metric names are any metric a trial recorded (objective or not); a condition on
a metric a trial lacks (or recorded as unavailable) excludes that trial.
``minimize`` / ``maximize`` and ``lexicographic`` consider every feasible
measured trial; ``knee`` considers the front (see :func:`tuner.pareto.knee_point`).
Lexicographic ties are broken by the next metric, then by trial number;
values within 1e-12 relative count as ties.

Profiles (``--profile``), derived from the front: ``fast`` — the front point
best on the speed objective (the first objective measured in seconds, else the
first objective); ``quality`` — the front point best on the first other
objective; ``balanced`` — the knee of the front.

Noise (:func:`prefer_stable`): a pick that is noisy (:attr:`TrialRecord.noisy`) is
replaced by the best stable trial among the same candidates (feasible, satisfying the
conditions; for a profile or the knee, any feasible trial) that is within the noisy
pick's spread on every ranking key: no worse than ``value × (1 ± cv)`` on a timed
metric (unit ``s`` or ``items/s``, ``cv`` the pick's latency CV), no worse at all (ties
within 1e-9 relative) on any other metric. Quality numbers are deterministic; only the
timing is uncertain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.pareto import Point, knee_point, pareto_ranks
from tuner.spec.export_rule import PROFILES, ExportRule, Policy, PolicyError, parse_policy
from tuner.storage.records import TrialRecord

__all__ = [
    "PROFILES",
    "Choice",
    "Policy",
    "PolicyError",
    "choose_by_rule",
    "eligible",
    "front_of",
    "parse_policy",
    "prefer_stable",
    "profile_policy",
    "ranking_keys",
    "select",
    "select_profile",
    "speed_objective",
    "within_spread",
]


def _direction_of(metric: str, records: Sequence[TrialRecord], given: str) -> str:
    if given:
        return given
    for record in records:
        entry = record.metrics.get(metric)
        if entry and entry.get("direction") in ("minimize", "maximize"):
            return str(entry["direction"])
    raise PolicyError(f"no trial recorded the metric '{metric}': cannot tell its direction")


def front_of(records: Sequence[TrialRecord], directions: Sequence[str]) -> list[TrialRecord]:
    """The records on the Pareto front of their objective values (``records`` must be feasible, measured)."""
    ranks = pareto_ranks([Point(r.number, tuple(r.values or ())) for r in records], directions)
    return [r for r in records if ranks[r.number] == 0]


def select(policy: Policy, feasible: Sequence[TrialRecord], directions: Sequence[str]) -> TrialRecord:
    """The trial ``policy`` picks from ``feasible`` (feasible, measured records)."""
    if not feasible:
        raise PolicyError("no feasible measured trial to choose from")
    if policy.kind == "knee":
        front = front_of(feasible, directions)
        chosen = knee_point([Point(r.number, tuple(r.values or ())) for r in front], directions)
        assert chosen is not None
        return next(r for r in front if r.number == chosen.number)
    keys = [(metric, _direction_of(metric, feasible, given)) for metric, given in policy.keys]
    candidates = eligible(policy, feasible)
    for metric, direction in keys:
        sign = 1.0 if direction == "minimize" else -1.0
        best = min(sign * (r.metric_value(metric) or 0.0) for r in candidates)
        tolerance = abs(best) * 1e-12
        candidates = [r for r in candidates if sign * (r.metric_value(metric) or 0.0) <= best + tolerance]
    return min(candidates, key=lambda r: r.number)


def eligible(policy: Policy, feasible: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The records ``policy`` chooses among: its conditions hold and every key metric has a value.

    For ``knee``: all of ``feasible``. Raises :class:`PolicyError` when none is left (naming why).
    """
    if policy.kind == "knee":
        return list(feasible)
    allowed = [r for r in feasible if all(c.holds(r) for c in policy.conditions)]
    if not allowed:
        raise PolicyError(
            f"policy '{policy.text}': none of the {len(feasible)} feasible trials satisfies "
            + " and ".join(str(c) for c in policy.conditions)
        )
    for metric, _ in policy.keys:
        allowed = [r for r in allowed if r.metric_value(metric) is not None]
        if not allowed:
            raise PolicyError(f"policy '{policy.text}': no feasible trial has a value for '{metric}'")
    return allowed


def ranking_keys(
    policy: Policy, records: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The (metric, direction) pairs ``policy`` ranks on; for ``knee``, the ``objectives``."""
    if policy.kind == "knee":
        return list(objectives)
    return [(metric, _direction_of(metric, records, given)) for metric, given in policy.keys]


_TIMED_UNITS = frozenset({"s", "items/s"})
_TIE = 1e-9


def within_spread(candidate: TrialRecord, noisy: TrialRecord, keys: Sequence[tuple[str, str]]) -> bool:
    """``candidate`` is no worse than ``noisy`` beyond ``noisy``'s spread on every key (see module docs)."""
    cv = noisy.latency_cv or 0.0
    for metric, direction in keys:
        mine, theirs = candidate.metric_value(metric), noisy.metric_value(metric)
        if mine is None or theirs is None:
            return False
        tolerance = max(cv, _TIE) if (noisy.metrics.get(metric) or {}).get("unit") in _TIMED_UNITS else _TIE
        sign = 1.0 if direction == "minimize" else -1.0
        if sign * mine > sign * theirs + tolerance * abs(theirs):
            return False
    return True


def prefer_stable(
    pick: TrialRecord, pool: Sequence[TrialRecord], keys: Sequence[tuple[str, str]]
) -> tuple[TrialRecord, TrialRecord | None]:
    """``(shipped, replaced)``: ``pick`` and None, or — when ``pick`` is noisy and a stable record of ``pool``
    is within its spread on ``keys`` — the best such record (by ``keys`` in order, then trial number) and ``pick``.
    """
    if not pick.noisy:
        return pick, None
    stable = [r for r in pool if not r.noisy and r.number != pick.number and within_spread(r, pick, keys)]
    if not stable:
        return pick, None

    def rank(record: TrialRecord) -> tuple[float, ...]:
        return tuple((1.0 if d == "minimize" else -1.0) * (record.metric_value(m) or 0.0) for m, d in keys)

    return min(stable, key=lambda r: (rank(r), r.number)), pick


def speed_objective(names: Sequence[str], records: Sequence[TrialRecord]) -> int:
    """Index of the first objective measured in seconds (else 0)."""
    for index, name in enumerate(names):
        if any((r.metrics.get(name) or {}).get("unit") == "s" for r in records):
            return index
    return 0


def profile_policy(
    profile: str, names: Sequence[str], directions: Sequence[str], records: Sequence[TrialRecord]
) -> Policy:
    """The policy a profile stands for in this study (see module docs)."""
    if profile not in PROFILES:
        raise PolicyError(f"unknown profile '{profile}': use {', '.join(PROFILES)}")
    if profile == "balanced":
        return Policy("knee", "knee")
    speed = speed_objective(names, records)
    index = speed if profile == "fast" else next((i for i in range(len(names)) if i != speed), speed)
    others = [(names[i], directions[i]) for i in range(len(names)) if i != index]
    return Policy(
        "lexicographic",
        f"lexicographic {', '.join(n for n, _ in [(names[index], ''), *others])}",
        ((names[index], directions[index]), *others),
    )


def select_profile(
    profile: str, feasible: Sequence[TrialRecord], names: Sequence[str], directions: Sequence[str]
) -> tuple[Policy, TrialRecord]:
    """The profile's policy and its pick among the front of ``feasible``."""
    policy = profile_policy(profile, names, directions, feasible)
    front = front_of(feasible, directions)
    if policy.kind == "knee":
        return policy, select(policy, front, directions)
    values = {r.number: dict(zip(names, r.values or ())) for r in front}
    best = min(
        front,
        key=lambda r: (
            tuple((1.0 if d == "minimize" else -1.0) * values[r.number][n] for n, d in policy.keys) + (r.number,)
        ),
    )
    return policy, best


@dataclass(frozen=True)
class Choice:
    """The chosen record and how: the policy text it was chosen by (a profile's policy, ``trial N``,
    ``minimize M (objective)``), the profile (if one was asked for), the noisy trial the policy picked
    that ``record`` (stable, within its spread) replaced, if any, and the rule in words with where it
    came from (:meth:`tuner.spec.export_rule.ExportRule.describe`)."""

    record: TrialRecord
    policy: str
    profile: str | None
    replaced: TrialRecord | None = None
    rule: str = ""


def choose_by_rule(
    feasible: Sequence[TrialRecord], names: Sequence[str], directions: Sequence[str], rule: ExportRule
) -> Choice:
    """The trial ``rule`` picks among ``feasible`` (feasible, measured records of a study whose objectives
    are ``names`` / ``directions``), a noisy pick replaced by a stable one within its spread
    (:func:`prefer_stable`). Raises :class:`PolicyError` when the rule picks nothing (saying why)."""
    if not feasible:
        raise PolicyError("no feasible measured trial to choose from")
    objectives = list(zip(names, directions))
    if rule.profile is not None:
        policy, record = select_profile(rule.profile, feasible, names, directions)
        keys, pool = ranking_keys(policy, feasible, objectives), list(feasible)
    else:
        policy = parse_policy(rule.policy or "knee")
        record = select(policy, feasible, directions)
        keys, pool = ranking_keys(policy, feasible, objectives), eligible(policy, feasible)
    shipped, replaced = prefer_stable(record, pool, keys)
    return Choice(shipped, policy.text, rule.profile, replaced, rule.describe())
