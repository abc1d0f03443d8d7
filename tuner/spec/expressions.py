"""Safe evaluation of the small expressions a spec may contain.

Rules (``frame_num % 4 == 1``), derived values (``ceil(audio_seconds * fps /
infer_frames)``) and constraint thresholds (``0.85 * gpu_memory_gb``) are
parsed with :mod:`ast` and evaluated by walking a whitelist of node types.
Nothing is ever passed to ``eval``. Allowed: numbers, strings, booleans,
``None``, names from the given scope, arithmetic (``+ - * / // % **``),
comparisons (chained too), ``and`` / ``or`` / ``not``, ``x if c else y``,
``in`` / ``not in`` against tuples or lists, and calls of the functions in
:data:`FUNCTIONS`. Attribute access, subscripts, lambdas, comprehensions,
``%`` string formatting and every other construct are rejected, so a bad spec
fails before anything runs.

Limits (:class:`ExpressionLimits`, defaults in :data:`LIMITS`) keep a hostile
expression from hanging or exhausting a process; exceeding one raises
:class:`ExpressionLimitError`, a subclass of :class:`ExpressionError`:

- source text <= 1,000 characters and expression nesting <= 50 levels (checked
  before anything is evaluated, without recursion);
- integers below 2**256 (256 bits). ``**``, ``*`` and ``round`` estimate the
  size of their result from both operands *before* computing it, so
  ``10**10**10`` or ``(2**60)**60**60`` is refused at once; every other result
  is checked after it is computed (cheap for bounded operands);
- strings, lists and tuples built by an expression hold <= 10,000 items
  (characters, elements, nested elements counted too); repetition and
  concatenation are checked before they are built;
- <= 10,000 evaluation steps (nodes visited) per :meth:`Expression.evaluate`.

Real specs stay far below these. Values taken from the scope are not charged
until an operation uses them. Sub-expressions without names are evaluated once
when compiled, so a constant that is too expensive fails when the spec loads.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from tuner.errors import InputError

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
_SEQUENCES = (str, list, tuple)


class ExpressionError(InputError):
    """An expression that cannot be compiled or evaluated; the message says why (one line)."""


class ExpressionLimitError(ExpressionError):
    """An expression over one of the :class:`ExpressionLimits`: too long, too deep or too expensive."""


@dataclass(frozen=True)
class ExpressionLimits:
    """What one expression may cost. :data:`LIMITS` holds the defaults every spec uses."""

    max_source_chars: int = 1_000
    max_depth: int = 50
    max_int_bits: int = 256
    max_items: int = 10_000
    max_steps: int = 10_000


LIMITS = ExpressionLimits()


@dataclass(frozen=True)
class Expression:
    """A compiled, whitelisted expression. Build with :func:`compile_expression`."""

    source: str
    tree: ast.expr
    names: frozenset[str]
    limits: ExpressionLimits = field(default=LIMITS, compare=False)

    def evaluate(self, scope: Mapping[str, Any]) -> Any:
        """Evaluate against ``scope`` (name -> value).

        Raises :class:`ExpressionError` for unknown names and failed arithmetic,
        :class:`ExpressionLimitError` past a limit (before the expensive step runs).
        """
        missing = sorted(self.names - scope.keys())
        if missing:
            raise ExpressionError(f"unknown name(s) {', '.join(missing)} in {_show(self.source)}")
        try:
            return _Evaluation(self.source, scope, self.limits).value(self.tree)
        except ExpressionError:
            raise
        except (RecursionError, MemoryError) as error:
            raise ExpressionLimitError(f"{_show(self.source)} is too expensive: {type(error).__name__}") from None
        except Exception as error:  # arithmetic errors: division by zero, type errors
            raise ExpressionError(f"{_show(self.source)} failed: {type(error).__name__}: {_short(error)}") from None


def compile_expression(source: str, limits: ExpressionLimits = LIMITS) -> Expression:
    """Parse and check ``source``; raises :class:`ExpressionError` naming the problem.

    Compiled expressions are cached by source (they are immutable).
    """
    if not isinstance(source, str) or not source.strip():
        raise ExpressionError("an expression must be a non-empty string")
    return _compile(source.strip(), limits)


@lru_cache(maxsize=1024)
def _compile(source: str, limits: ExpressionLimits) -> Expression:
    if len(source) > limits.max_source_chars:
        raise ExpressionLimitError(
            f"{_show(source)} is too long: {len(source)} characters (limit {limits.max_source_chars})"
        )
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as error:
        raise ExpressionError(f"{_show(source)} is not a valid expression: {error.msg}") from None
    except (RecursionError, MemoryError):
        raise ExpressionLimitError(f"{_show(source)} is too deeply nested to parse") from None
    except ValueError as error:
        raise ExpressionError(f"{_show(source)} is not a valid expression: {_short(error)}") from None
    depth = _depth(tree)
    if depth > limits.max_depth:
        raise ExpressionLimitError(f"{_show(source)} is too deeply nested: {depth} levels (limit {limits.max_depth})")
    names: set[str] = set()
    _check(tree, source, names, limits)
    expression = Expression(source=source, tree=tree, names=frozenset(names), limits=limits)
    _check_constants(expression)
    return expression


def _depth(tree: ast.expr) -> int:
    """Nesting depth of expression nodes, without recursion (the tree may be thousands deep)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))
    return deepest


def _check(node: ast.AST, source: str, names: set[str], limits: ExpressionLimits) -> None:
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str, bool, type(None))):
            raise ExpressionError(f"{_show(source)}: constant {node.value!r} is not allowed")
        if isinstance(node.value, int) and node.value.bit_length() > limits.max_int_bits:
            raise ExpressionLimitError(
                f"{_show(source)} is too expensive: an integer of "
                f"{node.value.bit_length()} bits (limit {limits.max_int_bits} bits)"
            )
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
            raise ExpressionError(f"{_show(source)}: only these functions may be called: {allowed}")
        if node.keywords:
            raise ExpressionError(f"{_show(source)}: keyword arguments are not allowed")
        children = list(node.args)
    else:
        raise ExpressionError(f"{_show(source)}: {type(node).__name__} is not allowed in an expression")
    for child in children:
        _check(child, source, names, limits)


def _check_constants(expression: Expression) -> None:
    """Evaluate each largest sub-expression without names, so a constant over a limit fails now.

    Only limit errors are raised: ``x if c else 1/0`` may be fine when ``c`` is never false.
    """

    def constant(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return False
        if isinstance(node, ast.Call):
            return all([constant(a) for a in node.args])  # noqa: C419 - a list: visit every argument
        return all([constant(c) for c in ast.iter_child_nodes(node)])  # noqa: C419 - a list: visit every child

    def visit(node: ast.AST) -> None:
        if constant(node):
            if not isinstance(node, ast.Constant):
                try:
                    _Evaluation(expression.source, {}, expression.limits).value(node)
                except ExpressionLimitError:
                    raise
                except Exception:  # noqa: BLE001 - ordinary failures are the run's business
                    pass
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr) and not (isinstance(node, ast.Call) and child is node.func):
                visit(child)

    visit(expression.tree)


class _Evaluation:
    """One walk of a tree against a scope, counting steps and checking sizes before computing."""

    def __init__(self, source: str, scope: Mapping[str, Any], limits: ExpressionLimits) -> None:
        self.source, self.scope, self.limits, self.steps = source, scope, limits, 0

    def refuse(self, what: str) -> ExpressionLimitError:
        return ExpressionLimitError(f"{_show(self.source)} is too expensive: {what}")

    def value(self, node: ast.AST) -> Any:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise self.refuse(f"more than {self.limits.max_steps} evaluation steps (limit {self.limits.max_steps})")
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            scope = self.scope
            return FUNCTIONS[node.id] if node.id in FUNCTIONS and node.id not in scope else scope[node.id]
        if isinstance(node, ast.BinOp):
            left, right = self.value(node.left), self.value(node.right)
            self.before_binary(type(node.op), left, right)
            return self.bounded(_BINARY[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp):
            return self.bounded(_UNARY[type(node.op)](self.value(node.operand)))
        if isinstance(node, ast.BoolOp):
            stop = not isinstance(node.op, ast.And)  # `and` stops at a falsy value, `or` at a truthy one
            result: Any = not stop
            for item in node.values:
                result = self.value(item)
                if bool(result) == stop:
                    return result
            return result
        if isinstance(node, ast.Compare):
            left = self.value(node.left)
            for op, comparator in zip(node.ops, node.comparators):
                right = self.value(comparator)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return self.value(node.body if self.value(node.test) else node.orelse)
        if isinstance(node, ast.Tuple):
            return self.bounded(tuple(self.value(e) for e in node.elts))
        if isinstance(node, ast.List):
            return self.bounded([self.value(e) for e in node.elts])
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            args = [self.value(a) for a in node.args]
            if node.func.id == "round" and len(args) == 2:
                self.before_round(*args)
            return self.bounded(FUNCTIONS[node.func.id](*args))
        raise ExpressionError(f"{type(node).__name__} is not allowed")  # unreachable after _check

    def before_binary(self, op: type[ast.operator], left: Any, right: Any) -> None:
        """Refuse ``left op right`` when its result would be over a limit, before computing it."""
        limit = self.limits
        if op is ast.Pow and _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1:
            bits = right * math.log2(abs(left))
            if bits > limit.max_int_bits:
                raise self.refuse(f"an integer of about {_about(bits)} bits (limit {limit.max_int_bits} bits)")
        elif op is ast.Mult and _is_int(left) and _is_int(right):
            bits = left.bit_length() + right.bit_length()
            if left and right and bits - 1 > limit.max_int_bits:
                raise self.refuse(f"an integer of about {_about(bits)} bits (limit {limit.max_int_bits} bits)")
        elif op is ast.Mult and (isinstance(left, _SEQUENCES) or isinstance(right, _SEQUENCES)):
            sequence, count = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
            if _is_int(count) and count > 0:
                self.check_items(sequence, _items(sequence, limit.max_items) * count)
        elif op is ast.Add and isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
            self.check_items(left, _items(left, limit.max_items) + _items(right, limit.max_items))
        elif op is ast.Mod and isinstance(left, str):
            raise ExpressionError(f"{_show(self.source)}: % string formatting is not allowed")

    def before_round(self, number: Any, digits: Any) -> None:
        """``round(int, -n)`` computes 10**n: refuse when that is over the integer limit."""
        if _is_int(number) and _is_int(digits) and digits < 0:
            bits = -digits * math.log2(10)
            if bits > self.limits.max_int_bits:
                raise self.refuse(f"an integer of about {_about(bits)} bits (limit {self.limits.max_int_bits} bits)")

    def check_items(self, sample: Any, items: float) -> None:
        if items > self.limits.max_items:
            kind = "string" if isinstance(sample, str) else "list or tuple"
            unit = "characters" if isinstance(sample, str) else "items"
            raise self.refuse(f"a {kind} of about {_about(items)} {unit} (limit {self.limits.max_items})")

    def bounded(self, result: Any) -> Any:
        """A computed result, refused when it is over the integer or sequence limit."""
        if _is_int(result) and result.bit_length() > self.limits.max_int_bits:
            raise self.refuse(
                f"an integer of about {_about(result.bit_length())} bits (limit {self.limits.max_int_bits} bits)"
            )
        if isinstance(result, _SEQUENCES):
            self.check_items(result, _items(result, self.limits.max_items))
        return result


def _is_int(value: Any) -> bool:
    return isinstance(value, int)  # bool included: True * 'ab' repeats too


def _items(value: Any, cap: int) -> int:
    """Characters / elements in ``value``, nested ones counted too; stops counting past ``cap``."""
    total, stack = 0, [value]
    while stack and total <= cap:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, (list, tuple)):
            total += len(item)
            if total <= cap:
                stack.extend(item)
    return total


def _about(number: float) -> str:
    """``4096`` or ``1.2e21``: a size for a message."""
    if number < 1e6:
        return f"{int(number)}"
    mantissa, exponent = f"{number:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _show(source: str, width: int = 80) -> str:
    """The source quoted for a one-line message: newlines escaped, long text shortened."""
    text = source.replace("\r", "\\r").replace("\n", "\\n")
    return f"'{text if len(text) <= width else text[: width - 3] + '...'}'"


def _short(error: BaseException, width: int = 200) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= width else text[: width - 3] + "..."
