"""Is screening on a cheap proxy safe? Rank agreement and a screening replay on measured tables.

Usage: ``python bench/multi_fidelity.py [--seeds 20] [--full avatar_dit:cpu1t] [--proxy avatar_dit_proxy:cpu1t]``

Reads the full table and its proxy (the same space on cheaper inputs: 1 s of audio instead of
3 s) from ``bench/tables`` and prints, measured in this one run (:mod:`tuner.replay.fidelity`):
Kendall's tau between proxy and full for each objective; the proxy's cost as a share of the full
measurement's (summed model time over the space); and, over ``--seeds`` seeded orders of the
space, the model time to reach 90 / 95 / 99 % of the exhaustive front's hypervolume measuring
every setting in full against screening each on the proxy first (medians), and the share of the
front screening keeps after the whole space (1.0: no front loss). The figures go to
``bench/results/multi_fidelity.json``; ``--report`` prints the same table from them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raw_results import RESULTS, Run, load

from tuner.replay.fidelity import LATENCY, rank_agreement, screening_replay
from tuner.replay.methods import Target
from tuner.replay.table import load_hardware_types, load_table

ROOT = Path(__file__).resolve().parents[1]
SHARES = (0.90, 0.95, 0.99)


def _median(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    if len(known) < len(values):
        return f"not reached by {len(values) - len(known)} of {len(values)}"
    return f"{statistics.median(known):.0f} s"


def measure(full_name: str, proxy_name: str, seeds: int, table_dir: Path) -> dict[str, Any]:
    """The replay's figures (model seconds as the tables recorded them; None: a share never reached)."""
    declared = load_hardware_types(table_dir / "hardware_types.yaml")
    full, proxy = load_table(declared[full_name]), load_table(declared[proxy_name])
    target = Target.of(full)
    totals = [sum(r.values.get(LATENCY) or 0.0 for r in table.rows.values()) for table in (full, proxy)]
    runs = [screening_replay(target, proxy, seed, SHARES) for seed in range(seeds)]
    return {
        "full": full_name,
        "proxy": proxy_name,
        "settings": len(full.rows),
        "proxy_inputs": dict(proxy.hardware.inputs),
        "seeds": seeds,
        "kendall_tau": rank_agreement(full, proxy),
        "model_time_s": {"full": totals[0], "proxy": totals[1]},
        "orders": [
            {
                "full_cost_to": {str(share): r.full_cost_to[share] for share in SHARES},
                "screened_cost_to": {str(share): r.screened_cost_to[share] for share in SHARES},
                "full_total_s": r.full_total_s,
                "screened_total_s": r.screened_total_s,
                "promoted": r.promoted,
                "screened_final_share": r.screened_final_share,
            }
            for r in runs
        ],
    }


def report_lines(result: dict[str, Any]) -> list[str]:
    """The table docs/benchmarks.md quotes, from the replay's figures (computed now or read back)."""
    orders, seeds = result["orders"], result["seeds"]
    times = result["model_time_s"]
    kept = [order["screened_final_share"] for order in orders]
    lines = [
        f"`{result['command']}` ({result['measured_at'][:10]}): full {result['full']} "
        f"({result['settings']} settings), proxy {result['proxy']} (inputs {result['proxy_inputs']}), "
        f"{seeds} seeded orders",
        "",
        "| figure | value |",
        "| --- | --- |",
    ]
    lines += [f"| Kendall tau proxy vs full, {name} | {tau:.3f} |" for name, tau in result["kendall_tau"].items()]
    lines.append(f"| proxy cost / full cost (model time over the space) | {times['proxy'] / times['full']:.2f} |")
    for share in SHARES:
        lines.append(
            f"| model time to {round(share * 100)} % of the front's hypervolume (median): full / screened | "
            f"{_median([o['full_cost_to'][str(share)] for o in orders])} / "
            f"{_median([o['screened_cost_to'][str(share)] for o in orders])} |"
        )
    lines += [
        f"| whole space: full / screened (median) | {statistics.median(o['full_total_s'] for o in orders):.0f} s"
        f" / {statistics.median(o['screened_total_s'] for o in orders):.0f} s |",
        f"| settings promoted to a full measurement (median) | "
        f"{statistics.median(o['promoted'] for o in orders):.0f} of {result['settings']} |",
        f"| front share screening keeps after the whole space (median) | {statistics.median(kept):.3f} "
        f"(min {min(kept):.3f}; a loss of {100 * (1 - statistics.median(kept)):.0f} %) |",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--full", default="avatar_dit:cpu1t")
    parser.add_argument("--proxy", default="avatar_dit_proxy:cpu1t")
    parser.add_argument("--table-dir", type=Path, default=ROOT / "bench" / "tables")
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS / "multi_fidelity.json",
        help="where the figures go (default bench/results/multi_fidelity.json)",
    )
    parser.add_argument("--report", action="store_true", help="print the table from --results, replay nothing")
    args = parser.parse_args(argv)
    if args.report:
        print("\n".join(report_lines(load(args.results))))
        return 0
    run = Run("multi_fidelity.py", list(argv) if argv is not None else None)
    print("\n".join(report_lines(run.save(args.results, measure(args.full, args.proxy, args.seeds, args.table_dir)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
