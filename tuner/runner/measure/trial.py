"""Measuring a trial's inputs: set up, time, evaluate each, and the OK result they make together.

:func:`tuner.runner.worker.execute` drives these, for the one input of a plain spec or each input of a spec
with ``cases`` (:mod:`tuner.runner.measure.inputs` combines their figures). Each input: the workload's ``setup``
with that input, the latency protocol (:func:`tuner.evaluators.latency.measure_latency`) within the input's
share of the measurement's time, under a peak-memory monitor, then the quality evaluators against the same
input's reference output (:class:`References`), timed apart.

A metric whose value is not finite (NaN, +-inf) is reported unavailable, with the reason
``non-finite value nan`` (:func:`finite_metrics`); the rest of the trial stands.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.results import Metric, Outcome, TrialResult
from tuner.runner.base import TrialRequest
from tuner.runner.device_used import device_used
from tuner.runner.measure.notes import cut_short_note, past_ceiling_note, settled_note
from tuner.runner.measure.warmup import counted_within, floor_of, planned_warmup

if TYPE_CHECKING:
    from tuner.runner.measure.phases import PhaseClock
    from tuner.workloads.base import RunContext, Workload, WorkloadOutput

MEASUREMENT_SHARE_OF_TIMEOUT = 0.7
"""The share of a trial's ``timeout_s`` its latency measurement may use, counted from the worker's
start: no warmup call or further repeat starts that would end later (:func:`tuner.evaluators.latency.measure_latency`).
The rest is kept for evaluation and saving, so a setting slower than the timeout foresaw is recorded
with fewer repeats (``cut_short``) instead of being killed with nothing measured."""


QUALITY_PENDING = "quality_pending"
"""``TrialResult.info`` key of a result whose quality a scorer still owes (:mod:`tuner.runner.scoring`): the
file holding the outputs to score (``TrialRequest.score_outputs``)."""


def finite_metrics(metrics: Mapping[str, Metric]) -> dict[str, Metric]:
    """``metrics`` with every non-finite value made unavailable (reason ``non-finite value nan``)."""
    return {
        name: (
            m
            if m.value is None or math.isfinite(m.value)
            else Metric.unavailable(m.name, m.unit, m.direction, f"non-finite value {m.value!r}")
        )
        for name, m in metrics.items()
    }


@dataclass
class InputRun:
    """One input's part of a trial: its ``name``, latency statistics, last output, metrics and the NVML devices
    its memory monitor saw."""

    name: str
    stats: Any
    output: WorkloadOutput
    metrics: dict[str, Metric]
    nvml_devices: list[int]
    invocation: dict[str, Any] | None = None  # what the workload executed for this input
    sustained: list[dict[str, Any]] | None = None  # measurement.sustained: each level's figures
    structure: dict[str, Any] | None = None  # the timed calls' cost structure (runtime.structure.structure_info)
    warmup_with: dict[str, Any] | None = None  # the settings a lighter warm-up changed (Workload.warmup_settings)


class References:
    """The reference outputs of a request by input name, loaded at the first evaluation that needs them."""

    def __init__(self, request: TrialRequest) -> None:
        self._request = request
        self._loaded: dict[str, WorkloadOutput] | None = None

    def of(self, name: str, output: WorkloadOutput) -> tuple[WorkloadOutput | None, str | None]:
        """The reference output of input ``name`` (``output`` itself for the reference trial) and, when there is
        none, why (else the request's own ``reference_missing``)."""
        from tuner.runner.measure.inputs import load_outputs

        if self._request.compare_with_self:
            return output, None
        if self._request.reference_output is None:
            return None, self._request.reference_missing
        if self._loaded is None:
            self._loaded = load_outputs(Path(self._request.reference_output))
        if name not in self._loaded:
            held = ", ".join(repr(n) for n in self._loaded) or "none"
            return None, f"the reference output holds no input {name!r} (its inputs: {held})"
        return self._loaded[name], None


def measure_input(
    request: TrialRequest,
    running: Workload,
    context: RunContext,
    name: str,
    deadline: float,
    phases: PhaseClock,
    stage: list[str],
    references: References,
    after_setup: Callable[[], None] | None = None,
) -> tuple[InputRun, float]:
    """Set up, measure and evaluate one input (``stage[0]`` says which step runs, for a failure's reason;
    ``after_setup`` is called once ``setup`` returned); returns its run and the seconds its evaluation took."""
    from tuner.evaluators.latency import measure_latency
    from tuner.evaluators.memory import PeakMemoryMonitor
    from tuner.evaluators.runtime.spans import span_metrics
    from tuner.evaluators.runtime.structure import structure_info, structure_metrics
    from tuner.workloads.base import WorkloadOutput

    memory_sample_hz = float(request.measurement.get("memory_sample_hz", 100.0))
    bare_twin = int(request.measurement.get("bare_twin", 0) or 0)
    settings = latency_settings(request)
    stage[0] = "setup"
    phases.mark("startup")
    running.setup(request.settings, context)
    if after_setup is not None:
        after_setup()
    # compiling, CUDA graph capture, a shape new to the process: start-up, never latency; none for a warm one
    asked = request.measurement.get("warmup")
    settings = dataclasses.replace(
        settings, warmup=planned_warmup(asked, running, request.settings), count_warmup_within=counted_within(asked)
    )
    stage[0] = "run"
    phases.mark("warmup")
    spans: list[Mapping[str, float]] = []
    structures: list[Mapping[str, Any]] = []

    def call() -> Any:
        output = running.run(request.settings, context)
        spans.append(running.call_spans() or {})
        structures.append(running.call_structure() or {})
        return output

    light = running.warmup_settings(request.settings) if settings.warmup else None
    warm_call = (lambda: running.run(light, context)) if light is not None else None
    with PeakMemoryMonitor(memory_sample_hz) as monitor:
        stats, output = measure_latency(
            call, running.synchronize, settings, deadline=deadline, marks=phases.marks, warmup_call=warm_call
        )
        if not isinstance(output, WorkloadOutput):
            raise TypeError(f"{request.workload_class}.run returned {type(output).__name__}, not WorkloadOutput")
        if stats.warmup_counted:  # the last warm-up call proved a repeat: measured time
            phases.move(stats.samples_s[0], "warmup", "measured")
        own = {m.name: m for m in running.measured_metrics()}  # the timed calls', before the load's calls
        load = _sustained(request, running, context, deadline, stats) if request.measurement.get("sustained") else None
    metrics = _run_metrics(stats.to_metrics(items=output.items), monitor.metrics(), output, own)
    timed = len(stats.samples_s)
    metrics.update({m.name: m for m in span_metrics(spans[len(spans) - timed :], metrics.get("latency_p50_s"))})
    structure = structure_info(structures[len(structures) - timed :])
    metrics.update({m.name: m for m in structure_metrics(structures[len(structures) - timed :])})
    curve = None
    if load is not None:
        from tuner.evaluators.runtime.sustained import curve_rows, sustained_metrics

        gain = float(request.measurement["sustained"].get("knee_gain", 0.10))
        metrics.update({m.name: m for m in sustained_metrics(load, gain)})
        curve = curve_rows(load, gain)
    metrics["energy_per_output_j"] = energy_per_output(
        metrics.get("gpu_power_mean_w"), metrics.get("throughput_items_per_s")
    )
    if bare_twin:
        from tuner.evaluators.cuda_api import active_cuda
        from tuner.evaluators.runtime.bare_twin import bare_timings, twin_metrics

        seconds = bare_timings(
            lambda: running.run(request.settings, context), running.synchronize, bare_twin, deadline, active_cuda()
        )
        metrics.update({m.name: m for m in twin_metrics(seconds, metrics.get("latency_p50_s"))})
    stage[0] = "evaluate"
    phases.mark("evaluation")
    eval_started = time.perf_counter()
    metrics.update(_scored_here(request, references, name, output, context.inputs))
    invocation = dict(running.invocation) if running.invocation is not None else None
    lighter = (
        {k: v for k, v in light.items() if request.settings.get(k) != v} if light is not None and stats.warmup else None
    )
    return (
        InputRun(name, stats, output, metrics, list(monitor.nvml_devices), invocation, curve, structure, lighter),
        time.perf_counter() - eval_started,
    )


def _scored_here(
    request: TrialRequest, references: References, name: str, output: WorkloadOutput, inputs: Mapping[str, Any]
) -> dict[str, Metric]:
    """Input ``name``'s quality metrics scored in this worker; none when a scorer scores the saved outputs off the
    device (``request.score_outputs``: :mod:`tuner.runner.scoring`)."""
    if request.score_outputs is not None:
        return {}
    reference, missing = references.of(name, output)
    return {metric.name: metric for metric in quality_metrics_of(request, output, reference, missing, inputs)}


def _sustained(request: TrialRequest, running: Workload, context: RunContext, deadline: float, stats: Any) -> list[Any]:
    """The levels of ``measurement.sustained`` driven on the loaded workload (:mod:`.runtime.sustained`)."""
    from tuner.evaluators.runtime.sustained import drive

    block = request.measurement["sustained"]
    streams = block.get("streams", [1])
    return drive(
        lambda: running.run(request.settings, context),
        running.synchronize,
        lambda output: int(getattr(output, "items", 1) or 1),
        [int(n) for n in ([streams] if isinstance(streams, int) else streams)],
        float(block.get("duration_s", 10.0)),
        int(getattr(running, "concurrent_calls", 1) or 1),
        deadline,
        max(stats.samples_s, default=0.0),
    )


def result_of(
    request: TrialRequest, runs: list[InputRun], context: RunContext, eval_time_s: float, provenance: Mapping[str, Any]
) -> TrialResult:
    """The OK result of ``runs``: their combined metrics (one input: its own), samples, the saved output, the
    trial's ``provenance`` and the first input's invocation (what ``tuner show`` renders natively: one request);
    its wall time and phases are the caller's."""
    from tuner.runner.measure.inputs import cliff_lines, combine_inputs, save_outputs
    from tuner.runner.measure.samples import Samples, write_samples

    per_input = {run.name: finite_metrics(run.metrics) for run in runs}
    several = list(per_input) != [""]
    metrics = combine_inputs(per_input, request.aggregates)
    metrics.update({m.name: m for m in _priced(request, metrics.get("throughput_items_per_s"))})
    samples = Samples()
    for run in runs:
        written = write_samples(run.output, context.workdir, f"{run.name}." if several else "")
        samples.files.update(written.files)
        samples.problems.update({f"{run.name}.{k}" if several else k: v for k, v in written.problems.items()})
    output_path = None
    if request.save_output:
        save_outputs({run.name: run.output for run in runs}, Path(request.save_output))
        output_path = request.save_output
    if request.score_outputs is not None:
        save_outputs({run.name: run.output for run in runs}, Path(request.score_outputs), compressed=False)
    settings = latency_settings(request)
    cut = next((run.stats for run in runs if run.stats.cut_short), None)
    ceiling = request.latency_ceiling_s
    past = [min(run.stats.samples_s) for run in runs if run.stats.past_ceiling]
    info: dict[str, Any] = {
        "repeats": min(len(run.stats.samples_s) for run in runs),
        "converged": all(run.stats.converged for run in runs),
        "warmup": min(run.stats.warmup for run in runs),
        "warmup_counted": sum(int(run.stats.warmup_counted) for run in runs),
        **({"warmup_with": lighter} if (lighter := next((r.warmup_with for r in runs if r.warmup_with), None)) else {}),
        "device_used": device_used(sorted({d for run in runs for d in run.nvml_devices})),
        **(
            {"cut_short": cut_short_note(cut, settings, request.timeout_s, MEASUREMENT_SHARE_OF_TIMEOUT)}
            if cut is not None
            else {}
        ),
        **({"past_ceiling": past_ceiling_note(min(past), ceiling)} if past and ceiling is not None else {}),
        **({"settled": settled_note(settled, settings)} if (settled := _settled_run(runs)) is not None else {}),
        **({"sample_problems": samples.problems} if samples.problems else {}),
        **({QUALITY_PENDING: request.score_outputs} if request.score_outputs is not None else {}),
        **({"repeats_per_input": {run.name: len(run.stats.samples_s) for run in runs}} if several else {}),
        **_sustained_info(runs, several),
        **_structure_info(runs, several),
        **provenance,
    }
    return TrialResult(
        outcome=Outcome.OK,
        metrics=finite_metrics(metrics),
        invocation=runs[0].invocation,
        eval_time_s=eval_time_s,
        output_path=output_path,
        samples=samples.files,
        info=info,
        per_input=per_input if several else {},
        cliffs=cliff_lines(per_input, metrics, request.cliff_margins) if several else [],
    )


def _sustained_info(runs: list[InputRun], several: bool) -> dict[str, Any]:
    """``{"sustained": levels}`` (by input name when ``several``) of the runs that drove sustained load."""
    loaded = {run.name: run.sustained for run in runs if run.sustained is not None}
    if not loaded:
        return {}
    return {"sustained": loaded if several else next(iter(loaded.values()))}


def _structure_info(runs: list[InputRun], several: bool) -> dict[str, Any]:
    """``{"call_structure": ...}`` (by input name when ``several``) of the runs whose workload reported one."""
    known = {run.name: run.structure for run in runs if run.structure is not None}
    if not known:
        return {}
    return {"call_structure": known if several else next(iter(known.values()))}


def energy_per_output(power: Metric | None, throughput: Metric | None) -> Metric:
    """Joules per output: the devices' mean power (W) over the items served per second; unavailable with the
    power's (or the throughput's) reason. The power is the measurement window's mean, warm-up included."""
    if power is None or not power.available or power.value is None:
        return Metric.unavailable(
            "energy_per_output_j", "J", "minimize", (power.reason if power is not None else None) or "no power read"
        )
    if throughput is None or not throughput.available or not (throughput.value or 0) > 0:
        return Metric.unavailable("energy_per_output_j", "J", "minimize", "no measured throughput")
    return Metric("energy_per_output_j", float(power.value) / float(throughput.value or 1), "J", "minimize")


def _priced(request: TrialRequest, throughput: Metric | None) -> list[Metric]:
    """The price metrics (:mod:`tuner.spec.measure.price`) when the spec or the environment gives a price; else none."""
    import os

    from tuner.spec.measure.price import CPU_PRICE_ENV, GPU_PRICE_ENV, device_hour_price, price_metrics

    if not request.cost and not os.environ.get(GPU_PRICE_ENV) and not os.environ.get(CPU_PRICE_ENV):
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = len([d for d in visible.split(",") if d.strip()]) if request.device == "cuda" and visible else 1
    gpu_name = None
    if request.device == "cuda":
        from tuner.gpu import gpu_type

        gpu_name = gpu_type()
    price, why = device_hour_price(request.cost, request.device, gpu_name, os.environ)
    value = throughput.value if throughput is not None and throughput.available else None
    return price_metrics(value, price, why, devices)


def latency_settings(request: TrialRequest) -> Any:
    """The latency protocol's settings: the request's measurement less the sampler's rate and the bare twin."""
    from tuner.evaluators.latency import LatencySettings

    measurement = dict(request.measurement)
    measurement.pop("memory_sample_hz", None)
    measurement.pop("bare_twin", None)
    measurement.pop("sustained", None)
    measurement.pop("score_off_device", None)
    if "warmup" in measurement:
        measurement["warmup"] = floor_of(measurement["warmup"])  # ``auto``: the trial's own is planned_warmup's
    return LatencySettings(
        **measurement, ceiling_s=request.latency_ceiling_s, thresholds_s=tuple(request.latency_thresholds_s)
    )


def _run_metrics(
    latency: list[Metric], memory: list[Metric], output: WorkloadOutput, own: Mapping[str, Metric]
) -> dict[str, Metric]:
    """The run's own metrics by name: latency, peak memory, the output's counters (``count_<name>``)
    and what the workload measured itself (``own``: :meth:`Workload.measured_metrics`), later ones winning."""
    metrics = {m.name: m for m in [*latency, *memory]}
    for name, value in output.counters.items():
        metrics[f"count_{name}"] = Metric(f"count_{name}", float(value), "1", "minimize")
    metrics.update(own)
    return metrics


def quality_metrics_of(
    request: TrialRequest,
    output: WorkloadOutput,
    reference: WorkloadOutput | None,
    missing: str | None,
    inputs: Mapping[str, Any],
) -> list[Metric]:
    """The quality metrics the request names, of ``output`` against ``reference`` (the same input's reference
    output; None: ``missing`` says why) with that input's ``inputs``."""
    from tuner.evaluators.base import EvalContext
    from tuner.evaluators.registry import evaluate_quality

    context = EvalContext(
        inputs, request.settings, request.reference_settings, request.device, missing, request.resize_to_reference
    )
    return list(evaluate_quality(request.quality_metrics, output, reference, context))


def _settled_run(runs: list[InputRun]) -> Any:
    """The latency statistics of the one input whose repeats stopped settled (None: none did, or several inputs)."""
    return runs[0].stats if len(runs) == 1 and runs[0].stats.settled else None
