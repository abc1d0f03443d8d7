"""Hostile expressions are refused before the expensive step, with one line saying which limit.

Before these limits ``(2**60)**60`` style chains and ``str(2**64) * 10**8`` ran (for minutes, or
2 GB per candidate); now each is an :class:`ExpressionLimitError` at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from limit_helpers import cheap

from tuner.spec.expressions import (
    LIMITS,
    ExpressionError,
    ExpressionLimitError,
    ExpressionLimits,
    compile_expression,
)
from tuner.spec.loading import parse_spec
from tuner.spec.models import SpecError
from tuner.spec.space import resolve

ROOT = Path(__file__).resolve().parents[2]
GOOD = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()


def limit_message(source: str, scope: dict[str, Any] | None = None, limits: ExpressionLimits = LIMITS) -> str:
    """The one-line message of the limit ``source`` breaks, when compiled or evaluated with ``scope``."""
    with cheap(), pytest.raises(ExpressionLimitError) as info:
        compile_expression(source, limits).evaluate(scope or {})
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "source, bits",
    [
        ("2**64**2", "4096"),
        ("2**64**64", "384"),  # 64**64 is refused before 2**(64**64) is even considered
        ("(2**64)**64**64", "384"),
        ("10**10**10", "3.3e10"),
        ("2**256", "257"),  # computed (cheap), then refused: |int| < 2**256
    ],
)
def test_constant_powers_are_refused_when_compiled(source: str, bits: str) -> None:
    with cheap(), pytest.raises(ExpressionLimitError) as info:
        compile_expression(source)
    assert str(info.value) == f"'{source}' is too expensive: an integer of about {bits} bits (limit 256 bits)"


@pytest.mark.parametrize(
    "source, scope, bits",
    [
        ("x**x**x", {"x": 10}, "3.3e10"),
        ("(x**60)**60", {"x": 2**60}, "3600"),
        ("(((x**64)**64)**64)**64", {"x": 2**64}, "4096"),
        ("((x**4)**4)**4", {"x": 2**10}, "640"),  # each step small, the chain is estimated step by step
        ("x * x * x", {"x": 2**100}, "302"),
        ("round(5, -x)", {"x": 10**18}, "3.3e18"),  # round(int, -n) computes 10**n
        ("int(s)", {"s": "9" * 300}, "997"),
        ("ceil(x)", {"x": 1e300}, "997"),
    ],
    ids=["tower", "big-base", "big-base-chain", "small-chain", "product", "round", "int-of-str", "ceil"],
)
def test_integers_are_bounded_at_run_time(source: str, scope: dict[str, Any], bits: str) -> None:
    assert limit_message(source, scope) == (
        f"'{source}' is too expensive: an integer of about {bits} bits (limit 256 bits)"
    )


@pytest.mark.parametrize(
    "source, scope, shown",
    [
        ("str(x) * n", {"x": 2**64, "n": 10**8}, "a string of about 2.0e9 characters"),
        ("n * 'ab'", {"n": 10**8}, "a string of about 2.0e8 characters"),
        ("[s] * n", {"s": "abcdef", "n": 5000}, "a list or tuple of about 35000 items"),
        ("s + s", {"s": "x" * 6000}, "a string of about 12000 characters"),
        ("(s, s) + (s,)", {"s": "x" * 4000}, "a list or tuple of about 12003 items"),
        ("str([s] * 1000)", {"s": "x" * 10}, "a list or tuple of about 11000 items"),  # nested items count
    ],
    ids=["str-repeat", "reversed", "list-repeat", "concat", "tuple-concat", "nested"],
)
def test_sequences_are_bounded_before_they_are_built(source: str, scope: dict[str, Any], shown: str) -> None:
    assert limit_message(source, scope) == f"'{source}' is too expensive: {shown} (limit 10000)"


def test_constant_sequence_bomb_fails_when_compiled() -> None:
    with pytest.raises(ExpressionLimitError, match=r"too expensive: a string of about 2\.0e9 characters"):
        compile_expression("str(2**64) * 10**8")


def test_step_limit() -> None:
    source = " + ".join(["x"] * 30)
    assert compile_expression(source).evaluate({"x": 1}) == 30
    assert limit_message(source, {"x": 1}, ExpressionLimits(max_steps=50)) == (
        f"'{source[:77]}...' is too expensive: more than 50 evaluation steps (limit 50)"
    )


def test_long_source() -> None:
    source = "1+" * 600 + "1"
    assert limit_message(source) == f"'{source[:77]}...' is too long: 1201 characters (limit 1000)"


@pytest.mark.parametrize(
    "source, depth",
    [
        ("-" * 999 + "1", 1000),
        ("not " * 200 + "x", 201),
        ("[" * 60 + "]" * 60, 60),
        ("1" + "+1" * 60, 61),
    ],
)
def test_deep_expressions(source: str, depth: int) -> None:
    assert limit_message(source).endswith(f" is too deeply nested: {depth} levels (limit 50)")


def test_deeply_nested_parentheses() -> None:
    with cheap(), pytest.raises(ExpressionError) as info:
        compile_expression("(" * 300 + "1" + ")" * 300)
    assert str(info.value) == f"'{'(' * 77}...' is not a valid expression: too many nested parentheses"


def test_string_formatting_is_refused() -> None:
    with pytest.raises(ExpressionError, match="% string formatting is not allowed"):
        compile_expression("f % 1").evaluate({"f": "%0999999999d"})


def test_messages_are_one_line_even_for_multiline_sources() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression("x +\n")
    assert str(info.value) == "'x +' is not a valid expression: invalid syntax"
    with pytest.raises(ExpressionError) as info:
        compile_expression("(x\n+ 1) / 0").evaluate({"x": 1})
    assert str(info.value) == "'(x\\n+ 1) / 0' failed: ZeroDivisionError: division by zero"


@pytest.mark.parametrize(
    "source, scope, expected",
    [
        ("2**255 > 0", {}, True),
        ("x ** 2", {"x": 2**128 - 1}, (2**128 - 1) ** 2),
        ("'ab' * 3", {}, "ababab"),
        ("len(str(x) * 100)", {"x": 12345}, 500),
        ("round(x, 2)", {"x": 1.23456}, 1.23),
        ("round(x, -2)", {"x": 1234}, 1200),
        ("2 ** -3", {}, 0.125),
        ("len(s) > 0", {"s": "y" * 20000}, True),  # a long input costs nothing until an operation builds on it
    ],
)
def test_ordinary_expressions_stay_well_inside(source: str, scope: dict[str, Any], expected: object) -> None:
    assert compile_expression(source).evaluate(scope) == expected


def test_a_limit_in_a_spec_names_file_line_and_key() -> None:
    text = GOOD.replace('"not (noise == 40 and batch_size == 2)"', '"noise < 2**64**64"')
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="bad.yaml")
    line = 1 + text.splitlines().index('  - expr: "noise < 2**64**64"')
    assert str(info.value) == (
        f"bad.yaml:{line}: rules.0.expr: 'noise < 2**64**64' is too expensive: "
        "an integer of about 384 bits (limit 256 bits)"
    )


def test_a_limit_at_run_time_makes_the_candidate_invalid() -> None:
    text = GOOD.replace(
        'total_frames: "4 * batch_size"', 'total_frames: "len(str(noise) * (10**8 if noise == 10 else 1))"'
    )
    spec = parse_spec(text)
    candidate, reason = resolve(spec, {"sleep_s": 0.01, "noise": 10, "batch_size": 1})
    assert candidate is None and reason is not None
    assert reason.startswith("derived value failed: ") and "is too expensive: a string of about 2.0e8" in reason
