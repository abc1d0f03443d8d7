"""Loading a spec: YAML file or text -> validated :class:`~tuner.spec.models.StudySpec`.

:func:`load_spec` and :func:`parse_spec` are the entry points; every problem is
reported as one :class:`~tuner.spec.models.SpecError` whose message is one line
naming the file, line, key and problem, e.g.::

    search_spaces/avatar.yaml:14: parameters.infer_frames.low: must be <= high (6 > 4)
    spec.yaml:9: paramters: unknown key (did you mean 'parameters'?)

The YAML is read within limits (size, nesting, alias expansion, no repeated
keys; see :mod:`tuner.spec.yaml_guard` and docs/specs.md "Limits"). Of several
validation problems the first unknown key is reported (a misspelt key is
usually why a required one is "missing"), with the closest allowed key.

A validator may name its own key: a message ``"<key.path>: problem"`` whose
first part is a :class:`StudySpec` field (``rules.0.expr``, ``derived.x``,
``sampler.options``, ``workload.class``, ``baseline``...) is reported at that
key's line.

Checks outside this module point at a key's line with :func:`key_line`
(``key_line(text, ("sampler", "options")) -> 31``, the closest enclosing key
that exists, 1 when none) or :func:`spec_key_lines` (every key path -> line).
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from tuner.spec.expressions import ExpressionError
from tuner.spec.models import SpecError, StudySpec
from tuner.spec.yaml_guard import MAX_SPEC_BYTES, KeyPath, YamlProblem, load_yaml, yaml_key_lines

_KEYED = re.compile(r"^([^\s:.'\"]+(?:\.[^\s:.'\"]+)*): (.*)$", re.DOTALL)


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a spec file. Raises :class:`SpecError` with file:line: key: problem."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as error:
        raise SpecError(f"{path}: cannot read spec: {error.strerror or error}") from None
    if len(raw) > MAX_SPEC_BYTES:
        size = _file_size(path)
        shown = f"{size:,} bytes" if size > MAX_SPEC_BYTES else f"more than {MAX_SPEC_BYTES:,} bytes"
        raise SpecError(
            f"{path}:1: (top level): the spec is {shown} (limit {MAX_SPEC_BYTES:,} bytes = 1 MiB); "
            "keep large data in files the workload reads"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: (top level): not UTF-8 text (byte {error.start})") from None
    return parse_spec(text, source=str(path))


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def parse_spec(text: str, source: str = "<spec>") -> StudySpec:
    """Validate YAML text as a spec; ``source`` names it in error messages."""
    try:
        data, lines = load_yaml(text)
    except YamlProblem as problem:
        raise SpecError(_line(source, problem.line, problem.path, problem.problem)) from None
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}:1: (top level): the spec must be a mapping of keys (name, workload, parameters, ...)"
        )
    try:
        return StudySpec.model_validate(data)
    except ValidationError as error:
        raise SpecError(_validation_message(error, lines, source)) from None
    except ExpressionError as error:
        raise SpecError(_line(source, 1, (), str(error))) from None
    except (RecursionError, MemoryError) as error:
        raise SpecError(
            _line(source, 1, (), f"the spec is too deeply nested or too large to validate ({type(error).__name__})")
        ) from None


def spec_key_lines(text: str) -> dict[KeyPath, int]:
    """Every key path of a spec's YAML text -> its 1-based line; ``{}`` when the text cannot be read.

    Paths are tuples of strings; list items are their index (``("rules", "0", "expr")``).
    """
    try:
        return yaml_key_lines(text)
    except (YamlProblem, RecursionError, MemoryError):
        return {}


def key_line(text: str, path: Iterable[str]) -> int:
    """The 1-based line of ``path`` in a spec's YAML text, or of its closest enclosing key; 1 if none."""
    return _closest_line(spec_key_lines(text), tuple(str(p) for p in path))


def _line(source: str, line: int, path: KeyPath, problem: str) -> str:
    """``file:line: key.path: problem``, always one line (a very deep path shows its ends)."""
    shown = path if len(path) <= 12 else (*path[:6], f"({len(path) - 9} more)", *path[-3:])
    return f"{source}:{line}: {'.'.join(shown) or '(top level)'}: {' '.join(problem.split())}"


def _validation_message(error: ValidationError, lines: dict[KeyPath, int], source: str) -> str:
    errors = error.errors()
    chosen = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])  # a typo explains "missing"
    raw = tuple(chosen["loc"])
    location = tuple(str(p) for p in raw if not _is_union_tag(p))
    explained: list[ErrorDetails] = [chosen]
    if chosen["type"] == "extra_forbidden":
        message, suggestion = _unknown_key(raw, errors)
        explained += [
            e
            for e in errors
            if e["type"] == "missing" and suggestion is not None and tuple(e["loc"]) == (*raw[:-1], suggestion)
        ]
    else:
        message = _clean_message(chosen["msg"], chosen["type"], chosen.get("input"))
        keyed = _KEYED.match(message)
        if keyed:  # a validator that names its own key path
            path = tuple(keyed.group(1).split("."))
            if path[0] in _field_keys(StudySpec) and path[: len(location)] == location:
                location, message = path, keyed.group(2)
    more = len(errors) - len(explained)
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return _line(source, _closest_line(lines, location), location, message + suffix)


def _unknown_key(raw: tuple[Any, ...], errors: list[ErrorDetails]) -> tuple[str, str | None]:
    """The message for an unknown key, with the closest allowed key at that place (if any is close)."""
    allowed = set(_allowed_keys(raw[:-1]))
    allowed |= {str(e["loc"][-1]) for e in errors if e["type"] == "missing" and tuple(e["loc"][:-1]) == raw[:-1]}
    close = difflib.get_close_matches(str(raw[-1]), sorted(allowed), n=1, cutoff=0.6)
    if close:
        return f"unknown key (did you mean '{close[0]}'?)", close[0]
    return "unknown key (check the spelling; see search_spaces/schema.json)", None


def _allowed_keys(location: tuple[Any, ...]) -> list[str]:
    """Keys the model at pydantic's raw error ``location`` accepts, following the StudySpec annotations."""
    current: list[Any] = [StudySpec]
    for part in location:
        following: list[Any] = []
        for kind in _members(current):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                fields = {f.alias or name: f for name, f in _model_fields(kind).items()}
                if part in fields:
                    following.append(fields[part].annotation)
                elif _is_tag(kind, part):  # a union member's tag: stay on this model
                    following.append(kind)
            elif typing.get_origin(kind) is dict:
                following.append(typing.get_args(kind)[1])
            elif typing.get_origin(kind) is list and isinstance(part, int):
                following.append(typing.get_args(kind)[0])
        current = following
    return [
        key
        for kind in _members(current)
        if isinstance(kind, type) and issubclass(kind, BaseModel)
        for key in _field_keys(kind)
    ]


def _members(kinds: list[Any]) -> list[Any]:
    """Types with ``Annotated``, ``Optional`` and unions unwrapped into their members."""
    result: list[Any] = []
    stack = list(kinds)
    while stack:
        kind = stack.pop()
        origin = typing.get_origin(kind)
        if origin is typing.Annotated:
            stack.append(typing.get_args(kind)[0])
        elif origin is typing.Union or origin is types.UnionType:
            stack.extend(typing.get_args(kind))
        else:
            result.append(kind)
    return result


def _is_tag(model: type[BaseModel], part: Any) -> bool:
    """Whether ``part`` is how pydantic names ``model`` as a union member (its class or its type tag)."""
    if not isinstance(part, str):
        return False
    if part == model.__name__ or part.startswith("function-"):
        return True
    return any(
        typing.get_origin(f.annotation) is typing.Literal and part in typing.get_args(f.annotation)
        for f in _model_fields(model).values()
    )


def _field_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in _model_fields(model).items()]


def _model_fields(model: Any) -> dict[str, Any]:
    """A model class's fields (name -> FieldInfo with ``alias`` and ``annotation``)."""
    return dict(model.model_fields)


def _is_union_tag(part: Any) -> bool:
    """pydantic puts the discriminator value (e.g. 'int') into error locations."""
    return part in ("int", "float", "categorical", "bool", "str") or (
        isinstance(part, str) and part.startswith("function-")
    )


def _clean_message(message: str, kind: str, value: Any) -> str:
    message = message.removeprefix("Value error, ")
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        return (
            f"unknown type {value!r}: use int, float, categorical or bool"
            if not isinstance(value, dict)
            else f"unknown parameter type {value.get('type')!r}: use int, float, categorical or bool"
        )
    if kind == "union_tag_not_found":
        return "a parameter needs 'type': int, float, categorical or bool"
    if kind == "finite_number":
        return f"must be a finite number (got {value!r})"
    return message


def _closest_line(lines: dict[KeyPath, int], location: KeyPath) -> int:
    for end in range(len(location), -1, -1):
        if location[:end] in lines:
            return lines[location[:end]]
    return 1
