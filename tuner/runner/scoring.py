"""Quality scored off the device: a trial's outputs scored in a CPU process while the slot's next trial runs.

With ``measurement.score_off_device`` on (:class:`tuner.spec.measure.measurement.MeasurementSpec`; ``auto``: on a
GPU), the coordinator gives a search trial's request a ``score_outputs`` file. Its worker then measures as
always but computes no quality: it saves the outputs there and returns an OK result whose ``info`` names the
file (:data:`~tuner.runner.measure.trial.QUALITY_PENDING`). The slot is free at once; the coordinator hands the
request and that result to a :class:`Scorer`, and tells the trial only when the scored result comes back.

The scorer is one process per trial (``python -m tuner.runner.scoring REQUEST RESULT SCORED``), its own
session, no GPU (``CUDA_VISIBLE_DEVICES`` empty: the evaluators' networks run on the CPU, never beside the
device's timed calls), :func:`scorer_threads` intra-op threads, the tuner's secrets left out of its
environment, and the coordinator's death taking it along. It scores each input against the same input's
reference exactly as the worker would (:func:`score_outputs`: the same evaluators, the same combination over
inputs, the same cliffs), records how long it took (``eval_time_s``, and ``info["quality_scored"]``) and deletes
the outputs' file. Memory stays bounded: the outputs wait on disk, one file per trial, and the coordinator starts
no trial while more trials wait for their scores than it has slots (:meth:`tuner.study.coordinator_state.
LoopState.scores_block`).

A scorer that fails, is killed or runs past the trial's ``timeout_s`` leaves the measured result whole: each
quality metric the request named is unavailable with the reason (:func:`unscored`). Nothing measured is lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from tuner.results import Metric, Outcome, TrialResult
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.measure.trial import QUALITY_PENDING, finite_metrics
from tuner.runner.reaper import kill_group
from tuner.runner.subprocess import slot_environment

SCORED_KEY = "quality_scored"
"""``TrialResult.info`` key of a result scored off the device: where, how long, with how many threads."""
MAX_SCORER_THREADS = 4


def pending(result: TrialResult) -> bool:
    """Whether ``result`` is measured and still owes its quality (its worker saved the outputs for a scorer)."""
    return result.outcome is Outcome.OK and bool(result.info.get(QUALITY_PENDING))


def scores_off_device(asked: bool | str, device: str) -> bool:
    """Whether a trial on ``device`` is scored off the device for ``measurement.score_off_device`` = ``asked``:
    ``auto`` on a GPU (``cuda``) only."""
    return device == "cuda" if asked == "auto" else bool(asked)


def scorer_threads(cpus: int | None = None) -> int:
    """The scorer's intra-op threads: a quarter of the host's CPUs (``cpus``; default ``os.cpu_count()``), at least
    one and at most :data:`MAX_SCORER_THREADS`, so the device's own host thread keeps its core."""
    count = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, min(MAX_SCORER_THREADS, count // 4))


def unscored(names: Iterable[str], reason: str) -> dict[str, Metric]:
    """Each quality metric of ``names`` unavailable with ``reason`` (units and directions from the evaluators)."""
    from tuner.evaluators.registry import FAMILIES

    wanted = set(names)
    return {
        name: Metric.unavailable(name, *family.metrics[name], reason)
        for family in FAMILIES
        for name in sorted(wanted & set(family.metrics))
    }


def score_outputs(request: TrialRequest, result: TrialResult, device: str = "cpu") -> TrialResult:
    """``result`` (:func:`pending`) with its quality: each input's saved output scored against the same input's
    reference on ``device``, merged into the input's metrics and combined over inputs as the worker does
    (:func:`tuner.runner.measure.inputs.combine_inputs`, cliffs); the outputs' file deleted. Raises when the
    outputs cannot be read."""
    from tuner.runner.measure.inputs import input_sets_of, load_outputs
    from tuner.runner.measure.trial import References, quality_metrics_of

    started = time.perf_counter()
    path = Path(str(result.info[QUALITY_PENDING]))
    outputs = load_outputs(path)
    references = References(request)
    on_device = replace(request, device=device)
    quality: dict[str, dict[str, Metric]] = {}
    for name, inputs in input_sets_of(request):
        reference, missing = references.of(name, outputs[name])
        figures = quality_metrics_of(on_device, outputs[name], reference, missing, inputs)
        quality[name] = finite_metrics({metric.name: metric for metric in figures})
    scored = merged(request, result, quality)
    seconds = time.perf_counter() - started
    path.unlink(missing_ok=True)
    info = {k: v for k, v in scored.info.items() if k != QUALITY_PENDING}
    info[SCORED_KEY] = {"where": f"a scorer process on the {device.upper()}", "seconds": round(seconds, 6)}
    return replace(scored, eval_time_s=seconds, info=info)


def merged(request: TrialRequest, result: TrialResult, quality: Mapping[str, Mapping[str, Metric]]) -> TrialResult:
    """``result`` with ``quality`` (input name -> its quality metrics; ``""`` for a trial of one input) added to
    each input's metrics and the trial's combined figures recomputed over them (mean, ``:worst``, ``:p<NN>``)."""
    from tuner.runner.measure.inputs import cliff_lines, combine_inputs

    several = bool(result.per_input)
    per_input = (
        {name: {**metrics, **quality.get(name, {})} for name, metrics in result.per_input.items()}
        if several
        else {"": {**result.metrics, **quality.get("", {})}}
    )
    metrics = finite_metrics({**result.metrics, **combine_inputs(per_input, request.aggregates)})
    return replace(
        result,
        metrics=metrics,
        per_input=per_input if several else {},
        cliffs=cliff_lines(per_input, metrics, request.cliff_margins) if several else [],
    )


def with_unscored(request: TrialRequest, result: TrialResult, reason: str) -> TrialResult:
    """``result`` whose scorer failed: every quality metric of the request unavailable with ``reason``, the
    outputs' file deleted; the measurement stands."""
    path = result.info.get(QUALITY_PENDING)
    if path:
        Path(str(path)).unlink(missing_ok=True)
    missing = unscored(request.quality_metrics, reason)
    names = {"": dict(missing)} if not result.per_input else {name: dict(missing) for name in result.per_input}
    scored = merged(request, result, names)
    info = {k: v for k, v in scored.info.items() if k != QUALITY_PENDING}
    return replace(scored, info={**info, SCORED_KEY: {"where": "scorer process", "failed": reason}})


class Scorer:
    """Runs one scorer process per pending trial (see the module docstring); :meth:`score` may be called from
    several threads; :meth:`close` kills every scorer still running (their trials keep their measurement)."""

    def __init__(self, python: str = sys.executable, threads: int | None = None) -> None:
        self.python = python
        self.threads = threads if threads is not None else scorer_threads()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def score(self, request: TrialRequest, result: TrialResult) -> TrialResult:
        """``result`` scored (:func:`score_outputs`, in a scorer process); never raises: a scorer that fails
        leaves the quality unavailable with the reason (:func:`with_unscored`)."""
        workdir = Path(request.workdir)
        paths = [workdir / name for name in ("scoring_request.json", "measured_result.json", "scored_result.json")]
        try:
            paths[0].write_text(request.to_json())
            paths[1].write_text(result.to_json())
            paths[2].unlink(missing_ok=True)
            problem = self._run(paths, workdir / "scorer.log", request.timeout_s)
            if problem is None:
                return TrialResult.from_json(paths[2].read_text())
        except (OSError, ValueError) as error:
            problem = f"{type(error).__name__}: {error}"
        return with_unscored(request, result, f"quality not scored: {problem}")

    def close(self) -> None:
        """Kill every scorer running now and refuse new ones."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for process in running:
            _kill(process)

    def _run(self, paths: list[Path], log_path: Path, timeout_s: float) -> str | None:
        """Run one scorer on ``paths`` (request, result, scored); None when it wrote its scored result, else why not."""
        env = slot_environment(Slot(0, None, self.threads))  # a CPU share: no GPU, the scorer's threads
        with self._lock:
            if self._closed:
                return "the run was stopped before its quality was scored"
            with open(log_path, "ab") as log:
                process = subprocess.Popen(
                    [self.python, "-m", "tuner.runner.scoring", *map(str, paths)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            self._running.add(process)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(process)
            return f"the scorer ran past the trial's {timeout_s:g} s limit (killed)"
        finally:
            with self._lock:
                self._running.discard(process)
        if process.returncode != 0 or not paths[2].exists():
            tail = _tail(log_path)
            return f"the scorer exited with status {process.returncode}" + (f": {tail}" if tail else "")
        return None


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process``'s session (its group) and reap it."""
    kill_group(process.pid, leader_alive=process.poll() is None)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _tail(log_path: Path, lines: int = 3) -> str:
    """The last ``lines`` non-empty lines of the scorer's log, joined by `` | ``."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join([line for line in text.splitlines() if line.strip()][-lines:])[-600:]


def main(argv: list[str] | None = None) -> int:
    """``python -m tuner.runner.scoring REQUEST.json RESULT.json SCORED.json``: score RESULT's saved outputs."""
    from tuner.runner.worker import die_with_parent, write_result

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m tuner.runner.scoring REQUEST.json RESULT.json SCORED.json", file=sys.stderr)
        return 2
    die_with_parent()  # its intra-op threads: the OMP / MKL variables the Scorer set
    request = TrialRequest.from_json(Path(args[0]).read_text())
    result = TrialResult.from_json(Path(args[1]).read_text())
    write_result(score_outputs(request, result), Path(args[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
