"""A float step must divide its range, and the spec's numbers must be finite (issue 24).

Optuna narrows a float range that its step does not divide (``[0.001, 0.005]`` step
``0.003`` silently becomes ``[0.001, 0.004]``); an ``.inf`` timeout or wall time means a
trial or a study that never stops. Both are refused when the spec is read, in one line
naming the file, line, key and problem.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tuner.spec.loading import parse_spec
from tuner.spec.models import SpecError
from tuner.spec.space import distributions

ROOT = Path(__file__).resolve().parents[2]
GOOD = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()
SLEEP = "sleep_s: {type: float, low: 0.001, high: 0.02, step: 0.001}"


def bad(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="bad.yaml")
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def with_sleep(low: str, high: str, step: str) -> str:
    """The good spec with ``sleep_s`` over [low, high] by step (reference and baseline on ``low``)."""
    return GOOD.replace(SLEEP, f"sleep_s: {{type: float, low: {low}, high: {high}, step: {step}}}").replace(
        "sleep_s: 0.02,", f"sleep_s: {low},"
    )


def test_a_float_step_that_does_not_divide_the_range_is_refused() -> None:
    text = with_sleep("0.001", "0.005", "0.003")
    message = bad(text)
    line = 1 + next(i for i, t in enumerate(text.splitlines()) if t.startswith("  sleep_s:"))
    assert message.startswith(f"bad.yaml:{line}: parameters.sleep_s: "), message
    assert "0.004" in message and "multiple of step 0.003" in message, message


@pytest.mark.parametrize(
    ("low", "high", "step"),
    [
        ("0.1", "0.9", "0.1"),  # 0.8 / 0.1 is 7.999999999999999 in binary floats
        ("0.001", "0.02", "0.001"),
        ("0", "1", "0.05"),
        ("1.0e-4", "3.0e-4", "1.0e-4"),
        ("-0.3", "0.3", "0.1"),
        ("0.5", "0.5", "0.25"),  # a single value
        ("1", "10", "0.5"),
    ],
)
def test_a_float_step_that_divides_the_range_is_kept_as_written(low: str, high: str, step: str) -> None:
    spec = parse_spec(with_sleep(low, high, step))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna warns when it narrows a range
        distribution = distributions(spec)["sleep_s"]
    assert distribution.high == float(high) and distribution.low == float(low)  # type: ignore[attr-defined]


@pytest.mark.parametrize("step", [".inf", ".nan", "10"])
def test_a_float_step_must_be_finite_and_fit_the_range(step: str) -> None:
    message = bad(with_sleep("0.001", "0.005", step))
    assert "parameters.sleep_s" in message, message


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_a_non_finite_timeout_is_refused(value: str) -> None:
    message = bad(GOOD.replace("timeout_s: 20", f"timeout_s: {value}"))
    assert "workload.timeout_s" in message and "finite" in message, message


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("budget: {trials: 8}", "budget: {wall_time_s: .inf}", "budget.wall_time_s"),
        ("budget: {trials: 8}", "budget: {trials: 8, wall_time_s: .nan}", "budget.wall_time_s"),
        ("max_repeats: 3}", "max_repeats: 3, max_seconds: .inf}", "measurement.max_seconds"),
        ("max_repeats: 3}", "max_repeats: 3, cv_target: .nan}", "measurement.cv_target"),
        ("max_repeats: 3}", "max_repeats: 3, noisy_cv: .inf}", "measurement.noisy_cv"),
        ("max_repeats: 3}", "max_repeats: 3, memory_sample_hz: .inf}", "measurement.memory_sample_hz"),
        ("{metric: psnr_db, min: 15}", "{metric: psnr_db, min: .nan}", "constraints.1.min"),
        ("{metric: psnr_db, min: 15}", "{metric: psnr_db, min: -.inf}", "constraints.1.min"),
        (
            '{metric: peak_vram_gb, max: "0.85 * gpu_memory_gb"}',
            "{metric: peak_vram_gb, max: .inf}",
            "constraints.0.max",
        ),
    ],
)
def test_other_non_finite_numbers_are_refused(old: str, new: str, key: str) -> None:
    assert old in GOOD
    message = bad(GOOD.replace(old, new))
    assert f": {key}: " in message and "finite" in message, message


def test_a_non_finite_http_request_timeout_is_refused() -> None:
    text = """
name: h
workload:
  http:
    url: http://127.0.0.1:9/generate
    body: {prompt: "{prompt}"}
    request_timeout_s: .inf
inputs: {prompt: hi}
parameters:
  steps: {type: int, low: 1, high: 4}
objectives:
  - {metric: latency_p50_s, direction: minimize}
budget: {trials: 2}
"""
    message = bad(text)
    assert "workload.http.request_timeout_s" in message and "finite" in message, message
