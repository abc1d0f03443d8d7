"""The fork server preloads the workload's class, not only its package: a package that imports its
class lazily (``tuner.workloads.avqa``) paid the import, and so torch and the model code, in every
trial's start-up (about 2 s per avqa trial on the 2-core machine, ``bench/tables/measure_overhead.py``)."""

from __future__ import annotations

from pathlib import Path

from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.choice import make_runner
from tuner.spec.loading import parse_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = """\
name: lazy
workload: {class: "tests.runner.lazy_workload_pkg:LazyWorkload", timeout_s: 60}
parameters: {x: {type: int, low: 0, high: 1}}
objectives: [{metric: latency_p50_s, direction: minimize}]
measurement: {warmup: 0, min_repeats: 1, max_repeats: 1}
budget: {trials: 1}
"""


def test_the_workload_class_is_imported_in_the_fork_server(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    spec = parse_spec(SPEC)
    runner = make_runner(spec, [])
    request = TrialRequest(
        study_name="s",
        trial_number=0,
        workload_class=spec.workload.target,
        settings={"x": 0},
        workload_options={},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=60,
        workdir=str(tmp_path / "trial"),
        quality_metrics=[],
        reference_output=None,
        save_output=None,
        compare_with_self=False,
        reference_settings=None,
    )
    try:
        result = runner.run(request, Slot(0, None, 1))
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, result.reason
    assert result.metric_value("count_imported_before_fork") == 1.0, "the class's module was imported per trial"
