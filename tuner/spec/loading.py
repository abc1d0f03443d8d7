"""Loading a spec: YAML file or text -> validated :class:`~tuner.spec.models.StudySpec`.

:func:`load_spec` and :func:`parse_spec` are the only entry points; every
problem is reported as one :class:`~tuner.spec.models.SpecError` whose message
names the file, line, key and problem, e.g.::

    search_spaces/avatar.yaml:14: parameters.infer_frames.low: must be <= high (6 > 4)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tuner.spec.expressions import ExpressionError
from tuner.spec.models import SpecError, StudySpec


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a spec file. Raises :class:`SpecError` with file:line: key: problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"{path}: cannot read spec: {error.strerror or error}") from None
    return parse_spec(text, source=str(path))


def parse_spec(text: str, source: str = "<spec>") -> StudySpec:
    """Validate YAML text as a spec; ``source`` names it in error messages."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(error, "problem", None) or str(error)
        raise SpecError(f"{where}: not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{source}:1: the spec must be a mapping of keys (name, workload, parameters, ...)")
    lines = _key_lines(node)
    try:
        return StudySpec.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        location = tuple(str(p) for p in first["loc"] if not _is_union_tag(p, data))
        message = _clean_message(first["msg"], first["type"], first.get("input"))
        keyed = re.match(r"^(workload\.[\w.]+): (.*)$", message, re.DOTALL)
        if not location and keyed:  # a cross-check that names its own key path
            location, message = tuple(keyed.group(1).split(".")), keyed.group(2)
        line = _closest_line(lines, location)
        key = ".".join(location) or "(top level)"
        more = len(error.errors()) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise SpecError(f"{source}:{line}: {key}: {message}{suffix}") from None
    except ExpressionError as error:
        raise SpecError(f"{source}: {error}") from None


def _is_union_tag(part: Any, data: dict[str, Any]) -> bool:
    """pydantic puts the discriminator value (e.g. 'int') into error locations."""
    return part in ("int", "float", "categorical", "bool", "str") or (
        isinstance(part, str) and part.startswith("function-"))


def _clean_message(message: str, kind: str, value: Any) -> str:
    message = message.removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return "unknown key (check the spelling; see search_spaces/schema.json)"
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        return f"unknown type {value!r}: use int, float, categorical or bool" if not isinstance(value, dict) \
            else f"unknown parameter type {value.get('type')!r}: use int, float, categorical or bool"
    if kind == "union_tag_not_found":
        return "a parameter needs 'type': int, float, categorical or bool"
    return message


def _key_lines(node: yaml.Node | None) -> dict[tuple[str, ...], int]:
    """Map each key path in the YAML document to its 1-based line number."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(current: yaml.Node, path: tuple[str, ...]) -> None:
        lines.setdefault(path, current.start_mark.line + 1)
        if isinstance(current, yaml.MappingNode):
            for key_node, value_node in current.value:
                child = (*path, str(key_node.value))
                lines[child] = key_node.start_mark.line + 1
                walk(value_node, child)
        elif isinstance(current, yaml.SequenceNode):
            for index, item in enumerate(current.value):
                walk(item, (*path, str(index)))

    if node is not None:
        walk(node, ())
    return lines


def _closest_line(lines: dict[tuple[str, ...], int], location: tuple[str, ...]) -> int:
    for end in range(len(location), -1, -1):
        if location[:end] in lines:
            return lines[location[:end]]
    return 1
