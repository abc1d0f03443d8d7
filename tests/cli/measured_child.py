"""Run a command and write its own CPU seconds and peak memory to a JSON file (a test helper).

Usage: ``python measured_child.py RESULT.json PROGRAM [ARGS...]``. The program's
stdio are this process's; SIGINT and SIGTERM are passed on; the exit status is the
program's. The figures come from ``wait4``'s rusage of the program. This small
process stands between the test and the program because Linux carries the peak
memory of the process that forks into the child's ``ru_maxrss`` across ``exec``: a
program forked straight from a large pytest process reports pytest's peak, not its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys


def main() -> None:
    result_path, command = sys.argv[1], sys.argv[2:]
    child = subprocess.Popen(command)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    while True:
        try:
            _, raw, usage = os.wait4(child.pid, 0)
            break
        except InterruptedError:
            continue
    child.returncode = os.waitstatus_to_exitcode(raw)
    with open(result_path, "w") as handle:
        json.dump({"cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}, handle)
    code = child.returncode
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
