"""The spec's ``reference_shape`` block (issue 39): checked at validate, and the reference at a setting's shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.spec.loading import parse_spec
from tuner.spec.models import SpecError
from tuner.spec.quality.reference_shape import reference_at, resized_comparison

SPEC = """
name: shapes
workload: {class: "tuner.workloads.fake:FakeWorkload"}
parameters:
  frames: {type: categorical, choices: [4, 8]}
  size: {type: categorical, choices: [16, 32]}
  noise: {type: categorical, choices: [0, 10]}
objectives: [{metric: psnr_db, direction: maximize}]
reference: {frames: 8, size: 32, noise: 0}
budget: {trials: 4}
"""


def with_block(block: str, text: str = SPEC) -> str:
    return text + f"reference_shape: {block}\n"


def test_the_reference_at_a_setting_takes_the_per_parameters_from_the_setting() -> None:
    spec = parse_spec(with_block("{per: [frames], same_content: [size]}"))
    found = reference_at(spec, {"frames": 4, "size": 16, "noise": 10})
    assert found is not None and not found.default
    assert found.shape == {"frames": 4} and found.params == {"frames": 4, "size": 32, "noise": 0}
    assert found.label == "frames=4"
    own = reference_at(spec, {"frames": 8, "size": 16, "noise": 10})
    assert own is not None and own.default and own.params == spec.reference
    assert resized_comparison(spec, {"frames": 8, "size": 16, "noise": 10}, own.params), "size: the same scene"
    assert not resized_comparison(spec, {"frames": 8, "size": 32, "noise": 10}, own.params)


def test_without_the_block_every_setting_is_compared_with_the_reference_and_never_resized() -> None:
    spec = parse_spec(SPEC)
    found = reference_at(spec, {"frames": 4, "size": 16, "noise": 10})
    assert found is not None and found.default and found.params == spec.reference
    assert not resized_comparison(spec, {"frames": 4, "size": 16, "noise": 10}, found.params)


@pytest.mark.parametrize(
    "block, problem",
    [
        ("{per: [frame_count]}", "reference_shape.per: ['frame_count'] are not parameters"),
        ("{same_content: [size, size]}", "reference_shape.same_content: a parameter is named twice"),
        ("{per: [size], same_content: [size]}", "['size'] named in both per and same_content"),
        ("{per: [frames], resize: true}", "resize"),
    ],
)
def test_a_wrong_block_is_one_line_naming_the_key(block: str, problem: str) -> None:
    with pytest.raises(SpecError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        parse_spec(with_block(block), "shapes.yaml")


def test_a_reference_per_shape_needs_a_reference() -> None:
    text = with_block("{per: [frames]}", SPEC.replace("reference: {frames: 8, size: 32, noise: 0}\n", ""))
    with pytest.raises(SpecError, match="needs a reference setting"):
        parse_spec(text, str(Path("shapes.yaml")))
