"""Reading spec YAML within limits: one compose, checked, then construct.

PyYAML trusts its input: a 5 MB text takes seconds, a 5000-deep ``[[[[...``
overflows the recursive composer, an alias "billion laughs" (each anchor
referencing the previous one ten times) expands exponentially for anything
that walks the result, and a repeated mapping key silently keeps the last
value. :func:`load_yaml` guards against each, as a class:

- the text is at most :data:`MAX_SPEC_BYTES` (1 MiB, UTF-8), checked before parsing;
- collections nest at most :data:`MAX_DEPTH` (64) levels, counted while composing;
- the document, with every alias expanded, holds at most :data:`MAX_NODES`
  (100,000) nodes. The expanded size of each node is memoised by identity while
  composing (linear time), so the count is exact and a bomb is refused at the
  alias that crosses the limit; an alias inside its own anchor is refused too;
- a mapping repeats no key (merge keys ``<<: *anchor`` still merge and may be
  overridden, as YAML says).

The data is then constructed once from the checked node tree (PyYAML memoises
aliased nodes, so shared values stay shared). Every problem is a
:class:`YamlProblem` carrying the 1-based line, the key path and the problem;
:mod:`tuner.spec.loading` formats it as ``file:line: key.path: problem``.
RecursionError and MemoryError are caught as a last resort.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent

from tuner.errors import InputError

MAX_SPEC_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_NODES = 100_000
_MERGE_TAG = "tag:yaml.org,2002:merge"

KeyPath = tuple[str, ...]


class YamlProblem(InputError):
    """A located problem in spec YAML: ``line`` (1-based), key ``path`` and ``problem`` (one line)."""

    def __init__(self, line: int, path: KeyPath, problem: str) -> None:
        super().__init__(f"{line}: {'.'.join(path) or '(top level)'}: {problem}")
        self.line, self.path, self.problem = line, path, " ".join(problem.split())


class _GuardedLoader(yaml.SafeLoader):
    """A SafeLoader whose composer counts depth and expanded nodes and refuses repeated keys."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0
        self.expanded = 0
        self.sizes: dict[int, int] = {}  # id(node) -> nodes in its full expansion
        self.path: list[str] = []
        self.node_paths: dict[int, KeyPath] = {}  # filled by key_lines, read by construct_object

    def refuse(self, mark: Any, problem: str, path: KeyPath | None = None) -> YamlProblem:
        line = mark.line + 1 if mark is not None else 1
        return YamlProblem(line, tuple(self.path) if path is None else path, problem)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        segment = _segment(index)
        if segment is not None:
            self.path.append(segment)
        try:
            return self._compose(parent, index)
        finally:
            if segment is not None:
                self.path.pop()

    def _compose(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            size = self.sizes.get(id(node))
            if size is None:
                raise self.refuse(
                    event.start_mark,
                    f"alias *{event.anchor} is used inside its own anchor (a recursive structure cannot be a spec)",
                )
            self.count(size, event.start_mark, f"alias *{event.anchor} expands the spec")
            return node
        collection = self.check_event(MappingStartEvent, SequenceStartEvent)
        if collection:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.refuse(
                    self.peek_event().start_mark,
                    f"collections nested deeper than {MAX_DEPTH} levels (limit {MAX_DEPTH})",
                )
        try:
            node = super().compose_node(parent, index)
        finally:
            if collection:
                self.depth -= 1
        if node is None:  # no node event: PyYAML's parser never lets this happen
            return None
        if isinstance(node, yaml.MappingNode):
            self.check_keys(node)
            children = [n for pair in node.value for n in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        self.sizes[id(node)] = 1 + sum(self.sizes[id(child)] for child in children)
        self.count(1, node.start_mark, "the spec grows")
        return node

    def count(self, nodes: int, mark: Any, what: str) -> None:
        self.expanded += nodes
        if self.expanded > MAX_NODES:
            raise self.refuse(
                mark,
                f"{what} to more than {MAX_NODES:,} YAML nodes, counting every alias expanded (limit {MAX_NODES:,})",
            )

    def check_keys(self, node: yaml.MappingNode) -> None:
        """Refuse a key given twice in one mapping (merged ``<<`` keys may be overridden)."""
        first: dict[tuple[str, str], yaml.Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            earlier = first.get((key_node.tag, key_node.value))
            if earlier is not None:
                raise self.refuse(
                    key_node.start_mark,
                    f"duplicate key '{key_node.value}' (first at line {earlier.start_mark.line + 1})",
                    (*self.path, str(key_node.value)),
                )
            first[(key_node.tag, key_node.value)] = key_node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, TypeError) as error:  # int('9' * 5000), a bad date
            if isinstance(error, YamlProblem):
                raise
            path = self.node_paths.get(id(node), ())
            raise self.refuse(node.start_mark, f"cannot read this value: {error}", path) from None


def _segment(index: Any) -> str | None:
    """The key-path part a child adds: a mapping value's key, a sequence item's index."""
    if isinstance(index, yaml.Node):
        return str(index.value) if isinstance(index, yaml.ScalarNode) else "?"
    if isinstance(index, int) and not isinstance(index, bool):
        return str(index)
    return None


def check_size(text: str) -> None:
    """Refuse a text over :data:`MAX_SPEC_BYTES` before anything parses it."""
    size = len(text.encode("utf-8", "replace"))
    if size > MAX_SPEC_BYTES:
        raise YamlProblem(
            1,
            (),
            f"the spec is {size:,} bytes (limit {MAX_SPEC_BYTES:,} bytes = 1 MiB); "
            "keep large data in files the workload reads",
        )


def _new_loader(text: str) -> _GuardedLoader:
    """A loader over ``text``; the reader checks the characters at once (a control character is a
    :class:`YamlProblem` with its line, like any other YAML error)."""
    try:
        return _GuardedLoader(text)
    except yaml.YAMLError as error:
        raise _located(error) from None


def load_yaml(text: str) -> tuple[Any, dict[KeyPath, int]]:
    """``(data, key lines)`` of one YAML document, read within the limits; raises :class:`YamlProblem`."""
    check_size(text)
    loader = _new_loader(text)
    try:
        node = loader.get_single_node()
        lines = key_lines(node, loader.node_paths)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as error:
        raise _located(error) from None
    except (RecursionError, MemoryError) as error:
        raise YamlProblem(
            1, (), f"the spec is too deeply nested or too large to read ({type(error).__name__})"
        ) from None
    finally:
        loader.dispose()
    return data, lines


def yaml_key_lines(text: str) -> dict[KeyPath, int]:
    """Key path -> 1-based line of ``text``, composed within the limits; raises :class:`YamlProblem`."""
    check_size(text)
    loader = _new_loader(text)
    try:
        return key_lines(loader.get_single_node())
    except yaml.YAMLError as error:
        raise _located(error) from None
    except (RecursionError, MemoryError) as error:
        raise YamlProblem(1, (), f"the spec is too deeply nested to read ({type(error).__name__})") from None
    finally:
        loader.dispose()


def _located(error: yaml.YAMLError) -> YamlProblem:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    return YamlProblem(mark.line + 1 if mark is not None else 1, (), f"not valid YAML: {problem}")


def key_lines(node: yaml.Node | None, node_paths: dict[int, KeyPath] | None = None) -> dict[KeyPath, int]:
    """Map each key path of a composed document to its 1-based line.

    Each collection is entered once (memoised by identity): a path through an
    alias maps to the alias's own line, never to an expansion. ``node_paths``,
    when given, receives each node's first path (for construction errors).
    """
    lines: dict[KeyPath, int] = {}
    paths = {} if node_paths is None else node_paths
    stack: list[tuple[yaml.Node, KeyPath]] = [] if node is None else [(node, ())]
    while stack:  # iterative: depth is bounded anyway, but the walk must not be the thing that fails
        current, path = stack.pop()
        lines.setdefault(path, current.start_mark.line + 1)
        if id(current) in paths:
            continue
        paths[id(current)] = path
        if isinstance(current, yaml.MappingNode):
            for key_node, value_node in current.value:
                child = (*path, str(key_node.value))
                lines[child] = key_node.start_mark.line + 1
                stack.append((value_node, child))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((item, (*path, str(i))) for i, item in enumerate(current.value))
    return lines
