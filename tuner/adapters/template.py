"""Rendering of adapter templates: ``{name}`` placeholders filled from a setting.

Pure functions, no I/O, importable by the coordinator: the worker renders what it
runs and :mod:`tuner.ship.invocation` renders what an export prints, with the same code,
so the two agree item for item.

Values become text with :func:`as_text`: ``True``/``False`` for booleans, ``str``
for numbers and strings (``0.5``, ``48``). A placeholder inside an argv item never
splits or joins items: one template item is one argv item, whatever the value
holds (spaces, quotes, ``;``, ``$(...)``), because no shell ever sees it.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from tuner.errors import InputError


class TemplateError(InputError):
    """A template names a value the setting does not have."""


def as_text(value: Any) -> str:
    """The text a value takes inside a template (see module docs)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return ""
    return str(value)


def render_text(template: str, values: Mapping[str, Any], where: str = "template") -> str:
    """``template`` with every ``{name}`` replaced by ``as_text(values[name])``."""
    parts: list[str] = []
    for literal, field, _, _ in string.Formatter().parse(template):
        parts.append(literal)
        if field is None:
            continue
        if field not in values:
            raise TemplateError(f"{where}: placeholder {{{field}}} has no value (have: {sorted(values)})")
        parts.append(as_text(values[field]))
    return "".join(parts)


def render_value(template: Any, values: Mapping[str, Any], where: str = "body") -> Any:
    """A JSON-like template rendered: a string that is exactly ``"{name}"`` becomes the value itself
    (numbers stay numbers), other strings are rendered as text, lists and mappings recursively."""
    if isinstance(template, str):
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        if len(names) == 1 and template == "{" + names[0] + "}":
            if names[0] not in values:
                raise TemplateError(f"{where}: placeholder {template} has no value (have: {sorted(values)})")
            return values[names[0]]
        return render_text(template, values, where)
    if isinstance(template, Mapping):
        return {str(k): render_value(v, values, f"{where}.{k}") for k, v in template.items()}
    if isinstance(template, list):
        return [render_value(v, values, f"{where}.{i}") for i, v in enumerate(template)]
    return template


def render_argv(argv: list[Any], values: Mapping[str, Any]) -> list[str]:
    """The argv of a ``command`` block: strings rendered one item each; a ``{flag, when}``
    item included only when ``values[when]`` is true."""
    rendered: list[str] = []
    for index, item in enumerate(argv):
        if isinstance(item, Mapping):
            when = item["when"]
            if when not in values:
                raise TemplateError(f"argv.{index}.when: '{when}' has no value")
            if values[when] is True:
                rendered.append(render_text(item["flag"], values, f"argv.{index}.flag"))
            elif values[when] is not False:
                raise TemplateError(f"argv.{index}.when: '{when}' must be true or false, not {values[when]!r}")
        else:
            rendered.append(render_text(str(item), values, f"argv.{index}"))
    return rendered


def command_values(settings: Mapping[str, Any], inputs: Mapping[str, Any], gpus: int, seed: int) -> dict[str, Any]:
    """Names a command template may use: inputs, parameters and derived values, ``num_gpus``, ``seed``."""
    return {**dict(inputs), **dict(settings), "num_gpus": gpus, "seed": seed}


def render_command(
    options: Mapping[str, Any], settings: Mapping[str, Any], inputs: Mapping[str, Any], seed: int
) -> dict[str, Any]:
    """``{"argv", "env", "cwd"}`` of a command block (``options`` = the block as plain data).

    ``env`` holds only the variables the spec sets (they are added to the
    worker's environment); ``cwd`` is None when the spec leaves it to the runner
    (a fresh directory per trial).
    """
    values = command_values(settings, inputs, int(options.get("gpus", 1)), seed)
    env = {k: render_text(v, values, f"env.{k}") for k, v in dict(options.get("env", {})).items()}
    cwd = options.get("cwd")
    return {
        "argv": render_argv(list(options["argv"]), values),
        "env": env,
        "cwd": render_text(cwd, values, "cwd") if cwd is not None else None,
    }
