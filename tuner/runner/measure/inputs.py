"""A trial of several inputs: which inputs it runs, one figure per metric over them, cliffs, saved outputs.

A spec with ``cases`` (:mod:`tuner.spec.quality.cases`) makes every measured trial run each input; the worker
measures and evaluates each one apart (:func:`tuner.runner.worker.execute`) and then reports, per metric:

* the plain name (``psnr_db``, ``latency_p50_s``): the **mean** over the inputs -- for a peak
  (``peak_*``) the **maximum**, the trial's own peak;
* ``<metric>:worst``: the worst input's value (the lowest of a metric to maximize, the highest of one to
  minimize);
* ``<metric>:p<NN>``: the value ``NN`` % of the inputs are at least as good as (linear interpolation; for
  a metric to minimize the NN-th percentile, for one to maximize the (100 - NN)-th).

A figure over inputs is unavailable when any input's is, with the inputs' reasons (the reason alone when every
input has the same one): a mean of the inputs that happened to work is never reported as the trial's. The spec's ``cliff_margins`` flag an input worse
than the mean by more than the margin (:func:`cliff_lines`).

Outputs: a trial of one input saves its :class:`~tuner.workloads.base.WorkloadOutput` as before; one of
several saves every input's in one ``.npz`` (:func:`save_outputs`, keys ``<k>.<array>`` and
``input_names``), so the reference still travels as one file with one hash.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.results import Metric
from tuner.spec.metrics import split_aggregate

if TYPE_CHECKING:
    from tuner.runner.base import TrialRequest
    from tuner.workloads.base import WorkloadOutput

INPUT_NAMES_KEY = "input_names"
PEAK_PREFIX = "peak_"


def input_sets_of(request: TrialRequest) -> list[tuple[str, dict[str, Any]]]:
    """``(name, inputs)`` of each input the request runs; ``[("", request.inputs)]`` for one."""
    if not request.input_sets:
        return [("", dict(request.inputs))]
    return [(str(entry["name"]), dict(entry["inputs"])) for entry in request.input_sets]


def percentile_of_badness(values: Sequence[float], percent: float, direction: str) -> float:
    """The value ``percent`` % of ``values`` are at least as good as (see the module docstring)."""
    at = percent if direction == "minimize" else 100.0 - percent
    return float(np.percentile(np.asarray(values, dtype=float), at))


def _combined(name: str, how: str, figures: Sequence[tuple[str, Metric]]) -> Metric:
    """``how`` (``mean``, ``worst``, ``p<NN>``) of one metric over ``figures`` ((input, metric) pairs)."""
    first = figures[0][1]
    missing = [
        (case, metric.reason or "no value") for case, metric in figures if not metric.available or metric.value is None
    ]
    if missing:
        reasons = {why for _, why in missing}
        if len(missing) == len(figures) and len(reasons) == 1:
            why = missing[0][1]  # every input, for the same reason: the reason alone
        else:
            why = "; ".join(f"input {case}: {why}" if case else why for case, why in missing)
        return Metric.unavailable(name, first.unit, first.direction, why)
    values = [float(m.value) for _, m in figures if m.value is not None]
    if how == "mean":
        value = max(values) if first.name.startswith(PEAK_PREFIX) else sum(values) / len(values)
    elif how == "worst":
        value = max(values) if first.direction == "minimize" else min(values)
    else:
        value = percentile_of_badness(values, float(how[1:]), first.direction)
    return Metric(name, value, first.unit, first.direction)


def combine_inputs(per_input: Mapping[str, Mapping[str, Metric]], aggregates: Sequence[str]) -> dict[str, Metric]:
    """The trial's metrics from each input's: every metric's mean (a peak's maximum) under its own name, and
    each of ``aggregates`` (``<metric>:worst`` / ``<metric>:p<NN>``) whose metric was measured. A metric one
    input lacks is unavailable, naming that input."""
    names = list(dict.fromkeys(name for metrics in per_input.values() for name in metrics))
    combined: dict[str, Metric] = {}
    for name in names if len(per_input) > 1 else []:
        figures = [
            (case, metrics.get(name) or _missing(name, metrics, per_input)) for case, metrics in per_input.items()
        ]
        combined[name] = _combined(name, "mean", figures)
    if len(per_input) == 1:
        combined = dict(next(iter(per_input.values())))
    for wanted in aggregates:
        base, how = split_aggregate(wanted)
        if how is None or base not in names:
            continue
        figures = [
            (case, metrics.get(base) or _missing(base, metrics, per_input)) for case, metrics in per_input.items()
        ]
        combined[wanted] = _combined(wanted, how, figures)
    return combined


def _missing(name: str, metrics: Mapping[str, Metric], per_input: Mapping[str, Mapping[str, Metric]]) -> Metric:
    """An input that did not report ``name``: unavailable, with another input's unit and direction."""
    known = next(m[name] for m in per_input.values() if name in m)
    return Metric.unavailable(name, known.unit, known.direction, "not reported for this input")


def cliff_lines(
    per_input: Mapping[str, Mapping[str, Metric]], combined: Mapping[str, Metric], margins: Mapping[str, float]
) -> list[str]:
    """One line per (input, metric) worse than the trial's mean by more than the metric's margin, e.g.
    ``input city: psnr_db 18.2 dB, 6.1 worse than the mean 24.3 (margin 3)``."""
    lines = []
    for name, margin in margins.items():
        mean = combined.get(name)
        if len(per_input) < 2 or mean is None or not mean.available or mean.value is None:
            continue
        for case, metrics in per_input.items():
            metric = metrics.get(name)
            if metric is None or metric.value is None or not metric.available:
                continue
            worse_by = mean.value - metric.value if metric.direction == "maximize" else metric.value - mean.value
            if worse_by > margin and math.isfinite(worse_by):
                lines.append(
                    f"input {case}: {name} {metric.value:.4g} {metric.unit}, {worse_by:.3g} worse than "
                    f"the mean {mean.value:.4g} (margin {margin:g})"
                )
    return lines


def save_outputs(outputs: Mapping[str, WorkloadOutput], path: Path, compressed: bool = True) -> None:
    """Write ``outputs`` (input name -> output) to ``path``: one unnamed input as a plain output file, several
    as one bundle (see the module docstring). ``compressed=False``: always a bundle, stored uncompressed -- a
    file read once and deleted (the outputs a scorer owes, :mod:`tuner.runner.scoring`), written on the device's
    critical path, where compressing a long video would take seconds."""
    if list(outputs) == [""] and compressed:
        outputs[""].save(path)
        return
    arrays: dict[str, Any] = {INPUT_NAMES_KEY: np.array(list(outputs), dtype=object)}
    for index, output in enumerate(outputs.values()):
        arrays.update({f"{index}.{key}": value for key, value in output.arrays().items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        (np.savez_compressed if compressed else np.savez)(handle, **arrays)


def load_outputs(path: Path) -> dict[str, WorkloadOutput]:
    """Input name -> output of a file :func:`save_outputs` wrote (a plain output file: ``{"": output}``)."""
    from tuner.workloads.base import WorkloadOutput

    with np.load(path, allow_pickle=True) as data:
        if INPUT_NAMES_KEY not in data:
            return {"": WorkloadOutput.from_arrays(data)}
        names = [str(name) for name in data[INPUT_NAMES_KEY]]
        return {
            name: WorkloadOutput.from_arrays(
                {key.split(".", 1)[1]: data[key] for key in data.files if key.startswith(f"{index}.")}
            )
            for index, name in enumerate(names)
        }
