"""One storage gateway names Optuna's attributes (issue 25); one module uses Optuna's private API (issue 36).

Attributes. Trial and study attributes are read and written through :mod:`tuner.storage.attributes`
(every name, the readers of a stored trial), :mod:`tuner.storage.records` (typed records)
and :mod:`tuner.storage.store` / :mod:`tuner.storage.store_rows` (typed writes). No other module of
``tuner/`` has ``user_attr`` / ``system_attr`` anywhere on a line (``user_attrs``, ``set_user_attr``,
``system_attrs``, ``set_trial_user_attr``, ``get_study_system_attrs`` ..., comments and
docstrings included: ``grep -rn "user_attrs\\|set_user_attr\\|system_attrs" tuner/`` finds the gateway only).

Private API. Every use of Optuna's private API is in :mod:`tuner.storage.optuna_private` (:data:`PRIVATE_API`),
whose docstring lists each name. The names are not listed here: :func:`optuna_private_names` collects them from
the installed Optuna's own source (every single-underscore name one of its classes defines: a method, a class
attribute, an attribute set on ``self``). Every other module of ``tuner/`` is parsed and must not contain:

* an import of an Optuna module with a private part (``optuna.storages._rdb``) or of a private name from one
  (``from optuna.storages import _CachedStorage``), or an attribute chain with a private part from a name an
  Optuna import bound (``optuna.samplers._tpe``);
* a string naming a private Optuna module (``"optuna.storages._rdb.storage"``) or that is one of Optuna's
  private names (``getattr(x, "_backend")``);
* ``x._name`` or ``super()._name``, ``_name`` one of Optuna's private names (``study._storage``);
* ``self._name`` / ``cls._name`` likewise, unless the class (or a base class of the same module) sets or defines
  ``_name`` itself and its Optuna base classes, if any, do not (a base naming something an Optuna import bound is an
  Optuna class: it is resolved and its source read; one that is not a plain dotted name counts as defining all);
* ``def _name`` in a class with a base, ``_name`` a private method of Optuna's (an override).

So a tuner class keeps its own ``self._lock``; a subclass of an Optuna sampler reading ``self._rng`` is found.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]

GATEWAY = frozenset(
    {
        "tuner/storage/attributes.py",
        "tuner/storage/records.py",
        "tuner/storage/store.py",
        "tuner/storage/store_rows.py",
        "tuner/storage/study_writes.py",
    }
)
PRIVATE_API = "tuner/storage/optuna_private.py"
WRAPS_OPTUNA_METHODS = frozenset(
    {
        "tuner/storage/tolerant_storage.py",  # subclasses Optuna's RDBStorage: wraps its methods (attribute ones too) by name
    }
)

ATTRIBUTE_WORDS = re.compile(r"user_attr|system_attr")
PRIVATE_MODULE_PATH = re.compile(r"\boptuna(?:\.\w+)*?\._(?!_)\w*(?:\.\w+)*")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@dataclass(frozen=True)
class OptunaPrivates:
    """Optuna's private names: ``every`` (methods, class attributes, attributes set on ``self``) and ``methods``."""

    every: frozenset[str]
    methods: frozenset[str]


@functools.cache
def optuna_private_names() -> OptunaPrivates:
    """The single-underscore names the classes of the installed Optuna define, read from its source."""
    every: set[str] = set()
    methods: set[str] = set()
    for path in Path(optuna.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for statement in node.body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(statement.name):
                    methods.add(statement.name)
            every.update(_defined_by(node))
    return OptunaPrivates(frozenset(every | methods), frozenset(methods))


def _defined_by(cls: ast.ClassDef) -> set[str]:
    """The private names class ``cls`` defines: methods, class-level assignments, ``self.x`` / ``cls.x`` stores."""
    names = {s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for statement in cls.body:
        targets = (
            statement.targets
            if isinstance(statement, ast.Assign)
            else [statement.target]
            if isinstance(statement, (ast.AnnAssign, ast.AugAssign))
            else []
        )
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    return {name for name in names if _private(name)}


def _optuna_imports(tree: ast.AST) -> dict[str, str]:
    """Name -> the dotted Optuna path an import in ``tree`` binds it to (``optuna``, ``optuna.samplers.X`` ...)."""
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(
                (a.asname, a.name) if a.asname else (a.name.split(".")[0], a.name.split(".")[0])
                for a in node.names
                if a.name.split(".")[0] == "optuna"
            )
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            imported.update((a.asname or a.name, f"{node.module}.{a.name}") for a in node.names)
    return imported


def _optuna_bound(tree: ast.AST) -> set[str]:
    """Names an Optuna import binds in ``tree``, and names assigned from an expression that mentions one."""
    bound = set(_optuna_imports(tree))
    for _ in range(2):  # an alias of an alias
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _mentions(node.value, bound):
                bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return bound


def _mentions(expression: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expression))


def _optuna_class(expression: ast.expr, imported: dict[str, str]) -> type | None:
    """The Optuna class a base-class expression names (``optuna.samplers.BaseSampler``); None when not plain."""
    chain: list[str] = []
    while isinstance(expression, ast.Attribute):
        chain.insert(0, expression.attr)
        expression = expression.value
    if not isinstance(expression, ast.Name) or expression.id not in imported:
        return None
    parts = imported[expression.id].split(".") + chain
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name, None)
        return found if isinstance(found, type) else None
    return None


@functools.cache
def _privates_of(cls: type) -> frozenset[str]:
    """The private names ``cls`` and the Optuna classes it derives from define (read from their source)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == "optuna":
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
            names.update(*(_defined_by(n) for n in tree.body if isinstance(n, ast.ClassDef)))
    return frozenset(names)


class _Scan(ast.NodeVisitor):
    """Uses of Optuna's private API in one module (see the module docstring); ``found``: line -> what."""

    def __init__(self, tree: ast.Module) -> None:
        self.privates = optuna_private_names()
        self.imported = _optuna_imports(tree)
        self.bound = _optuna_bound(tree)
        self.classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        self.stack: list[tuple[set[str], frozenset[str] | None]] = []  # own names; its Optuna bases' (None: unknown)
        self.found: list[tuple[int, str]] = []

    def _own(self, cls: ast.ClassDef, seen: frozenset[str] = frozenset()) -> set[str]:
        own = _defined_by(cls)
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in self.classes and base.id not in seen:
                own |= self._own(self.classes[base.id], seen | {cls.name})
        return own

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [base for base in node.bases if _mentions(base, self.bound)]  # Optuna classes
        classes = [_optuna_class(base, self.imported) for base in bases]
        optuna_privates = (
            None if None in classes else frozenset().union(*(_privates_of(c) for c in classes if c is not None))
        )
        inherited = set().union(
            *(self._own(self.classes[b.id]) for b in node.bases if isinstance(b, ast.Name) and b.id in self.classes)
        )
        for statement in node.body:
            if (
                isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.bases
                and statement.name in self.privates.methods
                and statement.name not in inherited
            ):
                self.found.append((statement.lineno, f"overrides Optuna's private {statement.name}"))
        self.stack.append((self._own(node), optuna_privates))
        self.generic_visit(node)
        self.stack.pop()

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(node.lineno, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._module(node.lineno, module)
        if module.split(".")[0] == "optuna":
            for alias in node.names:
                if _private(alias.name):
                    self.found.append((node.lineno, f"imports Optuna's private {module}.{alias.name}"))

    def _module(self, line: int, module: str) -> None:
        parts = module.split(".")
        if parts[0] == "optuna" and any(_private(part) for part in parts[1:]):
            self.found.append((line, f"imports Optuna's private module {module}"))

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            if node.value in self.privates.every:
                self.found.append((node.lineno, f"names Optuna's private {node.value} in a string"))
            elif match := PRIVATE_MODULE_PATH.search(node.value):
                self.found.append((node.lineno, f"names Optuna's private module {match.group(0)} in a string"))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain, root = [node.attr], node.value
        while isinstance(root, ast.Attribute):
            chain.append(root.attr)
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.bound and any(_private(part) for part in chain):
            self.found.append((node.lineno, f"reaches Optuna's private {'.'.join([root.id, *reversed(chain)])}"))
        elif node.attr in self.privates.every and not self._own_attribute(node.value, node.attr):
            self.found.append((node.lineno, f"reads Optuna's private {ast.unparse(node.value)}.{node.attr}"))
        self.generic_visit(node)

    def _own_attribute(self, receiver: ast.expr, name: str) -> bool:
        """Whether ``receiver.name`` is a tuner class's own attribute (``self._lock`` it sets itself), which its
        Optuna base classes (if any; each a plain name of one) do not define."""
        if not (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls") and self.stack):
            return False
        own, optuna_privates = self.stack[-1]
        return name in own and optuna_privates is not None and name not in optuna_privates


def violations(path: Path, root: Path = ROOT) -> list[str]:
    """Where ``path`` names Optuna's attributes (outside :data:`GATEWAY`) or uses its private API (outside
    :data:`PRIVATE_API`), as ``file:line: what``, in line order."""
    text = path.read_text()
    where = path.relative_to(root).as_posix()
    found: list[tuple[int, str]] = []
    if where not in GATEWAY | WRAPS_OPTUNA_METHODS:
        found += [
            (number, line.strip()[:100])
            for number, line in enumerate(text.splitlines(), 1)
            if ATTRIBUTE_WORDS.search(line)
        ]
    if where != PRIVATE_API:
        scan = _Scan(ast.parse(text))
        scan.visit(ast.parse(text))
        found += scan.found
    return [f"{where}:{line}: {what}" for line, what in sorted(set(found))]


def _modules() -> list[Path]:
    return sorted((ROOT / "tuner").rglob("*.py"))


def test_only_the_gateway_names_attributes_and_only_one_module_uses_optuna_private_api() -> None:
    found = [line for path in _modules() for line in violations(path)]
    assert not found, (
        "read and write attributes through tuner.storage.attributes / records / store; use Optuna's "
        f"private API only in {PRIVATE_API} (a function there, the name in its docstring):\n" + "\n".join(found)
    )


def test_the_gateway_exists_and_is_what_it_says() -> None:
    """The scan is not vacuous: the gateway names attributes, the private-API module names what others may not."""
    for relative in GATEWAY | {PRIVATE_API}:
        path = ROOT / relative
        assert path.is_file(), relative
        assert len(path.read_text().splitlines()) < 400, f"{relative}: split it (house style: < ~400 lines)"
    assert any(ATTRIBUTE_WORDS.search(line) for line in (ROOT / "tuner/storage/store.py").read_text().splitlines())
    assert {"_storage", "_sample", "_rng", "_backend", "_get_unvisited_grid_ids"} <= optuna_private_names().every


def test_the_private_api_module_lists_each_private_name_it_uses() -> None:
    """Its docstring names every private name the scan finds in it (and the Optuna it was checked against)."""
    path = ROOT / PRIVATE_API
    tree = ast.parse(path.read_text())
    scan = _Scan(tree)
    scan.visit(tree)
    assert len(scan.found) >= 10, scan.found
    docstring = ast.get_docstring(tree) or ""
    used = {
        part
        for _, what in scan.found
        for part in re.findall(r"private (?:module )?(\S+)", what)[0].split(".")
        if _private(part)
    }
    unlisted = sorted(name for name in used if not re.search(rf"(?<!\w){re.escape(name)}(?!\w)", docstring))
    assert not unlisted, f"{PRIVATE_API}: list these private names in the docstring, with why: {unlisted}"
    assert "Checked against Optuna" in docstring


FORMS = """\
import optuna.storages._rdb.models
from optuna.storages import _CachedStorage
x = trial.user_attrs
storage.set_trial_system_attr(1, "k", 2)
y = getattr(study, "_backend", None)
z = study._study_id
w = trial._cached_frozen_trial
JOIN_MODULES = ("optuna.samplers", "optuna.storages._rdb.storage")
def _sampler_class():
    base = optuna.samplers.TPESampler
    for hook in ("_sample", "_compute_acquisition_func"):
        pass
    class CostAwareTPESampler(base):
        def __init__(self):
            self._cost_model = None
        def _sample(self, study, trial, search_space):
            return super()._sample(study, trial, search_space)
        def sample_independent(self, study, trial, name, distribution):
            return self._cost_model, self._n_startup_trials, self._rng.rng
class Own:
    def __init__(self):
        self._lock = None
    def take(self):
        return self._lock
class Grid(optuna.samplers.GridSampler):
    def after_trial(self, study, trial, state, values):
        self.exhausted = len(self._get_unvisited_grid_ids(study)) == 0
class Table(optuna.samplers.BaseSampler):
    def __init__(self):
        self._distributions = {}
class Reseeded(optuna.samplers.TPESampler):
    def __init__(self):
        self._rng = None
"""


def test_the_scan_catches_each_form(tmp_path: Path) -> None:
    """Today's forms and those of the code before issue 36 (cost_aware's TPE override, the worker's module name,
    the grid sampler's private call); a tuner class's own ``self._lock``, and a sampler's own ``self._distributions``
    that its Optuna base does not define, are no finding."""
    sample = tmp_path / "tuner" / "sample.py"
    sample.parent.mkdir()
    sample.write_text("import optuna\n" + FORMS)
    lines = sorted({int(line.split(":")[1]) for line in violations(sample, tmp_path)})
    assert lines == [2, 3, 4, 5, 6, 7, 8, 9, 12, 17, 18, 20, 28, 34], violations(sample, tmp_path)
