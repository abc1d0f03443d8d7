"""What one measured trial produces: outcomes, metrics and the trial result.

These are plain, immutable records that flow downstream from the worker to the
study (tell), the tracker and the exporter. They are JSON-serialisable through
:meth:`TrialResult.to_json` / :meth:`TrialResult.from_json`, which is how a worker
process hands its result to the coordinator.

Outcomes
--------
``OK``       the workload ran and was measured.
``OOM``      the workload ran out of (device or host) memory. Infeasible point.
``TIMEOUT``  the worker passed its wall-clock limit and was killed. Infeasible point.
``CRASH``    the worker died (signal, non-zero exit, unexpected exception).
``INVALID``  the setting was rejected (a spec rule, or the workload refused it)
             and nothing was measured.
``SKIPPED_PREDICTED_OOM``  never run: the study's memory model
             (:mod:`tuner.search.feasibility`) predicted it would run out of memory.
             Recorded by the coordinator like a rule-refused INVALID (free, an
             infeasible point for the sampler); a worker never reports it.
``SKIPPED_PREDICTED_DOMINATED``  never run: its predicted best case is beaten by
             the current front (``sampler.skip_dominated``, :mod:`tuner.search.dominance`).
             Recorded like a predicted OOM: free, a wall for the sampler.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Direction = Literal["minimize", "maximize"]


class Outcome(str, enum.Enum):
    """How a trial ended. The string value is what the storage records."""

    OK = "OK"
    OOM = "OOM"
    TIMEOUT = "TIMEOUT"
    CRASH = "CRASH"
    INVALID = "INVALID"
    SKIPPED_PREDICTED_OOM = "SKIPPED_PREDICTED_OOM"
    SKIPPED_PREDICTED_DOMINATED = "SKIPPED_PREDICTED_DOMINATED"

    @property
    def is_infeasible_point(self) -> bool:
        """OOM and TIMEOUT are told to the sampler as infeasible points (the wall)."""
        return self in (Outcome.OOM, Outcome.TIMEOUT)


@dataclass(frozen=True)
class Metric:
    """One named measurement.

    ``value`` is ``None`` exactly when the metric is unavailable; ``reason`` then
    says why (never a stand-in number). ``unit`` is a short SI-ish unit string
    ("s", "GB", "dB", "1" for ratios), ``direction`` is the better direction.
    """

    name: str
    value: float | None
    unit: str
    direction: Direction
    reason: str | None = None

    @property
    def available(self) -> bool:
        return self.value is not None and math.isfinite(self.value)

    @staticmethod
    def unavailable(name: str, unit: str, direction: Direction, reason: str) -> Metric:
        return Metric(name=name, value=None, unit=unit, direction=direction, reason=reason)


@dataclass(frozen=True)
class TrialResult:
    """Everything the worker reports about one candidate.

    ``metrics`` maps metric name to :class:`Metric`. ``log_tail`` holds the last
    lines of the worker's stdout/stderr (for CRASH / OOM / TIMEOUT diagnosis).
    ``eval_time_s`` is the time spent in quality evaluators, never charged to the
    candidate's latency. ``wall_time_s`` is the worker's total wall time as seen
    from outside (process start to exit), seconds. ``invocation`` is what an
    adapter actually executed (for a command: the exact argv, env overrides and
    working directory), in the shape :func:`tuner.ship.invocation.render_invocation` gives.
    ``per_input`` (a trial of several inputs, the spec's ``cases``): input name -> that input's metrics;
    ``metrics`` then holds their mean (a peak: their maximum) and the asked ``:worst`` / ``:p<NN>`` figures
    (:mod:`tuner.runner.measure.inputs`). ``cliffs``: one line per input worse than the mean by more than the
    spec's ``cliff_margins``.
    """

    outcome: Outcome
    metrics: dict[str, Metric] = field(default_factory=dict)
    reason: str | None = None
    log_tail: str = ""
    wall_time_s: float = 0.0
    eval_time_s: float = 0.0
    output_path: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    samples: dict[str, str] = field(default_factory=dict)  # sample name -> file (tuner.runner.measure.samples)
    invocation: dict[str, Any] | None = (
        None  # what ran natively (argv, env, cwd / target / url), see tuner.ship.invocation
    )
    per_input: dict[str, dict[str, Metric]] = field(default_factory=dict)
    cliffs: list[str] = field(default_factory=list)

    def metric_value(self, name: str) -> float | None:
        """The metric's value, or None when absent or unavailable."""
        metric = self.metrics.get(name)
        return metric.value if metric is not None and metric.available else None

    def to_json(self) -> str:
        payload = asdict(self)
        payload["outcome"] = self.outcome.value
        return json.dumps(payload, allow_nan=False, default=str)

    @staticmethod
    def from_json(text: str) -> TrialResult:
        payload = json.loads(text)
        metrics = {name: Metric(**m) for name, m in payload.pop("metrics", {}).items()}
        per_input = {
            case: {name: Metric(**m) for name, m in figures.items()}
            for case, figures in payload.pop("per_input", {}).items()
        }
        outcome = Outcome(payload.pop("outcome"))
        return TrialResult(outcome=outcome, metrics=metrics, per_input=per_input, **payload)
