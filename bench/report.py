"""Every generated block of the docs (:data:`DOCS`), recomputed from the committed raw results.

Usage::

    python bench/report.py --check     # exit 1 and print a diff per section whose block differs
    python bench/report.py --write     # rewrite every block with what its command prints now
    python bench/report.py --check --doc docs/models.md    # one document

A block is the text between a marker naming the command that prints it from committed results
(it measures nothing) and the closing marker::

    <!-- report: python bench/fleet.py --report -->
    ...exactly what that command prints...
    <!-- /report -->

The block may sit in a fenced code block (the fence lines are kept, the text inside is compared).
Commands run from the project root with this interpreter (``python`` in a marker means it), each
within :data:`TIMEOUT_S`, and without git (``GIT_DIR`` names no repository): a block prints committed
files only, so a ``git clone --depth 1`` or an unpacked tarball reprints every block. A figure edited
by hand inside a block, or a raw result changed without its block, fails ``--check`` naming the
section (the ``#`` heading above the block; a ``#`` line inside a fenced code block is no heading).
The figures a document states outside its blocks are ``bench/doc_figures.py``'s.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
# Every document whose figures are checked: the README and the docs, model cards included.
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "models").glob("*.md")))
NO_GIT = {"GIT_DIR": str(ROOT / "bench" / "no-git-here")}  # a directory that does not exist: every git command fails
TIMEOUT_S = 60
OPEN = re.compile(r"^<!-- report: (?P<command>.+?) -->$")
CLOSE = "<!-- /report -->"
FENCE = "```"


@dataclass(frozen=True)
class Block:
    """One generated block: its command, the section it sits in, and its lines (fences excluded)."""

    command: str
    section: str
    start: int  # index of the first line after the opening marker
    end: int  # index of the closing marker
    body: tuple[str, ...]
    fenced: bool


def blocks(lines: Sequence[str]) -> list[Block]:
    """The blocks of a document's lines; ValueError on a marker left open or a close without an open."""
    found: list[Block] = []
    section, index, fenced_code = "(top)", 0, False
    while index < len(lines):
        line = lines[index]
        if line.lstrip().startswith(FENCE):
            fenced_code = not fenced_code
        if fenced_code or line.lstrip().startswith(FENCE):
            index += 1
            continue
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if line.strip() == CLOSE:
            raise ValueError(f"line {index + 1}: {CLOSE} without an opening marker")
        opened = OPEN.match(line.strip())
        if opened is None:
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines)) if lines[i].strip() == CLOSE), None)
        if end is None:
            raise ValueError(f"line {index + 1}: report block for {opened['command']!r} is not closed")
        body = list(lines[index + 1 : end])
        fenced = len(body) >= 2 and body[0].startswith(FENCE) and body[-1].strip() == FENCE
        found.append(Block(opened["command"], section, index + 1, end, tuple(body[1:-1] if fenced else body), fenced))
        index = end + 1
    return found


def run(command: str) -> list[str]:
    """What ``command`` prints (stdout lines, trailing blank lines dropped); RuntimeError when it fails."""
    argv = shlex.split(command)
    if not argv or argv[0] != "python":
        raise RuntimeError(f"{command!r}: a report command starts with python")
    done = subprocess.run(
        [sys.executable, *argv[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, **NO_GIT},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command!r} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    out = done.stdout.splitlines()
    while out and not out[-1].strip():
        out.pop()
    return out


def check(doc: Path = DOC) -> list[str]:
    """One message per block whose text is not what its command prints now (empty: every block matches)."""
    lines = doc.read_text().splitlines()
    problems = []
    for block in blocks(lines):
        try:
            printed = run(block.command)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            problems.append(f"section {block.section!r}: {error}")
            continue
        if list(block.body) != printed:
            diff = difflib.unified_diff(
                list(block.body), printed, f"{doc.name} (section {block.section})", block.command, lineterm="", n=0
            )
            problems.append(f"section {block.section!r}: the block differs from `{block.command}`:\n" + "\n".join(diff))
    return problems


def write(doc: Path = DOC) -> int:
    """Rewrite every block with what its command prints; the number of blocks changed."""
    lines = doc.read_text().splitlines()
    changed = 0
    for block in reversed(blocks(lines)):  # from the end: earlier indices stay valid
        printed = run(block.command)
        if list(block.body) != printed:
            changed += 1
            lines[block.start : block.end] = [FENCE, *printed, FENCE] if block.fenced else printed
    doc.write_text("\n".join(lines) + "\n")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="print a diff per differing block; exit 1 if any")
    mode.add_argument("--write", action="store_true", help="rewrite every block from its command")
    parser.add_argument("--doc", type=Path, action="append", help="a document (repeatable; default: every one of DOCS)")
    args = parser.parse_args(argv)
    docs = args.doc or [doc for doc in DOCS if blocks(doc.read_text().splitlines())]
    if args.write:
        for doc in docs:
            print(f"{write(doc)} block(s) rewritten in {doc}")
        return 0
    failed = 0
    for doc in docs:
        problems = check(doc)
        for problem in problems:
            print(f"{doc.name}: {problem}")
        count = len(blocks(doc.read_text().splitlines()))
        print(
            f"{doc.name}: {count - len(problems)} of {count} block(s) match their commands"
            if problems
            else f"{doc.name}: all {count} block(s) match their commands"
        )
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
