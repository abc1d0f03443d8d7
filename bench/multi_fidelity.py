"""Is screening on a cheap proxy safe? Rank agreement and a screening replay on measured tables.

Usage: ``python bench/multi_fidelity.py [--seeds 20] [--full avatar_dit:cpu1t] [--proxy avatar_dit_proxy:cpu1t]``

Reads the full table and its proxy (the same space on cheaper inputs: 1 s of audio instead of
3 s) from ``bench/tables`` and prints, measured in this one run (:mod:`tuner.replay.fidelity`):
Kendall's tau between proxy and full for each objective; the proxy's cost as a share of the full
measurement's (summed model time over the space); and, over ``--seeds`` seeded orders of the
space, the model time to reach 90 / 95 / 99 % of the exhaustive front's hypervolume measuring
every setting in full against screening each on the proxy first (medians), and the share of the
front screening keeps after the whole space (1.0: no front loss).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--full", default="avatar_dit:cpu1t")
    parser.add_argument("--proxy", default="avatar_dit_proxy:cpu1t")
    parser.add_argument("--table-dir", type=Path, default=ROOT / "bench" / "tables")
    args = parser.parse_args(argv)
    declared = load_hardware_types(args.table_dir / "hardware_types.yaml")
    full, proxy = load_table(declared[args.full]), load_table(declared[args.proxy])
    target = Target.of(full)
    print(f"multi-fidelity: full {args.full} ({len(full.rows)} settings), proxy {args.proxy} "
          f"(inputs {dict(proxy.hardware.inputs)})")
    for name, tau in rank_agreement(full, proxy).items():
        print(f"  Kendall tau proxy vs full, {name}: {tau:.3f}")
    totals = [sum(r.values.get(LATENCY) or 0.0 for r in table.rows.values()) for table in (full, proxy)]
    print(f"  proxy cost / full cost over the space (model time): {totals[1] / totals[0]:.2f}")
    runs = [screening_replay(target, proxy, seed, SHARES) for seed in range(args.seeds)]
    for share in SHARES:
        print(f"  model time to {round(share * 100)} % of the front's hypervolume (median of {args.seeds} orders): "
              f"full {_median([r.full_cost_to[share] for r in runs])}, "
              f"screened {_median([r.screened_cost_to[share] for r in runs])}")
    print(f"  whole space: full {statistics.median(r.full_total_s for r in runs):.0f} s, screened "
          f"{statistics.median(r.screened_total_s for r in runs):.0f} s, promoted "
          f"{statistics.median(r.promoted for r in runs):.0f} of {runs[0].settings}; front share kept by screening "
          f"{statistics.median(r.screened_final_share for r in runs):.3f} (min {min(r.screened_final_share for r in runs):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
