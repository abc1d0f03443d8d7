"""Many inputs per trial: the spec's ``cases`` block and the input sets a trial runs.

One prompt hides quality cliffs (a cache threshold that is harmless on one prompt can ruin another), so a
spec may list several inputs; every measured trial then runs each of them, and its quality is compared per
input with the same input's reference output::

    inputs:                        # shared by every case
      negative_prompt: ""
    cases:                         # several inputs: each measured trial runs every one
      - {name: cat, prompt: "a cat surfing a wave"}
      - {name: city, prompt: "a city street at night, rain"}
      - {prompt: "a paper boat on a pond"}          # named case3
    cliff_margins: {psnr_db: 3.0}  # flag an input this much worse than the trial's mean

or, one case per file of a folder (sorted by name; the case is named after the file's stem)::

    cases: {folder: clips, as: audio, glob: "*.wav"}

A case's values override the shared ``inputs``; ``name`` labels the case (letters, digits, ``_.-``) and is
not passed to the workload. Paths (``folder``) are relative to the working directory, like every input path.
Expressions (``derived``, ``rules``) see the shared inputs only.

Pure functions of the spec, except :func:`input_sets`, which lists a ``folder``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

CASE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
NAME_KEY = "name"
MAX_CASES = 64


class CasesFolder(BaseModel):
    """One case per file of ``folder`` matching ``glob``; the file's path is the case's input ``as``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    folder: str
    as_: str = Field(alias="as")
    glob: str = "*"


CasesSpec = list[dict[str, Any]] | CasesFolder


class SpecWithCases(Protocol):
    """What these functions read of a :class:`~tuner.spec.models.StudySpec`."""

    @property
    def inputs(self) -> dict[str, Any]: ...

    @property
    def cases(self) -> CasesSpec | None: ...

    @property
    def cliff_margins(self) -> dict[str, float]: ...


@dataclass(frozen=True)
class InputSet:
    """One input a trial runs: its ``name`` (``""`` for a spec without ``cases``) and its ``inputs`` (the shared
    values with the case's on top)."""

    name: str
    inputs: dict[str, Any]


def case_names(cases: list[dict[str, Any]]) -> list[str]:
    """Each listed case's name: its ``name``, else ``case<k>`` (1-based)."""
    return [str(case.get(NAME_KEY, f"case{index + 1}")) for index, case in enumerate(cases)]


def check_cases(spec: SpecWithCases, parameters: Mapping[str, Any], derived: Mapping[str, Any]) -> str | None:
    """Why the spec's ``cases`` / ``cliff_margins`` are wrong (``key: problem``), or None when fine."""
    cases = spec.cases
    if isinstance(cases, list):
        if not cases:
            return "cases: an empty list (leave cases out for one input)"
        if len(cases) > MAX_CASES:
            return f"cases: {len(cases)} cases; at most {MAX_CASES}"
        names = case_names(cases)
        for index, (case, name) in enumerate(zip(cases, names)):
            if not CASE_NAME.fullmatch(name):
                return f"cases.{index}.name: {name!r} is not a case name (1-64 letters, digits, '_', '.', '-')"
            clashes = sorted((set(case) - {NAME_KEY}) & (set(parameters) | set(derived)))
            if clashes:
                return f"cases.{index}: {clashes} are parameters or derived values, not inputs"
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            return f"cases: the name {twice[0]!r} is used twice (names: {names})"
    elif isinstance(cases, CasesFolder) and (cases.as_ in parameters or cases.as_ in derived):
        return f"cases.as: {cases.as_!r} is a parameter or derived value, not an input"
    for metric, margin in spec.cliff_margins.items():
        if not margin > 0:
            return f"cliff_margins.{metric}: the margin must be > 0, got {margin}"
    return None


def input_sets(spec: SpecWithCases) -> list[InputSet]:
    """The inputs each measured trial runs, in order: one unnamed set (the spec's ``inputs``) without ``cases``.

    Raises ValueError (``cases.folder: ...``) for a folder that cannot be read or holds no matching file."""
    shared = dict(spec.inputs)
    cases = spec.cases
    if cases is None:
        return [InputSet("", shared)]
    if isinstance(cases, CasesFolder):
        return _folder_sets(cases, shared)
    return [
        InputSet(name, {**shared, **{k: v for k, v in case.items() if k != NAME_KEY}})
        for name, case in zip(case_names(cases), cases)
    ]


def _folder_sets(cases: CasesFolder, shared: dict[str, Any]) -> list[InputSet]:
    folder = Path(cases.folder).expanduser()
    try:
        files = sorted(p for p in folder.glob(cases.glob) if p.is_file())
    except OSError as error:
        raise ValueError(f"cases.folder: cannot list {folder}: {error}") from None
    if not folder.is_dir():
        raise ValueError(f"cases.folder: {folder} is not a directory")
    if not files:
        raise ValueError(f"cases.folder: no file in {folder} matches {cases.glob!r}")
    if len(files) > MAX_CASES:
        raise ValueError(f"cases.folder: {len(files)} files in {folder} match {cases.glob!r}; at most {MAX_CASES}")
    sets = [
        InputSet(re.sub(r"[^A-Za-z0-9_.\-]", "_", p.stem)[:64] or "case", {**shared, cases.as_: str(p)}) for p in files
    ]
    names = [s.name for s in sets]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"cases.folder: two files of {folder} give the case name {twice[0]!r}")
    return sets


def input_keys(spec: SpecWithCases) -> set[str]:
    """Every input name a trial may see: the shared inputs and every case's (a folder's ``as``)."""
    keys = set(spec.inputs)
    if isinstance(spec.cases, list):
        keys |= {key for case in spec.cases for key in case if key != NAME_KEY}
    elif isinstance(spec.cases, CasesFolder):
        keys.add(spec.cases.as_)
    return keys


def listed_input_values(spec: SpecWithCases) -> list[dict[str, Any]]:
    """Each listed input set's values without reading a folder (a folder's cases: the shared inputs once), for
    checks that look at the values themselves (an input file the command copies must exist)."""
    if isinstance(spec.cases, list):
        return [{**spec.inputs, **{k: v for k, v in case.items() if k != NAME_KEY}} for case in spec.cases]
    if isinstance(spec.cases, CasesFolder):
        return [{**spec.inputs, spec.cases.as_: str(Path(spec.cases.folder) / spec.cases.glob)}]
    return [dict(spec.inputs)]


def request_input_fields(spec: SpecWithCases, aggregates: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """What a :class:`~tuner.runner.base.TrialRequest` carries of the spec's inputs: ``inputs`` (the first set's),
    ``input_sets`` (several: ``[{"name", "inputs"}]``; one: empty), ``aggregates`` (those of the used metrics:
    ``<metric>:worst`` / ``:p<NN>``) and ``cliff_margins``. Lists a ``cases.folder`` (call it once per study)."""
    from tuner.spec.metrics import split_aggregate

    sets = input_sets(spec)
    return {
        "inputs": dict(sets[0].inputs),
        "input_sets": [{"name": s.name, "inputs": s.inputs} for s in sets] if spec.cases is not None else [],
        "aggregates": sorted(name for name in aggregates if split_aggregate(name)[1] is not None),
        "cliff_margins": dict(spec.cliff_margins),
    }


def first_input_values(spec: SpecWithCases) -> dict[str, Any]:
    """The inputs of the first input set (what a native invocation of one request shows): the shared inputs with
    the first case's on top; a folder's first file (its ``folder/glob`` pattern when it cannot be listed)."""
    try:
        return dict(input_sets(spec)[0].inputs)
    except ValueError:
        return listed_input_values(spec)[0]
