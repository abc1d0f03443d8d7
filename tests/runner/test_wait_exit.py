"""``wait_exit``: the exec launcher waits for its worker without polling (issue 27, waiting costs nothing)."""

from __future__ import annotations

import subprocess
import sys
import time

from tuner.runner.subprocess import wait_exit


def test_wait_exit_returns_when_the_process_ends_and_says_when_it_did_not() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        cpu = time.process_time()
        assert wait_exit(sleeper, 0.5) is False and sleeper.returncode is None
        assert time.process_time() - cpu < 0.2, "it blocked, it did not spin"
        sleeper.kill()
        assert wait_exit(sleeper, 30) is True and sleeper.returncode == -9
    finally:
        sleeper.kill()
        sleeper.wait()
    quick = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert wait_exit(quick, 30) is True and quick.returncode == 3
    assert wait_exit(quick, 0) is True, "an already reaped process has exited"
