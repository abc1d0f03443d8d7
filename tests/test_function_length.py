"""No function in ``tuner/`` is longer than 80 lines of code.

Every ``tuner/**/*.py`` is parsed with :mod:`ast`; every function and method, ``async`` ones
included, is measured, and a function nested in another is measured as a function of its own
(its lines also count towards the one around it). A function's length is the span from its
first body statement after the docstring to its last line, both included:
``node.end_lineno - first_statement.lineno + 1``. Blank lines and comments inside that span
count; the signature, decorators and docstring do not. A function whose body is only a
docstring counts 0.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80
"""The most lines of code (as counted above) a function may span."""

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def code_lines(node: FunctionNode) -> int:
    """Lines from ``node``'s first body statement after its docstring to its last line, both included;
    0 when the body is only a docstring."""
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    if not body:
        return 0
    assert node.end_lineno is not None
    return node.end_lineno - body[0].lineno + 1


def long_functions(source: str, path: str, limit: int = LIMIT) -> list[str]:
    """``path:line name (N lines)`` for every function in ``source`` (nested ones included) over ``limit``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = code_lines(node)
            if length > limit:
                found.append(f"{path}:{node.lineno} {node.name} ({length} lines)")
    return sorted(found)


def _synthetic(lines: int, *, asynchronous: bool = False, nested: bool = False) -> str:
    """A decorated function with a docstring and exactly ``lines`` lines of code (a blank and a comment
    among them, after its first statement), at line 5."""
    body = ["    x = 0", "    # a comment counts", ""] + [f"    x{i} = {i}" for i in range(lines - 3)]
    function = [
        f"{'async ' if asynchronous else ''}def long() -> None:",
        '    """Docstring: not counted.',
        '    """',
        *body,
    ]
    if nested:
        function = ["def outer() -> None:", "    pass"] + ["    " + line if line else line for line in function]
    return "\n".join(["import os", "", "", "@staticmethod", *function, ""])


def test_no_function_in_tuner_is_over_the_limit() -> None:
    found: list[str] = []
    for path in sorted((ROOT / "tuner").rglob("*.py")):
        found += long_functions(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, f"functions over {LIMIT} lines of code (split them):\n" + "\n".join(found)


def test_a_function_of_81_lines_is_caught_and_one_of_80_is_not() -> None:
    assert long_functions(_synthetic(81), "synthetic.py") == ["synthetic.py:5 long (81 lines)"]
    assert long_functions(_synthetic(80), "synthetic.py") == []
    assert long_functions(_synthetic(81, asynchronous=True), "synthetic.py") == ["synthetic.py:5 long (81 lines)"]


def test_a_nested_function_is_measured_on_its_own() -> None:
    found = long_functions(_synthetic(81, nested=True), "synthetic.py")
    assert found == ["synthetic.py:5 outer (85 lines)", "synthetic.py:7 long (81 lines)"]
    assert long_functions(_synthetic(76, nested=True), "synthetic.py") == []


def test_a_docstring_only_function_counts_zero() -> None:
    tree = ast.parse('def f() -> None:\n    """Only a docstring."""\n')
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    assert code_lines(node) == 0
