"""The package layout holds: imports point one way and no module cycle exists.

Every ``import`` in ``tuner/`` is parsed with :mod:`ast`,
including imports deferred into functions (they run sooner or later, so a
cycle behind one is still a cycle); only imports under ``if TYPE_CHECKING:``
are left out. Each module belongs to a layer; a module may import its own
package and the layers below it, never one above.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module may import modules of its own layer (no cycles) and of any lower layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "tuner.results",
        "tuner.host",
        "tuner.gpu",
        "tuner.pareto",  # foundation: data types, host facts, Pareto arithmetic,
        "tuner.secrets",
        "tuner.errors",  # redaction and child environments, the exception tree,
        "tuner.storage.attributes",
    ),  # the storage gateway's attribute names and trial readers (the front judges trials)
    ("tuner.spec",),
    ("tuner.evaluators",),
    ("tuner.workloads",),
    ("tuner.adapters",),
    ("tuner.runner",),
    ("tuner.storage",),  # the storage gateway: Optuna's storage, attributes and internals, outages
    ("tuner.search",),  # what to try next and what to skip
    ("tuner.study",),  # the loop: create / load, ask -> run -> tell
    ("tuner.replay",),  # studies replayed against measured tables (the search-efficiency bench)
    ("tuner.front",),
    ("tuner.tracking",),
    ("tuner.ship",),
    ("tuner.session",),  # one run of a study, no terminal output: wires study, tracking and ship
    ("tuner.fleet",),
    ("tuner.cli",),
    ("tuner.api", "tuner.__main__", "tuner.testing", "tuner"),  # the facade and test support
)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int


def layer_of(module: str) -> int:
    """Index into :data:`LAYERS` of the longest prefix naming ``module``'s package."""
    best: tuple[int, int] | None = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    if best is None:
        raise AssertionError(f"{module} belongs to no layer: add it to LAYERS")
    return best[0]


def project_sources(root: Path = ROOT) -> dict[str, tuple[str, bool]]:
    """Module name -> (source text, is a package ``__init__``) for tuner/."""
    sources: dict[str, tuple[str, bool]] = {}
    for package in ("tuner",):
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            is_init = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_init else parts)
            sources[name] = (path.read_text(), is_init)
    return sources


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of import nodes inside ``if TYPE_CHECKING:`` blocks."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest project module that ``name`` (a dotted import path) lies in."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_edges(sources: dict[str, tuple[str, bool]], type_only: bool = False) -> list[Edge]:
    """Every project-internal import (deferred ones included; TYPE_CHECKING ones only with ``type_only``)."""
    modules = set(sources)
    edges: list[Edge] = []
    for module, (text, is_init) in sources.items():
        tree = ast.parse(text)
        skipped = set() if type_only else _type_checking_nodes(tree)
        package = module if is_init else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # "from tuner import gpu" imports the module tuner.gpu; "from x import Name" imports x
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            for target in targets:
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != module:
                    edges.append(Edge(module, resolved, getattr(node, "lineno", 0)))
    return edges


def direction_violations(edges: list[Edge]) -> list[str]:
    """Imports that point up the layers."""
    return [
        f"{e.source}:{e.line} imports {e.target} (layer {layer_of(e.target)} > {layer_of(e.source)})"
        for e in edges
        if layer_of(e.target) > layer_of(e.source)
    ]


def import_cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer() -> None:
    layers = {module: layer_of(module) for module in project_sources()}
    assert layers["tuner.spec.models"] < layers["tuner.study.coordinator"] < layers["tuner.cli.main"]
    assert all(0 <= layer < len(LAYERS) for layer in layers.values())


def test_imports_point_down_the_layers() -> None:
    assert direction_violations(import_edges(project_sources())) == []


def test_no_import_cycles_even_behind_deferred_imports() -> None:
    assert import_cycles(import_edges(project_sources())) == []


def test_no_cycles_even_through_type_only_imports() -> None:
    """A type named under ``if TYPE_CHECKING:`` may point up the layers (a view's type in a lower module's
    hint), but two modules naming each other's types are one responsibility split wrongly: no new cycle.
    One knot is known and left: the spec's helpers (space, names, export rule, workload block) hint the
    ``StudySpec`` that validates through them; all five modules are the spec's one job."""
    known = [
        ["tuner.spec.export_rule", "tuner.spec.models", "tuner.spec.names", "tuner.spec.space", "tuner.spec.workload"]
    ]
    assert import_cycles(import_edges(project_sources(), type_only=True)) == known


@pytest.mark.parametrize("where", ["top", "deferred"])
def test_a_reverse_import_is_caught(where: str) -> None:
    """Adding one import against the direction (spec -> study, which imports spec) fails both checks."""
    sources = project_sources()
    text, is_init = sources["tuner.spec.models"]
    reverse = (
        "from tuner.study.studies import OpenStudy\n"
        if where == "top"
        else "def _reverse() -> None:\n    from tuner.study.studies import OpenStudy  # noqa: F401\n"
    )
    sources["tuner.spec.models"] = (text + "\n" + reverse, is_init)
    edges = import_edges(sources)
    assert any("tuner.spec.models" in v and "tuner.study.studies" in v for v in direction_violations(edges))
    assert any({"tuner.spec.models", "tuner.study.studies"} <= set(c) for c in import_cycles(edges))


def test_type_checking_imports_are_not_edges() -> None:
    sources = project_sources()
    text, is_init = sources["tuner.spec.models"]
    sources["tuner.spec.models"] = (
        text + "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tuner.study.studies import OpenStudy\n",
        is_init,
    )
    assert direction_violations(import_edges(sources)) == []


def test_layout_tells_the_story() -> None:
    """At most 9 modules directly in tuner/ (the facade, the entry point and the foundation, the
    exception tree included); every package's __init__ says what lives there."""
    top = sorted(p.name for p in (ROOT / "tuner").glob("*.py"))
    assert len(top) <= 9, top
    for init in sorted((ROOT / "tuner").rglob("__init__.py")):
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and len(docstring) > 40, f"{init.relative_to(ROOT)} needs a docstring"


MAX_PACKAGE_MODULES = 15  # modules besides __init__.py, directly in one package
MAX_PACKAGE_LINES = 3000  # lines of those modules together


def test_no_package_is_a_crowded_room() -> None:
    """One job per package: none holds more than 15 modules or 3,000 lines (a subpackage counts apart)."""
    crowded = []
    for init in sorted((ROOT / "tuner").rglob("__init__.py")):
        modules = [p for p in init.parent.glob("*.py") if p.name != "__init__.py"]
        lines = sum(len(p.read_text().splitlines()) for p in modules)
        if len(modules) > MAX_PACKAGE_MODULES or lines > MAX_PACKAGE_LINES:
            crowded.append(f"{init.parent.relative_to(ROOT)}: {len(modules)} modules, {lines} lines")
    assert crowded == []
