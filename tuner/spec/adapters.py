"""The adapter blocks of a spec's ``workload`` section: ``command``, ``python`` and ``http``.

A spec names its workload in exactly one of four ways (see docs/adapters.md)::

    workload: {class: module:Class}                       # a Workload subclass
    workload: {command: {argv: [...], ...}}              # a program, run per call
    workload: {python: {factory: module:callable, ...}}  # load(static) + run(params, inputs)
    workload: {http: {url: ..., ...}}                    # a running inference service

Templates
---------
Strings in ``argv``, ``env``, ``cwd``, ``outputs``, ``url`` and ``body`` may hold
``{name}`` placeholders (``{{`` and ``}}`` for literal braces). A name must be a
parameter, a derived value, an input, or one of the adapter's own names
(:data:`COMMAND_NAMES`, :data:`HTTP_NAMES`); :func:`template_names` finds them and
``StudySpec`` refuses unknown ones when the spec is loaded. Rendering lives in
:mod:`tuner.adapters.template`. This module only declares and checks shapes.

Output paths (``outputs.video|audio|text``) are deleted before each call, so they must
stay inside the trial directory: see :func:`tuner.spec.outputs.output_syntax_problem`
(checked with the block, :mod:`tuner.spec.outputs`) and :func:`output_path_problems`
(also refuses inputs as placeholders; run by the spec's name cross-check).
"""

from __future__ import annotations

import re
import string
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.spec.metrics import STREAMING_METRICS
from tuner.spec.outputs import (  # noqa: F401 - OUTPUT_KINDS, output_syntax_problem: re-exported
    OUTPUT_KINDS,
    CommandOutputs,
    output_refusal,
    output_syntax_problem,
)

COMMAND_NAMES = ("num_gpus", "seed")
"""Placeholders every command template may use: ``num_gpus`` = ``command.gpus``, ``seed`` = the study seed."""

HTTP_NAMES = ("prompt", "request_index")
"""Placeholders every http body may use: the request's prompt and its 0-based index."""

DEFAULT_OOM_PATTERNS = (
    r"CUDA out of memory",
    r"torch\.OutOfMemoryError",
    r"torch\.cuda\.OutOfMemoryError",
    r"CUBLAS_STATUS_ALLOC_FAILED",
    r"cudaErrorMemoryAllocation",
    r"\bMemoryError\b",
)
"""Log patterns (regular expressions) that make a failed command an OOM outcome."""

DEFAULT_INVALID_PATTERNS = (
    r"error: unrecognized arguments: ",
    r"error: argument \S+: ",
    r"error: the following arguments are required: ",
    r"error: ambiguous option: ",
    r"invalid choice: ",
    r"^Error: (?:No such option|Invalid value for|Missing option|Missing argument|Got unexpected extra argument)",
)
"""Log patterns (regular expressions, ``^``/``$`` per line) of argument-parser refusals (argparse, click):
a failed command whose log matches one is INVALID whatever its exit status (torchrun reports a
rank's exit 2 as 1). argparse's ``parser.error()`` shape (``usage:`` then ``prog: error: ...``) counts too."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def template_names(text: str) -> list[str]:
    """The ``{name}`` placeholders in ``text``; raises ValueError for a malformed template."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as error:
        raise ValueError(f"template {text!r}: {error} (write {{{{ and }}}} for literal braces)") from None
    names: list[str] = []
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            raise ValueError(
                f"template {text!r}: placeholder {{{field}}} must be a plain name (no format spec, index or attribute)"
            )
        names.append(field)
    return names


def _check_import_path(value: str) -> str:
    module, _, name = value.partition(":")
    if not module or not name or not all(p.isidentifier() for p in module.split(".")) or not name.isidentifier():
        raise ValueError(f"'{value}' is not an import path of the form package.module:name")
    return value


class FlagItem(_Strict):
    """An argv item that appears only when ``when`` (a bool parameter, or a derived value that is a bool) is true."""

    flag: str = Field(min_length=1)
    when: str

    @field_validator("when")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError(f"'{value}' is not a parameter name")
        return value


ArgvItem = str | FlagItem


class CommandMetric(_Strict):
    """A metric read from the program's stdout/stderr by a regular expression.

    The expression's first group (or the whole match) is the value; the last
    match of the last call counts. ``unit`` and ``direction`` describe it.
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    regex: str
    unit: str = "1"
    direction: Literal["minimize", "maximize"] = "minimize"

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"regex {value!r} does not compile: {error}") from None
        return value


class ChunkMarkers(_Strict):
    """Chunk markers: each ``stream`` line that ``pattern`` matches (``re.search``) is a chunk ready at the
    moment the line is read; its seconds of output are the named group ``seconds``, else ``output_s``."""

    pattern: str = Field(min_length=1)
    stream: Literal["stdout", "stderr"] = "stdout"
    output_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @field_validator("pattern")
    @classmethod
    def _marker(cls, value: str) -> str:
        try:
            compiled = re.compile(value)
        except re.error as error:
            raise ValueError(f"pattern {value!r} does not compile: {error}") from None
        others = sorted(set(compiled.groupindex) - {"seconds"})
        if others:
            raise ValueError(
                f"pattern {value!r}: named group {others[0]!r} is not read (only (?P<seconds>...), "
                f"the chunk's seconds of output)"
            )
        if compiled.search("") is not None:
            raise ValueError(f"pattern {value!r} matches an empty line, so every line would count as a chunk")
        return value

    @model_validator(mode="after")
    def _duration(self) -> ChunkMarkers:
        if self.output_s is None and "seconds" not in re.compile(self.pattern).groupindex:
            raise ValueError(
                f"pattern {self.pattern!r} has no (?P<seconds>...) group, so give output_s "
                f"(the seconds of output each chunk holds)"
            )
        return self


class CommandSpec(_Strict):
    """A program run once per measured call, without a shell (see docs/adapters.md).

    A failed call is INVALID when a log line matches an argument-parser refusal
    (built-in argparse / click patterns plus invalid_patterns) or its exit status
    is in invalid_exit_codes, OOM when a line matches an out-of-memory message
    (built-in plus oom_patterns); patterns are regular expressions searched line
    by line in stderr and stdout. ``chunks`` makes the program's marker lines a stream of chunks
    (time to first chunk, real-time factor, stalls: :mod:`tuner.adapters.chunk_tap`).
    """

    argv: list[ArgvItem] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    outputs: CommandOutputs = Field(default_factory=CommandOutputs)
    metrics: list[CommandMetric] = Field(default_factory=list)
    oom_patterns: list[str] = Field(default_factory=list)
    invalid_patterns: list[str] = Field(default_factory=list)
    invalid_exit_codes: list[int] = Field(default_factory=lambda: [2])
    gpus: int = Field(default=1, ge=1)
    chunks: ChunkMarkers | None = None

    @field_validator("oom_patterns", "invalid_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"pattern {pattern!r} does not compile: {error}") from None
        return patterns

    @model_validator(mode="after")
    def _check(self) -> CommandSpec:
        first = self.argv[0]
        if not isinstance(first, str) or not first.strip():
            raise ValueError("argv[0] must be the program (a non-empty string)")
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"metrics repeat a name: {names}")
        clash = sorted(set(names) & set(STREAMING_METRICS)) if self.chunks is not None else []
        if clash:
            raise ValueError(f"metrics: {clash[0]!r} is a streaming figure the chunks block reports; rename it")
        problem = _cwd_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    def templates(self) -> list[tuple[str, str]]:
        """(key path, template) for every templated string, for name checks."""
        found: list[tuple[str, str]] = []
        for index, item in enumerate(self.argv):
            found.append((f"argv.{index}", item.flag if isinstance(item, FlagItem) else item))
        found += [(f"env.{k}", v) for k, v in self.env.items()]
        if self.cwd is not None:
            found.append(("cwd", self.cwd))
        found += [(f"outputs.{kind}", value) for kind, value in self.outputs.declared()]
        return found

    def flag_names(self) -> list[tuple[str, str]]:
        """(key path, parameter name) of every conditional flag."""
        return [(f"argv.{i}.when", item.when) for i, item in enumerate(self.argv) if isinstance(item, FlagItem)]


def _cwd_problem(command: CommandSpec) -> str | None:
    """Outputs are relative to the working directory, so they need the default one (the trial's)."""
    declared = command.outputs.declared()
    if command.cwd is None or not declared:
        return None
    return (
        f"cwd: {command.cwd!r} is not the trial directory, and outputs ({', '.join(k for k, _ in declared)}) "
        f"are read relative to it, where the tuner would delete them before each call; drop cwd: "
        f"(the program then runs in the trial's run directory, where outputs land) and pass the program "
        f"its own paths through inputs, like '{{checkout}}/generate.py'"
    )


def output_path_problems(command: CommandSpec, input_names: set[str]) -> list[tuple[str, str]]:
    """(key path under ``workload.command``, problem) for every output that could leave the trial directory.

    Besides the shape rules of :func:`output_syntax_problem` and the ``cwd:`` rule (both also
    enforced when the block is validated), an output template may not use an input as a
    placeholder: inputs are the user's own values (files, prompts), so ``{audio}`` or
    ``out_{audio}.wav`` could name the user's file. Parameters, derived values and
    :data:`COMMAND_NAMES` are allowed (a value that still escapes is refused at run time).
    Malformed templates are left to the name check. Empty when all is well.
    """
    problems: list[tuple[str, str]] = []
    cwd = _cwd_problem(command)
    if cwd is not None:
        problems.append(("cwd", cwd))
    for kind, template in command.outputs.declared():
        problem = output_syntax_problem(template)
        if problem is None:
            try:
                used = [name for name in template_names(template) if name in input_names]
            except ValueError:
                used = []
            if used:
                problem = output_refusal(
                    template,
                    f"placeholder {{{used[0]}}} is an input (the user's own value, often a file), not a setting",
                )
        if problem is not None:
            problems.append((f"outputs.{kind}", problem))
    return problems


class PythonSpec(_Strict):
    """A ``module:factory`` returning an object with ``load(static_params)`` and ``run(params, inputs)``.

    ``kwargs`` go to the factory. ``reload_on`` names the parameters (or derived
    values) whose change needs a new ``load``: a warm worker keeps the loaded
    model across trials whose values of these are unchanged.
    """

    factory: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    reload_on: list[str] = Field(default_factory=list)

    @field_validator("factory")
    @classmethod
    def _path(cls, value: str) -> str:
        return _check_import_path(value)


class HttpSpec(_Strict):
    """A running inference service, measured at a concurrency (see docs/adapters.md).

    ``api``: ``openai_chat`` (POST an OpenAI chat/completions body; the answer is
    ``choices[0].message.content``) or ``json`` (POST ``body``; the answer is at
    ``response_text``, a dotted path, when given). ``body`` is a template: a string
    that is exactly ``"{name}"`` becomes the value itself (numbers stay numbers).
    ``prompts`` names an input holding the list of prompts, one per request;
    ``requests`` is how many requests one measured call sends, ``concurrency``
    how many are in flight at once (a number, or ``"{param}"``).
    """

    url: str
    api: Literal["openai_chat", "json"] = "openai_chat"
    body: dict[str, Any] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    prompts: str | None = None
    requests: int = Field(default=4, ge=1)
    concurrency: int | str = 1
    request_timeout_s: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    response_text: str | None = None

    @field_validator("concurrency")
    @classmethod
    def _concurrency(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= 64:
            raise ValueError(f"concurrency must be within 1..64 (got {value})")
        if isinstance(value, str) and not re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_]*\}", value):
            raise ValueError(f"concurrency must be a number or a single '{{param}}' placeholder, not {value!r}")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://", "{")):
            raise ValueError(f"url must start with http:// or https:// (got {value!r})")
        return value

    def templates(self) -> list[tuple[str, str]]:
        found = [("url", self.url)] + [(f"headers.{k}", v) for k, v in self.headers.items()]
        if isinstance(self.concurrency, str):
            found.append(("concurrency", self.concurrency))

        def walk(value: Any, path: str) -> None:
            if isinstance(value, str):
                found.append((path, value))
            elif isinstance(value, dict):
                for key, item in value.items():
                    walk(item, f"{path}.{key}")
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    walk(item, f"{path}.{index}")

        walk(self.body, "body")
        return found


HTTP_METRICS: dict[str, tuple[str, Literal["minimize", "maximize"]]] = {
    "request_latency_p50_s": ("s", "minimize"),
    "request_latency_p95_s": ("s", "minimize"),
    "request_latency_p99_s": ("s", "minimize"),
    "request_latency_mean_s": ("s", "minimize"),
    "requests_per_s": ("requests/s", "maximize"),
    "output_tokens_per_s": ("tokens/s", "maximize"),
}
"""Metrics the http adapter measures besides the worker's own (one measured call = ``requests`` requests)."""

ADAPTER_CLASSES = {
    "command": "tuner.adapters.command:CommandWorkload",
    "python": "tuner.adapters.python:PythonAdapterWorkload",
    "http": "tuner.adapters.http:HttpWorkload",
}
"""The Workload class the worker runs for each adapter block."""
