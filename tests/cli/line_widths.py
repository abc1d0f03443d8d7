"""What "fits 80 columns" means for the CLI's views, shared by the tests that check it.

A line may pass the width only when it is one path kept whole so it can be copied (CI's clones live deep):
the path alone, or the path under a log tail's continuation marker (``:`` or ``|``), quotes and a trailing
comma from a traceback allowed around it.
"""

from __future__ import annotations

from collections.abc import Iterable

LOG_MARKERS = {":", "|"}


def is_lone_path(line: str) -> bool:
    """True when ``line``'s words, a leading log-tail marker aside, are a single word holding a ``/``."""
    words = line.split()
    if words and words[0] in LOG_MARKERS:
        words = words[1:]
    return len(words) == 1 and "/" in words[0]


def too_wide(lines: Iterable[str], width: int = 80) -> list[str]:
    """The lines wider than ``width`` that are not a lone path (empty when the view fits)."""
    return [line for line in lines if len(line) > width and not is_lone_path(line)]
