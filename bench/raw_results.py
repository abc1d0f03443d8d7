"""Raw results of one benchmark run, kept so that docs/benchmarks.md's figures can be reprinted from them.

A bench measures, then :func:`save` writes what it measured with the command that produced it, the
date and the host's state (cores, load average at the start and at the end: a shared machine's load
is part of the figure). Its ``--report`` reads the file back with :func:`load` and prints the same
lines it printed when it measured (each bench prints through one function for both), measuring
nothing; ``bench/report.py --check`` compares those lines with the docs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


class Run:
    """The host's state when a measurement starts; :meth:`save` adds the end's."""

    def __init__(self, script: str, argv: list[str] | None = None) -> None:
        self.command = " ".join(["python", f"bench/{script}", *(sys.argv[1:] if argv is None else argv)])
        self.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.load_at_start = [round(value, 2) for value in os.getloadavg()]

    def save(self, path: Path, figures: dict[str, Any]) -> dict[str, Any]:
        """Write ``figures`` with the command, date and load to ``path`` (JSON); returns what was written."""
        result = {
            "command": self.command,
            "measured_at": self.started,
            "cores": os.cpu_count(),
            "load_average_start": self.load_at_start,
            "load_average_end": [round(value, 2) for value in os.getloadavg()],
            **figures,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        return result


def load(path: Path) -> dict[str, Any]:
    """The raw results at ``path``; SystemExit naming the file and the command to make it when it is missing."""
    if not path.is_file():
        raise SystemExit(f"{path}: no raw results; run the bench without --report to measure them")
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def provenance(result: dict[str, Any]) -> str:
    """One line: the command, the date and the machine's load (1-minute average, start -> end)."""
    start, end = result["load_average_start"][0], result["load_average_end"][0]
    return (
        f"`{result['command']}` — measured {result['measured_at']} on {result['cores']} cores, "
        f"load average {start:.2f} -> {end:.2f}"
    )


def main(
    parser: argparse.ArgumentParser,
    script: str,
    measure: Callable[[argparse.Namespace], dict[str, Any]],
    report_lines: Callable[[dict[str, Any]], list[str]],
) -> None:
    """A bench's command line: its own options in ``parser``, plus ``--results`` (the raw figures' file,
    default ``bench/results/<script>.json``) and ``--report`` (print :func:`report_lines` of that file and
    measure nothing). Without ``--report``: measure, save, and print the same lines from what was saved."""
    default = RESULTS / (Path(script).stem + ".json")
    parser.add_argument(
        "--results", type=Path, default=default, help=f"where the raw figures go (default bench/results/{default.name})"
    )
    parser.add_argument("--report", action="store_true", help="print the table from --results, measure nothing")
    args = parser.parse_args()
    if args.report:
        print("\n".join(report_lines(load(args.results))))
        return
    run = Run(script)
    print("\n".join(report_lines(run.save(args.results, measure(args)))))
