"""Which trial a study ships: the export rule, as text (a policy or a profile), parsed and checked.

A spec may say how its study chooses the setting it exports (``best.yaml`` at the end
of ``tuner run``, ``tuner export`` without options, the service's export, the MLflow
study run's ``tuner.chosen`` tag)::

    export: {policy: "minimize latency_p50_s subject to stlpips_alex <= 0.03"}
    export: {profile: balanced}

Policies::

    minimize latency_p50_s subject to stlpips_alex <= 0.15 and peak_vram_gb <= 40
    maximize psnr_db subject to latency_p50_s < 0.5
    knee
    lexicographic latency_p50_s, psnr_db            # directions from the metrics
    lexicographic min latency_p50_s, max psnr_db    # or given

Profiles: ``fast``, ``balanced`` (the knee), ``quality`` (:mod:`tuner.front.choice`).
A spec that says nothing gets :data:`DEFAULT_RULE`, the knee of the front: a trade-off,
never the extreme of one objective (why: ``docs/benchmarks.md``, "Which setting is
exported by default"). The command line's ``--policy`` / ``--profile`` / ``--objective`` /
``--trial`` override the spec.

Checked when the spec is validated (:func:`check_export_rule`): the policy parses, every
metric it names is one the study records, and no condition is impossible — a bound outside
the metric's range (:func:`metric_range`: a distance, a time or a size is never negative; a
ratio such as SSIM or exact match lies in [0, 1]) or conditions on one metric that exclude
each other. Quality metrics a policy names are computed for every trial
(:attr:`tuner.spec.models.StudySpec.used_metrics`).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict, model_validator

from tuner.errors import InputError
from tuner.spec.metrics import MEASURED_METRICS, catalogue_entry, known_metric

if TYPE_CHECKING:
    from tuner.spec.models import StudySpec

Profile = Literal["fast", "balanced", "quality"]
PROFILES: tuple[str, ...] = ("fast", "balanced", "quality")
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}
_CONDITION = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_.]*(?::(?:worst|p[1-9][0-9]?))?)\s*(<=|>=|==|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?::(?:worst|p[1-9][0-9]?))?$")


class PolicyError(InputError):
    """A policy expression that cannot be parsed or that no trial satisfies; the message says which."""


class HasMetrics(Protocol):
    def metric_value(self, name: str) -> float | None: ...


@dataclass(frozen=True)
class Condition:
    metric: str
    op: str
    bound: float

    def holds(self, record: HasMetrics) -> bool:
        value = record.metric_value(self.metric)
        return value is not None and _COMPARE[self.op](value, self.bound)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


@dataclass(frozen=True)
class Policy:
    """A parsed policy: ``kind`` is ``optimize``, ``knee`` or ``lexicographic``."""

    kind: str
    text: str
    keys: tuple[tuple[str, str], ...] = ()  # (metric, "minimize" | "maximize" | "" = the metric's own)
    conditions: tuple[Condition, ...] = ()

    @property
    def metrics(self) -> list[str]:
        """Every metric the policy names, in order, once each."""
        return list(dict.fromkeys([m for m, _ in self.keys] + [c.metric for c in self.conditions]))


def parse_policy(text: str) -> Policy:
    """Parse a policy expression (see module docs); raises :class:`PolicyError` naming the problem."""
    stripped = " ".join(text.split())
    if not stripped:
        raise PolicyError("policy is empty: use 'minimize METRIC [subject to ...]', 'knee' or 'lexicographic ...'")
    lowered = stripped.lower()
    if lowered == "knee":
        return Policy("knee", stripped)
    if lowered == "lexicographic" or lowered.startswith("lexicographic "):
        rest = stripped[len("lexicographic") :].strip()
        if not rest:
            raise PolicyError(f"policy '{text}': lexicographic needs at least one metric")
        keys = []
        for part in (p.strip() for p in rest.split(",")):
            words = part.split()
            if len(words) == 2 and words[0].lower() in ("min", "max"):
                keys.append((words[1], "minimize" if words[0].lower() == "min" else "maximize"))
            elif len(words) == 1:
                keys.append((words[0], ""))
            else:
                raise PolicyError(f"policy '{text}': lexicographic term '{part}' is not 'METRIC' or 'min|max METRIC'")
            if not _NAME.match(keys[-1][0]):
                raise PolicyError(f"policy '{text}': '{keys[-1][0]}' is not a metric name")
        return Policy("lexicographic", stripped, tuple(keys))
    match = re.match(r"^(minimize|maximize)\s+(\S+)(?:\s+subject\s+to\s+(.+))?$", stripped, re.IGNORECASE)
    if not match:
        raise PolicyError(
            f"policy '{text}' is not understood: use 'minimize|maximize METRIC "
            f"[subject to METRIC <= NUMBER and ...]', 'knee' or 'lexicographic M1, M2'"
        )
    if not _NAME.match(match.group(2)):
        raise PolicyError(f"policy '{text}': '{match.group(2)}' is not a metric name")
    conditions = []
    for part in re.split(r"\s+and\s+", match.group(3) or "", flags=re.IGNORECASE) if match.group(3) else []:
        found = _CONDITION.match(part)
        if not found:
            raise PolicyError(f"policy '{text}': condition '{part}' is not 'METRIC <=|<|>=|>|== NUMBER'")
        conditions.append(Condition(found.group(1), found.group(2), float(found.group(3))))
    return Policy("optimize", stripped, ((match.group(2), match.group(1).lower()),), tuple(conditions))


class ExportSpec(BaseModel):
    """The spec's ``export`` section: a ``policy`` expression or a ``profile`` (not both)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str | None = None
    profile: Profile | None = None

    @model_validator(mode="after")
    def _one(self) -> ExportSpec:
        if self.policy is not None and self.profile is not None:
            raise ValueError("give policy or profile, not both")
        if self.policy is None and self.profile is None:
            raise ValueError(
                "give a policy (e.g. 'minimize latency_p50_s subject to stlpips_alex <= 0.03') "
                "or a profile (fast, balanced, quality)"
            )
        if self.policy is not None:
            try:
                parse_policy(self.policy)
            except PolicyError as error:
                raise ValueError(str(error)) from None
        return self


@dataclass(frozen=True)
class ExportRule:
    """How a study chooses its export: a ``policy`` text or a ``profile``, and where the rule came from
    (``source``: ``spec``, ``command line`` or ``default``)."""

    policy: str | None
    profile: str | None
    source: str

    def describe(self) -> str:
        """The rule in words for notices and the export document: ``knee (default: ...)``."""
        text = f"profile {self.profile}" if self.profile is not None else str(self.policy)
        if self.source == "default":
            return f"{text} (default: the spec has no export rule)"
        return f"{text} (the spec's export rule)" if self.source == "spec" else f"{text} ({self.source})"


DEFAULT_RULE = ExportRule(policy="knee", profile=None, source="default")
"""The rule of a spec without ``export``: the knee of the front."""


def rule_of(export: ExportSpec | None) -> ExportRule:
    """The rule a spec's ``export`` section stands for (:data:`DEFAULT_RULE` when it has none)."""
    if export is None:
        return DEFAULT_RULE
    return ExportRule(policy=export.policy, profile=export.profile, source="spec")


_UNIT_INTERVAL = frozenset(
    {
        "flicker_score",
        "text_exact_match",
        "text_f1",
        "text_rouge_l",
        "text_gt_exact_match",
        "text_gt_f1",
        "text_gt_rouge_l",
        "text_truncated_fraction",
    }
)
_CORRELATIONS = frozenset({"lipsync_peak_corr", "lipsync_onset_peak_corr", "ssim", "ssim_mouth"})
_NON_NEGATIVE_UNITS = frozenset({"s", "GB", "items/s", "dB", "levels"})


def metric_range(name: str) -> tuple[float, float]:
    """The values ``name`` can take (inclusive): [0, 1] for a score or fraction, [-1, 1] for a
    correlation or SSIM, [0, inf) for a time, size, rate, distance, error or count; (-inf, inf) when unknown
    (an adapter's own metric, a lag, a margin)."""
    if name in _UNIT_INTERVAL:
        return 0.0, 1.0
    if name in _CORRELATIONS:
        return -1.0, 1.0
    entry = catalogue_entry(name)
    if entry is None:
        return -math.inf, math.inf
    unit = entry[0]
    if name in MEASURED_METRICS or unit in _NON_NEGATIVE_UNITS or name.startswith("count_"):
        return 0.0, math.inf
    if any(part in name for part in ("lpips", "error", "ratio", "seam", "abs_lag", "chrf", "bleu")):
        return 0.0, math.inf
    return -math.inf, math.inf


def _impossible(metric: str, conditions: list[Condition]) -> str | None:
    """Why no value of ``metric`` satisfies every one of ``conditions`` (None when some value does)."""
    low, high = metric_range(metric)
    low_open = high_open = False
    for c in conditions:
        if c.op in (">=", ">", "==") and (c.bound > low or (c.bound == low and c.op == ">")):
            low, low_open = c.bound, c.op == ">"
        if c.op in ("<=", "<", "==") and (c.bound < high or (c.bound == high and c.op == "<")):
            high, high_open = c.bound, c.op == "<"
    if low < high or (low == high and not (low_open or high_open)):
        return None
    natural = metric_range(metric)
    said = " and ".join(str(c) for c in conditions)
    if len(conditions) == 1:
        return f"{said} is impossible: {metric} lies in {_interval(*natural)}"
    return f"{said} exclude each other"


def _interval(low: float, high: float) -> str:
    return f"{'(' if low == -math.inf else '['}{low:g}, {high:g}{')' if high == math.inf else ']'}"


def check_export_rule(spec: StudySpec) -> None:
    """Raise ``ValueError('export.policy: ...')`` when the spec's policy names a metric the study does not
    record or asks for something impossible (see module docs)."""
    if spec.export is None or spec.export.policy is None:
        return
    policy = parse_policy(spec.export.policy)
    declared = spec.workload.declared_metrics()
    for metric in policy.metrics:
        if not known_metric(metric) and metric not in declared:
            raise ValueError(f"export.policy: unknown metric '{metric}' (see the metric list in docs/specs.md)")
    for metric in dict.fromkeys(c.metric for c in policy.conditions):
        problem = _impossible(metric, [c for c in policy.conditions if c.metric == metric])
        if problem is not None:
            raise ValueError(f"export.policy: {problem}: no trial can satisfy it")
