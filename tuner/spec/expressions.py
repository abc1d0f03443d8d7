"""Safe evaluation of the small expressions a spec may contain.

Rules (``frame_num % 4 == 1``), derived values (``ceil(audio_seconds * fps /
infer_frames)``) and constraint thresholds (``0.85 * gpu_memory_gb``) are
parsed with :mod:`ast` and evaluated by walking a whitelist of node types.
Nothing is ever passed to ``eval``. Allowed: numbers, strings, booleans,
``None``, names from the given scope, arithmetic (``+ - * / // % **``),
comparisons (chained too), ``and`` / ``or`` / ``not``, ``x if c else y``,
``in`` / ``not in`` against tuples or lists, and calls of the functions in
:data:`FUNCTIONS`. Attribute access, subscripts, lambdas, comprehensions and
every other construct are rejected when the expression is compiled, so a bad
spec fails before anything runs.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Mapping

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "len": len,
    "ceil": math.ceil,
    "floor": math.floor,
    "sqrt": math.sqrt,
    "log2": math.log2,
    "log": math.log,
}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
    ast.Not: operator.not_,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_MAX_POWER_EXPONENT = 64


class ExpressionError(ValueError):
    """An expression that cannot be compiled or evaluated; the message says why."""


@dataclass(frozen=True)
class Expression:
    """A compiled, whitelisted expression. Build with :func:`compile_expression`."""

    source: str
    tree: ast.expr
    names: frozenset[str]

    def evaluate(self, scope: Mapping[str, Any]) -> Any:
        """Evaluate against ``scope`` (name -> value). Raises :class:`ExpressionError`."""
        missing = sorted(self.names - scope.keys())
        if missing:
            raise ExpressionError(f"unknown name(s) {', '.join(missing)} in '{self.source}'")
        try:
            return _evaluate(self.tree, scope)
        except ExpressionError:
            raise
        except Exception as error:  # arithmetic errors: division by zero, type errors
            raise ExpressionError(f"'{self.source}' failed: {type(error).__name__}: {error}") from None


def compile_expression(source: str) -> Expression:
    """Parse and check ``source``; raises :class:`ExpressionError` naming the problem."""
    if not isinstance(source, str) or not source.strip():
        raise ExpressionError("an expression must be a non-empty string")
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as error:
        raise ExpressionError(f"'{source}' is not a valid expression: {error.msg}") from None
    names: set[str] = set()
    _check(tree, source, names)
    return Expression(source=source.strip(), tree=tree, names=frozenset(names))


def _check(node: ast.AST, source: str, names: set[str]) -> None:
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str, bool, type(None))):
            raise ExpressionError(f"'{source}': constant {node.value!r} is not allowed")
        return
    if isinstance(node, ast.Name):
        if node.id not in FUNCTIONS:
            names.add(node.id)
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        children: list[ast.AST] = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        children = [node.operand]
    elif isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.IfExp):
        children = [node.test, node.body, node.orelse]
    elif isinstance(node, (ast.Tuple, ast.List)):
        children = list(node.elts)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            allowed = ", ".join(sorted(FUNCTIONS))
            raise ExpressionError(f"'{source}': only these functions may be called: {allowed}")
        if node.keywords:
            raise ExpressionError(f"'{source}': keyword arguments are not allowed")
        children = list(node.args)
    else:
        raise ExpressionError(f"'{source}': {type(node).__name__} is not allowed in an expression")
    for child in children:
        _check(child, source, names)


def _evaluate(node: ast.AST, scope: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return FUNCTIONS[node.id] if node.id in FUNCTIONS and node.id not in scope else scope[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, scope), _evaluate(node.right, scope)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > _MAX_POWER_EXPONENT:
            raise ExpressionError(f"exponent {right} is too large")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, scope))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Any = True
            for value in node.values:
                result = _evaluate(value, scope)
                if not result:
                    return result
            return result
        result = False
        for value in node.values:
            result = _evaluate(value, scope)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, scope)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator, scope)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _evaluate(node.body if _evaluate(node.test, scope) else node.orelse, scope)
    if isinstance(node, ast.Tuple):
        return tuple(_evaluate(e, scope) for e in node.elts)
    if isinstance(node, ast.List):
        return [_evaluate(e, scope) for e in node.elts]
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return FUNCTIONS[node.func.id](*(_evaluate(a, scope) for a in node.args))
    raise ExpressionError(f"{type(node).__name__} is not allowed")  # unreachable after _check
