"""A waiting ``tuner worker`` stops on SIGTERM even when the handler's exception is lost.

Found by the fleet bench (issue 27): the worker's SIGTERM handler raised ``KeyboardInterrupt``, and a
signal that arrives while Python runs a weakref callback or a finalizer (the garbage collector, at any
moment) has that exception printed as "Exception ignored" and dropped: the worker went on waiting for
the next study until it was killed. The test delivers SIGTERM inside a finalizer, by construction, then
lets the worker wait on an empty storage: it must stop at its next look.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import gc, os, signal, sys, weakref
from pathlib import Path
from tuner.cli.worker_command import _stop_on_sigterm
from tuner.fleet.worker import WorkerOptions, run_worker
from tuner.session.events import Quiet
from tuner.storage.opening import open_storage

url = "sqlite:///" + sys.argv[1]
open_storage(url)  # an empty storage: no study to join, the worker waits
_stop_on_sigterm()

class Held:
    pass

held = Held()
weakref.finalize(held, lambda: [os.kill(os.getpid(), signal.SIGTERM)] + [n * n for n in range(1000)])
del held  # the finalizer runs now; SIGTERM's handler runs inside it, and its exception is dropped
gc.collect()
print("signalled", flush=True)
try:
    run_worker(WorkerOptions(url, Path(sys.argv[2]), None, None, None, False, False, 0.2), Quiet())
except KeyboardInterrupt:
    print("stopped", flush=True)
    sys.exit(130)
print("returned", flush=True)
"""


def test_a_sigterm_whose_exception_is_dropped_still_stops_a_waiting_worker(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path / "empty.db"), str(tmp_path / "home")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"the worker went on waiting after SIGTERM: {expired.stdout!r} {expired.stderr!r}"
        ) from None
    assert "Exception ignored" in done.stderr, (
        f"the signal was not delivered inside the finalizer: the test proves nothing: {done.stderr[-1500:]}"
    )
    assert done.stdout.split() == ["signalled", "stopped"] and done.returncode == 130, (
        done.stdout,
        done.stderr[-1500:],
    )
