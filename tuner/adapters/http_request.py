"""What one http-adapter request holds: its placeholder values, body template and concurrency.

Pure functions (no I/O), shared by the worker (:mod:`tuner.adapters.http`) and the
exporter (:mod:`tuner.ship.invocation`), so an exported request is the one that was sent.

Per-request values: the spec's inputs, then the setting (parameters and derived
values), then ``prompt`` and ``request_index``. An item of the ``prompts`` input may
be a string (the prompt) or a mapping: its ``prompt`` key is the prompt and its
other keys override the setting for that request only (per-request parameter
overrides, e.g. ``{prompt: ..., max_tokens: 16}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.adapters.template import TemplateError


def body_template(options: Mapping[str, Any]) -> dict[str, Any]:
    """The body template: ``body`` as declared; for ``openai_chat`` a ``messages`` list with the
    prompt as the user's message is added unless the body sets its own."""
    body = dict(options.get("body", {}))
    if options.get("api", "openai_chat") == "openai_chat" and "messages" not in body:
        body["messages"] = [{"role": "user", "content": "{prompt}"}]
    return body


def http_request_values(
    options: Mapping[str, Any], inputs: Mapping[str, Any], settings: Mapping[str, Any], index: int
) -> dict[str, Any]:
    """Placeholder values of request ``index`` (0-based; prompts are reused round-robin)."""
    values: dict[str, Any] = {**dict(inputs), **dict(settings), "request_index": index, "prompt": ""}
    prompts_name = options.get("prompts")
    if prompts_name is not None:
        prompts = inputs.get(prompts_name)
        if not isinstance(prompts, list) or not prompts:
            raise TemplateError(f"prompts: input '{prompts_name}' must be a non-empty list")
        item = prompts[index % len(prompts)]
        if isinstance(item, Mapping):
            values.update({str(k): v for k, v in item.items()})
        else:
            values["prompt"] = str(item)
    return values


def http_concurrency(value: int | str, values: Mapping[str, Any]) -> int:
    """Requests in flight at once: a number, or the value of a ``"{param}"`` placeholder (1..64)."""
    if isinstance(value, str):
        name = value.strip("{}")
        if name not in values:
            raise TemplateError(f"concurrency: placeholder {value} has no value")
        resolved = values[name]
    else:
        resolved = value
    if isinstance(resolved, bool) or not isinstance(resolved, int) or not 1 <= resolved <= 64:
        raise TemplateError(f"concurrency must be an integer within 1..64, got {resolved!r}")
    return resolved
