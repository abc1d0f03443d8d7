"""The memory sampler's own cost per running trial: % of a core, old design vs new (issue 27).

A trial that sleeps (holding its slot the way a GPU trial does) with 0, 1 and 3 sleeping child
processes; around it a :class:`tuner.evaluators.process_tree.ProcessTreeSampler` on this process
at ``--hz`` (100, the default ``measurement.memory_sample_hz``), NVML wanted as in the worker.
The figure is this process's CPU time (``time.process_time``: the sampler thread, its start and
stop; the main thread sleeps, the children's CPU is theirs) divided by the wall time of the
window, minus the same ratio measured with no sampler. Median of ``--repeats`` windows.

* ``new``: the sampler in this checkout (kernel high-water marks, ``/proc`` births, adaptive rate).
* ``old``: the sampler as of commit ``OLD_COMMIT`` (psutil walk of the tree every 0.1 s, psutil
  RSS of every member at ``--hz``), loaded from git; skipped with a note where git cannot show it.

The sampler alone is measured, not :class:`tuner.evaluators.memory.PeakMemoryMonitor` (whose
entry also trims the heap and resets the high-water mark, once per window, the same in both).

Usage: ``python bench/memory_sampler.py [--window-s 3] [--repeats 3] [--hz 100] [--children 0,1,3]``.
Ends with one line: the new design's % of a core per running trial (target <= 2 %). ``--report`` prints the
same table and line from the committed raw results (docs/benchmarks.md quotes them) and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.evaluators import process_tree as new_design  # noqa: E402

OLD_COMMIT = "e461a52a40d11a6a7dcbf22adea80b7aa2648df0"
"""The last commit with the 100 Hz psutil sampler (issue 27 replaced it)."""
TARGET_PERCENT = 2.0


def _old_design() -> types.ModuleType | None:
    """The sampler module as of ``OLD_COMMIT``; None (with a note) where git cannot show it."""
    shown = subprocess.run(
        ["git", "show", f"{OLD_COMMIT}:tuner/evaluators/process_tree.py"], cwd=ROOT, capture_output=True, text=True
    )
    if shown.returncode != 0:
        print(f"old design not measured: git show {OLD_COMMIT[:8]} failed: {shown.stderr.strip()}")
        return None
    module = types.ModuleType("old_process_tree")
    exec(compile(shown.stdout, f"{OLD_COMMIT[:8]}:process_tree.py", "exec"), module.__dict__)
    return module


def _window(design: types.ModuleType | None, hz: float, window_s: float) -> tuple[float, int, float]:
    """(% of a core, samples, samples per second) of one window; ``design`` None: no sampler."""
    cpu, wall = time.process_time(), time.perf_counter()
    sampler: Any = design.ProcessTreeSampler(os.getpid(), hz) if design is not None else None
    if sampler is not None:
        sampler.start()
    time.sleep(window_s)
    if sampler is not None:
        sampler.stop()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    samples = sampler.samples if sampler is not None else 0
    return 100.0 * cpu / wall, samples, samples / wall


def _measure(design: types.ModuleType, children: int, args: argparse.Namespace) -> dict[str, float]:
    """Median cost over ``args.repeats`` windows with ``children`` sleeping children, net of the idle cost."""
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]) for _ in range(children)]
    try:
        time.sleep(0.5)  # the children's start-up is not the sampler's
        idle = statistics.median(_window(None, args.hz, args.window_s)[0] for _ in range(args.repeats))
        runs = [_window(design, args.hz, args.window_s) for _ in range(args.repeats)]
    finally:
        for kid in kids:
            kid.kill()
            kid.wait()
    return {
        "percent": max(0.0, statistics.median(r[0] for r in runs) - idle),
        "samples": statistics.median(r[1] for r in runs),
        "hz": statistics.median(r[2] for r in runs),
    }


def _header(hz: float, window_s: float, repeats: int, cores: int | None, load: float) -> list[str]:
    return [
        f"sampler at {hz:g} Hz, {window_s:g} s windows, median of {repeats}; "
        f"{cores} cores, load average {load:.1f} at the start (shared machine)",
        f"{'design':<6} {'children':>8} {'% core':>7} {'samples':>8} {'samples/s':>10}",
    ]


def _row(row: dict[str, Any]) -> str:
    return f"{row['design']:<6} {row['children']:>8} {row['percent']:>7.2f} {row['samples']:>8.0f} {row['hz']:>10.1f}"


def _closing(new_costs: dict[int, float]) -> str:
    worst = max(new_costs, key=lambda n: new_costs[n])
    return (
        f"new design: {new_costs.get(0, float('nan')):.2f} % of a core per running trial with no child "
        f"process, {new_costs[worst]:.2f} % at most ({worst} child{'' if worst == 1 else 'ren'}); "
        f"target <= {TARGET_PERCENT:g} %"
    )


def report(path: Path) -> str:
    """What the bench printed, from its raw results (docs/benchmarks.md quotes it); measures nothing."""
    result = json.loads(path.read_text())
    lines = [
        f"{result['command'].strip()} ({result['measured_at']})",
        *_header(
            result["sample_hz"], result["window_s"], result["repeats"], result["cores"], result["load_average_start"]
        ),
    ]
    lines += [_row(row) for row in result["rows"]]
    lines.append(_closing({row["children"]: row["percent"] for row in result["rows"] if row["design"] == "new"}))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table and the closing line; exit 0 (the figure is reported, not judged)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-s", type=float, default=3.0, help="seconds per trial window (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="windows per cell; the median is kept (default 3)")
    parser.add_argument("--hz", type=float, default=100.0, help="sample_hz (default 100, the spec default)")
    parser.add_argument("--children", default="0,1,3", help="sleeping child processes per cell (default 0,1,3)")
    parser.add_argument(
        "--results",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "memory_sampler.json",
        help="where the raw figures are written (default bench/results/memory_sampler.json)",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="print the table and closing line from --results (committed raw results), run nothing",
    )
    args = parser.parse_args(argv)
    if args.report:
        print(report(args.results))
        return 0
    rows: list[dict[str, object]] = []
    counts = [int(n) for n in args.children.split(",")]
    designs = {"old": _old_design(), "new": new_design}
    load = os.getloadavg()[0]
    print("\n".join(_header(args.hz, args.window_s, args.repeats, os.cpu_count(), load)))
    new_costs: dict[int, float] = {}
    for name, design in designs.items():
        if design is None:
            continue
        for children in counts:
            row = _measure(design, children, args)
            rows.append({"design": name, "children": children, **row})
            print(_row(rows[-1]))  # type: ignore[arg-type]
            if name == "new":
                new_costs[children] = row["percent"]
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(
        json.dumps(
            {
                "command": "python bench/memory_sampler.py " + " ".join(argv or sys.argv[1:]),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "cores": os.cpu_count(),
                "load_average_start": round(load, 2),
                "sample_hz": args.hz,
                "window_s": args.window_s,
                "repeats": args.repeats,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(_closing(new_costs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
