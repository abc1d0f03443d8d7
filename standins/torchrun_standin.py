"""STAND-IN for ``torchrun`` (SIMULATED launcher): starts ``--nproc_per_node`` copies of a script.

``python standins/torchrun_standin.py --nproc_per_node N [--master_port P] script.py args...``
starts N child processes ``python script.py args...`` with ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` and ``MASTER_PORT`` set, like torchrun does, waits
for all of them and exits with the first non-zero status (1 when a rank failed,
as torchrun's elastic agent reports). Each rank starts in a new session, as torchrun's
elastic agent starts its workers (``subprocess.Popen(..., start_new_session=True)`` in
``torch.distributed.elastic``): the ranks leave the launcher's process group and session,
so a ``killpg`` of the trial's group misses them. No process group or NCCL is set up: the
stand-in scripts need none, and no signal is forwarded (torchrun stops its ranks on SIGTERM,
SIGINT, SIGHUP and SIGQUIT; after a SIGKILL of either launcher the ranks run on). Exists so
tests can check that a command's peak memory counts its ranks and that a trial's timeout kills
them wherever they are.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="STAND-IN for torchrun (simulated)")
    parser.add_argument("--nproc_per_node", "--nproc-per-node", type=int, default=1)
    parser.add_argument("--master_port", "--master-port", type=int, default=29500)
    parser.add_argument("--standalone", action="store_true", help="accepted like torchrun (single node)")
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    children = []
    for rank in range(args.nproc_per_node):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(args.nproc_per_node),
            "LOCAL_WORLD_SIZE": str(args.nproc_per_node),
            "MASTER_PORT": str(args.master_port),
        }
        children.append(
            subprocess.Popen([sys.executable, args.script, *args.script_args], env=env, start_new_session=True)
        )  # like torchrun's elastic agent
    statuses = [child.wait() for child in children]
    failed = [s for s in statuses if s != 0]
    if failed:
        print(
            f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: {len(failed)} rank(s) failed "
            f"(exit statuses {statuses}) (stand-in)",
            file=sys.stderr,
        )
        return 2 if all(s == 2 for s in failed) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
