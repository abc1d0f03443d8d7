"""What every quality evaluator receives, and the shape of its answer.

A quality evaluator is a function ``(output, reference, context) -> list[Metric]``
where ``output`` and ``reference`` are :class:`tuner.workloads.base.WorkloadOutput`
objects (the candidate's and the reference setting's, same inputs, same seed)
and ``context`` is an :class:`EvalContext`. It returns one :class:`Metric` per
name it computes; a metric it cannot compute honestly is returned unavailable
with the reason (``Metric.unavailable``), never as a stand-in number.

Evaluators run inside the worker process after the latency measurement; their
time is reported as the trial's ``eval_time_s`` and never charged to the
candidate's latency.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuner.results import Metric


@dataclass(frozen=True)
class EvalContext:
    """``inputs``: the spec's inputs as written. ``settings``: the candidate's
    parameters and derived values. ``reference_settings``: the reference's, when known.
    ``device``: where evaluators with a network may run (``"cpu"`` or ``"cuda"``).
    """

    inputs: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    reference_settings: Mapping[str, Any] | None = None
    device: str = "cpu"
    reference_missing: str | None = None  # why there is no reference output (the unavailable metrics' reason)
    resize_to_reference: bool = False  # frames of another size are the same scene (reference_shape.same_content)


QualityFunction = Callable[[Any, Any, EvalContext], list[Metric]]
