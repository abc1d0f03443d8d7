"""The checks ``tuner validate`` and ``tuner run`` share: a spec passes only if a run would start.

:func:`check_runnable` runs, on this host, everything a run needs before its
first trial that the spec models cannot know on their own:

- the sampler can be built with the spec's options and proposes a first setting
  (unknown options, a grid over a continuous parameter);
- the workload's ``module:Class`` (and a ``python`` factory) exists: the module
  is found and defines the name — read from its source without importing it
  when possible, so ``validate`` stays quick and runs no user code;
- ``workload.device`` is usable here (``cuda`` without a GPU names ``auto`` / ``cpu``);
- the optional modules the spec's metrics and outputs need are installed: a metric of the
  perceptual, flicker, warping, seam or lip-sync family, or a video container (``.mp4``) a
  command writes, without its extra is refused naming the metric (or output) and the extra
  (:mod:`tuner.spec.extras`; looked up with ``find_spec``, never imported).

Every problem is one :class:`~tuner.spec.models.SpecError`:
``file:line: key: problem``. ``tuner validate`` and ``tuner run`` call this same
function, so what validate passes, run starts (a test walks every spec through both).
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path
from typing import Any

from tuner.spec.extras import (
    EXTRA_OF_MODULE,
    VIDEO_CONTAINER_MODULES,
    MissingExtra,
    install_command,
    missing_modules,
    quality_modules,
)
from tuner.spec.loading import key_line
from tuner.spec.metrics import QUALITY_FAMILIES
from tuner.spec.models import SamplerName, SpecError, StudySpec
from tuner.spec.quality.cases import input_sets


def check_runnable(
    spec: StudySpec, spec_text: str, source: str, sampler: SamplerName | None = None, host: bool = True
) -> str:
    """Raise :class:`SpecError` when a run of ``spec`` could not start here; return its device.

    ``host=False`` leaves out what depends on this host (device, workload import) — for
    checking a GPU spec on a laptop; the device returned is then the spec's own.
    """

    def refuse(path: tuple[str, ...], problem: str) -> SpecError:
        return SpecError(f"{source}:{key_line(spec_text, path)}: {'.'.join(path)}: {problem}")

    if not host:
        _sampler(spec, sampler or spec.sampler.name, refuse)
        return spec.workload.device
    device = _device(spec, refuse)
    for key, target in spec.workload.import_paths.items():
        problem = import_problem(target)
        if problem is not None:
            path = tuple(key.split("."))
            if key == "workload.class" and spec.workload.adapter is not None:
                path = ("workload", spec.workload.adapter)
            raise refuse(path, problem)
    _extras(spec, refuse)
    _sampler(spec, sampler or spec.sampler.name, refuse)
    try:
        input_sets(spec)  # a cases folder that cannot be listed or is empty
    except ValueError as error:
        key, _, problem = str(error).partition(": ")
        raise refuse(tuple(key.split(".")), problem) from None
    return device


def _extras(spec: StudySpec, refuse: Any) -> None:
    """Refuse a metric or output whose optional modules (an extra's) are not installed here."""
    family_of = {name: family.name for family in QUALITY_FAMILIES for name in family.metrics}
    named: list[tuple[tuple[str, ...], str]] = (
        [(("objectives", str(i), "metric"), o.metric) for i, o in enumerate(spec.objectives)]
        + [(("constraints", str(i), "metric"), c.metric) for i, c in enumerate(spec.constraints)]
        + [(("report", str(i)), m) for i, m in enumerate(spec.report)]
    )
    missing: list[tuple[tuple[str, ...], str, str]] = []  # (key path, metric, first absent module)
    for path, metric in named:
        absent = missing_modules(quality_modules(metric, family_of.get(metric, "")))
        if absent:
            missing.append((path, metric, absent[0]))
    if missing:
        path, metric, module = missing[0]
        problem = str(MissingExtra(module, EXTRA_OF_MODULE[module], f"metric '{metric}'"))
        extras = list(dict.fromkeys(EXTRA_OF_MODULE[m] for _, _, m in missing))
        if len(extras) > 1:  # every extra the spec misses, so that one install covers them all
            others = ", ".join(f"'{e}'" for e in extras[1:])
            problem += f"; its other metrics need {others} too: {install_command(','.join(extras))}"
        raise refuse(path, problem)
    _output_extras(spec, refuse)


def _output_extras(spec: StudySpec, refuse: Any) -> None:
    """Refuse a command's video container output without OpenCV (frames) or PyAV (its audio track,
    read when no ``outputs.audio`` file is declared)."""
    from tuner.adapters.media import is_container

    outputs = spec.workload.command.outputs if spec.workload.command is not None else None
    if outputs is None or outputs.video is None or not is_container(Path(outputs.video)):
        return
    absent = missing_modules(VIDEO_CONTAINER_MODULES if outputs.audio is None else VIDEO_CONTAINER_MODULES[:1])
    if absent:
        raise refuse(
            ("workload", "command", "outputs", "video"),
            str(MissingExtra(absent[0], EXTRA_OF_MODULE[absent[0]], f"the video container output '{outputs.video}'")),
        )


def _device(spec: StudySpec, refuse: Any) -> str:
    from tuner.gpu import resolve_device

    try:
        return resolve_device(spec.workload.device)
    except ValueError as error:
        raise refuse(("workload", "device"), str(error)) from None


def _sampler(spec: StudySpec, name: SamplerName, refuse: Any) -> None:
    """Build the sampler as the study will, and ask it for one setting in a throwaway in-memory study."""
    import optuna

    from tuner.search.samplers import make_sampler, sampler_class
    from tuner.spec.space import distributions

    options_key = ("sampler", "options")
    try:
        sampler = make_sampler(name, spec, spec.seed)
    except TypeError as error:
        accepted = _accepted_options(sampler_class(name))
        unknown = sorted(set(spec.sampler.options) - accepted) if accepted is not None else []
        if unknown:
            raise refuse(
                (*options_key, unknown[0]),
                f"the {name} sampler has no option '{unknown[0]}' "
                f"(it takes: {', '.join(sorted(accepted or ())) or 'none'})",
            ) from None
        raise refuse(options_key, f"the {name} sampler refused its options: {error}") from None
    except ValueError as error:
        text = str(error)
        if text.startswith("parameters."):  # the grid needs a step on a float parameter
            key, _, problem = text.partition(": ")
            raise refuse(tuple(key.split(".")), problem) from None
        raise refuse(options_key, f"the {name} sampler refused its options: {text}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(directions=[o.direction for o in spec.objectives], sampler=sampler)
        study.ask(distributions(spec))
    except Exception as error:  # noqa: BLE001 - any sampler failure on its first ask is the spec's problem
        raise refuse(
            options_key, f"the {name} sampler fails on its first proposal: {type(error).__name__}: {error}"
        ) from None


def _accepted_options(cls: type | None) -> set[str] | None:
    """Keyword options a sampler class takes (``seed`` and a grid's space are the study's), or None."""
    if cls is None:
        return None
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {
        "seed",
        "search_space",
    }


def import_problem(target: str) -> str | None:
    """Why ``module:name`` cannot be imported, or None when the module defines the name.

    The module is located without running it (``importlib.util.find_spec`` runs only
    parent packages' ``__init__``); its source is parsed for a top-level definition
    of ``name``. A module that builds names dynamically (``__getattr__``, ``*``
    imports) or has no Python source is imported to look.
    """
    module, _, name = target.partition(":")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as error:
        return f"cannot find module '{module}' ({error}; is it installed / on PYTHONPATH?)"
    if found is None:
        return f"cannot find module '{module}' (is it installed / on PYTHONPATH?)"
    defined = _top_level_names(found.origin)
    if defined is not None and name in defined:
        return None
    if defined is not None and "__getattr__" not in defined and "*" not in defined:
        return f"module '{module}' has no '{name}' ({found.origin})"
    try:
        loaded = importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - the user's module failed to import: say how
        return f"importing '{module}' failed: {type(error).__name__}: {error}"
    return None if hasattr(loaded, name) else f"module '{module}' has no '{name}'"


def _top_level_names(origin: str | None) -> set[str] | None:
    """Names a Python source file binds at top level (``*`` for a star import); None without source."""
    if origin is None or not origin.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    names: set[str] = set()
    for node in _top_level(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Top-level statements, looking inside ``if`` / ``try`` blocks (conditional definitions)."""
    statements: list[ast.stmt] = []
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        statements.append(node)
        if isinstance(node, ast.If):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
        elif isinstance(node, ast.With):
            pending += node.body
    return statements
