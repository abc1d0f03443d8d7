"""Spec validation: good files load; bad files give one line naming file, line, key and problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.spec.loading import load_spec, parse_spec
from tuner.spec.models import SpecError, spec_json_schema

ROOT = Path(__file__).resolve().parents[2]
GOOD = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()


def bad(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="bad.yaml")
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_good_spec_loads() -> None:
    spec = parse_spec(GOOD)
    assert spec.name == "fake_demo"
    assert spec.objective_names == ["latency_p50_s", "psnr_db"]
    assert spec.parameters["noise"].type == "int"
    assert spec.rules[0].message
    assert spec.sampler.name == "tpe"


@pytest.mark.parametrize("path", sorted((ROOT / "search_spaces").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_search_spaces_are_valid(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name == path.stem, "a shipped spec is named after its file"
    assert spec.reference is not None and spec.baseline is not None, "demos measure against both"


def test_wrong_type_names_line_and_key() -> None:
    text = GOOD.replace("noise: {type: int, low: 0, high: 40, step: 5}", "noise: {type: int, low: zero, high: 40}")
    message = bad(text)
    line = 1 + text.splitlines().index("  noise: {type: int, low: zero, high: 40}")
    assert message.startswith(f"bad.yaml:{line}: parameters.noise.low:"), message
    assert "integer" in message


def test_low_above_high() -> None:
    message = bad(GOOD.replace("low: 0, high: 40, step: 5", "low: 50, high: 40, step: 5"))
    assert "parameters.noise" in message and "low must be <= high (50 > 40)" in message


def test_unknown_key_is_named() -> None:
    message = bad(GOOD.replace("budget: {trials: 8}", "budget: {trials: 8}\nbudgett: 3"))
    assert "budgett: unknown key" in message


def test_unknown_parameter_type() -> None:
    message = bad(GOOD.replace("{type: categorical, choices: [1, 2]}", "{type: choice, choices: [1, 2]}"))
    assert "parameters.batch_size" in message and "unknown parameter type 'choice'" in message


def test_unsafe_rule_is_refused() -> None:
    message = bad(GOOD.replace('"not (noise == 40 and batch_size == 2)"', "\"__import__('os')\""))
    assert "rules.0.expr" in message and "only these functions" in message


def test_baseline_outside_space() -> None:
    message = bad(
        GOOD.replace(
            "baseline: {sleep_s: 0.02, noise: 5, batch_size: 1}", "baseline: {sleep_s: 0.02, noise: 7, batch_size: 1}"
        )
    )
    assert "baseline: noise=7 is outside" in message


def test_baseline_breaking_a_rule() -> None:
    message = bad(
        GOOD.replace(
            "baseline: {sleep_s: 0.02, noise: 5, batch_size: 1}", "baseline: {sleep_s: 0.02, noise: 40, batch_size: 2}"
        )
    )
    assert "baseline: noise 40 with batch 2 is refused" in message


def test_unknown_metric() -> None:
    message = bad(GOOD.replace("metric: psnr_db, direction", "metric: psnr, direction"))
    assert "unknown metric 'psnr'" in message


def test_missing_required_key() -> None:
    message = bad(GOOD.replace("budget: {trials: 8}", ""))
    assert "budget: required key is missing" in message


def test_bad_workload_path() -> None:
    message = bad(GOOD.replace("tuner.workloads.fake:FakeWorkload", "tuner/workloads/fake.py"))
    assert "workload.class" in message and "import path" in message


def test_not_yaml() -> None:
    assert bad("name: [unclosed\n").startswith("bad.yaml:")


def test_not_a_mapping() -> None:
    assert "must be a mapping" in bad("- just\n- a list\n")


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="cannot read spec"):
        load_spec("does/not/exist.yaml")


def test_schema_file_matches_the_models() -> None:
    shipped = json.loads((ROOT / "search_spaces" / "schema.json").read_text())
    assert shipped == json.loads(json.dumps(spec_json_schema())), "run: tuner schema"


def test_cli_validate_reports_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    spec = tmp_path / "broken.yaml"
    spec.write_text(GOOD.replace("trials: 8", "trials: -1"))
    done = subprocess.run([sys.executable, "-m", "tuner", "validate", str(spec)], capture_output=True, text=True)
    assert done.returncode == 2
    assert f"{spec}:" in done.stderr and "budget.trials" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("block", "name", "expected"),
    [
        (
            {},
            None,
            "tpe, a spread start, then by predicted gain per device-second from 10 measured trials; "
            "proposals the front surely beats skipped (10% audited)",
        ),
        (
            {"name": "nsga2", "predicted_gain": {"after": 12, "start": "sampler"}, "skip_dominated": None},
            None,
            "nsga2, then by predicted gain per device-second from 12 measured trials",
        ),
        (
            {"predicted_gain": None, "skip_dominated": {"audit_share": 0.25}},
            "random",
            "random alone; proposals the front surely beats skipped (25% audited)",
        ),
        ({}, "grid", "grid alone; proposals the front surely beats skipped (10% audited)"),
    ],
)
def test_the_sampler_block_says_in_one_line_what_proposes_and_what_is_skipped(
    block: dict[str, object], name: str | None, expected: str
) -> None:
    """A run's and a study's header show this line: "sampler tpe" alone hid the predicted gain and the skips."""
    from tuner.spec.search.sampler import SamplerSpec

    assert SamplerSpec.model_validate(block).summary(name) == expected  # type: ignore[arg-type]
