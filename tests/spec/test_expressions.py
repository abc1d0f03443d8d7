"""The safe expression evaluator: what it computes and what it refuses."""

from __future__ import annotations

import pytest

from tuner.spec.expressions import ExpressionError, ExpressionLimitError, compile_expression


@pytest.mark.parametrize(
    "source, scope, expected",
    [
        ("frame_num % 4 == 1", {"frame_num": 81}, True),
        ("frame_num % 4 == 1", {"frame_num": 80}, False),
        ("ceil(audio_seconds * fps / infer_frames)", {"audio_seconds": 10, "fps": 25, "infer_frames": 48}, 6),
        ("0.85 * gpu_memory_gb", {"gpu_memory_gb": 140.0}, 0.85 * 140.0),
        ("size in ('720*400', '704*384')", {"size": "704*384"}, True),
        ("40 % ulysses_size == 0 and ulysses_size <= 8", {"ulysses_size": 3}, False),
        ("1 < x <= 3", {"x": 3}, True),
        ("a if flag else b", {"a": 1, "b": 2, "flag": False}, 2),
        ("not offload or steps <= 4", {"offload": True, "steps": 4}, True),
        ("max(1, min(8, n // 2))", {"n": 30}, 8),
    ],
)
def test_evaluates(source: str, scope: dict, expected: object) -> None:
    assert compile_expression(source).evaluate(scope) == expected


@pytest.mark.parametrize(
    "source, fragment",
    [
        ("__import__('os').system('true')", "only these functions"),
        ("x.__class__", "Attribute is not allowed"),
        ("[c for c in 'ab']", "ListComp is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("x[0]", "Subscript is not allowed"),
        ("open('f')", "only these functions"),
        ("1 +", "not a valid expression"),
        ("", "non-empty"),
    ],
)
def test_refuses_at_compile_time(source: str, fragment: str) -> None:
    with pytest.raises(ExpressionError, match=fragment):
        compile_expression(source)


def test_unknown_names_are_named() -> None:
    with pytest.raises(ExpressionError, match="unknown name\\(s\\) gpu_memory_gb"):
        compile_expression("0.85 * gpu_memory_gb").evaluate({})


def test_runtime_errors_become_expression_errors() -> None:
    with pytest.raises(ExpressionError, match="ZeroDivisionError"):
        compile_expression("a / b").evaluate({"a": 1, "b": 0})
    with pytest.raises(ExpressionLimitError, match="too expensive: an integer of about 1000 bits"):
        compile_expression("2 ** n").evaluate({"n": 1000})
    with pytest.raises(ExpressionLimitError, match="too expensive"):  # a constant fails when compiled
        compile_expression("2 ** 1000")


def test_names_are_collected_without_functions() -> None:
    assert compile_expression("ceil(a / b) + c").names == {"a", "b", "c"}
