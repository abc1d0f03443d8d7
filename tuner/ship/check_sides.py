"""The two sides of ``tuner check`` (baseline and chosen): what their runs measured, and the quality verdict.

:class:`SideMeasurement` holds one side's figures across the check's rounds: the median
latency of each run (seconds), each run's within-run CV, the last value of each quality
figure and, for a quality figure some run did not measure, why.

:func:`quality_drops` is the quality half of the check's verdict: for each quality objective,
the drop against the baseline (how much worse the chosen setting is, in the metric's unit).
A regression is a drop above ``--max-quality-drop`` when given, else a drop larger than the
exported one by more than 1 % of it (+1e-6): quality metrics are deterministic for a fixed
seed. A quality objective that goes missing on either side (any run not measuring it), or
that has no exported delta to compare with (and no ``--max-quality-drop``), fails with the
reason. The speed half, and running the sides, is :mod:`tuner.ship.check`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tuner.ship.config_schema import ConfigV1
from tuner.spec.metrics import QUALITY_METRIC_NAMES, base_metric

__all__ = ["QUALITY_ABSOLUTE_TOLERANCE", "QUALITY_RELATIVE_TOLERANCE", "SideMeasurement", "quality_drops"]

QUALITY_RELATIVE_TOLERANCE = 0.01
QUALITY_ABSOLUTE_TOLERANCE = 1e-6


@dataclass
class SideMeasurement:
    """One setting's runs: p50 latency per round (seconds), within-run CVs, quality values, what went missing."""

    label: str
    p50_s: list[float] = field(default_factory=list)
    cvs: list[float] = field(default_factory=list)
    quality: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # quality metric -> why a run did not measure it

    @property
    def median_s(self) -> float:
        return statistics.median(self.p50_s)

    @property
    def cv(self) -> float | None:
        """Median within-run coefficient of variation of the repeats (None when no run had one)."""
        return statistics.median(self.cvs) if self.cvs else None


def _why_missing(side: SideMeasurement, name: str, measured: list[str]) -> str | None:
    """Why ``side`` has no value of quality metric ``name`` in every run (None: it has)."""
    if name not in measured:
        return "not measured: the config's spec does not name it"
    if name in side.missing:
        return side.missing[name]
    return None if name in side.quality else "no run measured it"


def quality_drops(
    config: ConfigV1,
    base: SideMeasurement,
    chosen: SideMeasurement,
    measured: list[str],
    max_drop: float | None,
    failures: list[str],
) -> dict[str, float]:
    """Drops (metric units, > 0: worse than the baseline) of the quality objectives; failures appended."""
    assert config.baseline is not None
    drops: dict[str, float] = {}
    for name, entry in config.baseline.comparison.quality_delta.items():
        if base_metric(name) not in QUALITY_METRIC_NAMES:
            continue  # not a quality metric (memory, throughput): not re-judged here
        lost = [
            f"the {side.label} side ({why})"
            for side in (chosen, base)
            if (why := _why_missing(side, name, measured)) is not None
        ]
        if lost:
            failures.append(f"{name}: quality objective missing on {' and on '.join(lost)}")
            continue
        sign = -1.0 if entry.direction == "maximize" else 1.0
        drop = sign * (chosen.quality[name] - base.quality[name])
        drops[name] = drop
        if max_drop is not None:
            if drop > max_drop:
                failures.append(
                    f"{name}: quality drop {drop:.4g} against the baseline is above --max-quality-drop {max_drop:g}"
                )
        elif entry.delta is None:
            failures.append(
                f"{name}: the config has no exported quality delta to compare the drop {drop:.4g} "
                f"with (unavailable at export); pass --max-quality-drop"
            )
        else:
            exported = sign * entry.delta
            allowed = exported + QUALITY_ABSOLUTE_TOLERANCE + QUALITY_RELATIVE_TOLERANCE * abs(exported)
            if drop > allowed:
                failures.append(
                    f"{name}: quality drop {drop:.4g} against the baseline is above the exported {exported:.4g} (+1 %)"
                )
    return drops
