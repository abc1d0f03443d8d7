"""The cheap sampler (issue 27): kernel high-water marks catch a short spike between slow samples,
births are found without re-walking the tree, and the rate adapts to what the tree needs.

No wall-time assertions: the processes say what they did over pipes, and the tests wait on the
sampler's own counters with generous timeouts.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

from tuner.evaluators.process_tree import SLOW_HZ, ProcessTreeSampler

GB = 1e9

# A grandchild: allocates and touches 200 MB, holds it 20 ms, frees it, says so, and stays
# alive (reading stdin) so that a later sample can read its high-water mark.
SPIKER = textwrap.dedent(
    """
    import sys, time
    block = bytearray(200_000_000)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(0.02)
    del block
    print("spiked", flush=True)
    sys.stdin.read()
    """
)

# The command: waits for "go", starts SPIKER as its child, passes its line on, waits for it.
PARENT = textwrap.dedent(
    """
    import subprocess, sys
    assert sys.stdin.readline().strip() == "go"
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
    sys.exit(child.wait())
    """
)

# The sampler on its own process: slow once settled alone; a thread does not count; a child
# makes it fast; the child's exit lets it settle back to slow. Prints each rate it waited for.
ADAPTIVE = textwrap.dedent(
    """
    import os, subprocess, sys, threading, time
    from tuner.evaluators.process_tree import ProcessTreeSampler

    def wait_for(condition):
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.01)

    stop = threading.Event()
    with ProcessTreeSampler(os.getpid(), sample_hz=100, settle_s=0.1, use_nvml=False) as sampler:
        wait_for(lambda: sampler.current_hz < 100)
        print("alone", sampler.current_hz)
        helper = threading.Thread(target=stop.wait)
        helper.start()
        seen = sampler.samples
        wait_for(lambda: sampler.samples >= seen + 3)
        print("thread", sampler.current_hz)
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        wait_for(lambda: sampler.current_hz == 100)
        print("child", sampler.current_hz)
        child.stdin.close()
        child.wait()
        wait_for(lambda: sampler.current_hz < 100)
        print("after", sampler.current_hz)
        stop.set()
        helper.join()
    """
)


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the sampler"
        time.sleep(0.01)


def test_a_20_ms_spike_of_a_grandchild_between_two_slow_samples_is_caught() -> None:
    """At 2 Hz the samples are 500 ms apart; the grandchild's 200 MB lasts 20 ms between two of
    them. Its kernel high-water mark, read at the next sample while it lives, keeps the spike."""
    command = subprocess.Popen(
        [sys.executable, "-c", PARENT, SPIKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert command.stdin is not None and command.stdout is not None
    try:
        with ProcessTreeSampler(command.pid, sample_hz=2, use_nvml=False) as sampler:
            command.stdin.write("go\n")
            command.stdin.flush()
            assert command.stdout.readline().strip() == "spiked"
            seen = sampler.samples
            _wait_for(lambda: sampler.samples >= seen + 2)  # a sample after the spike, the grandchild alive
            command.stdin.close()  # the grandchild reads EOF and exits, then the command
            assert command.wait(timeout=60) == 0
    finally:
        if command.poll() is None:
            command.kill()
    assert sampler.peak_rss_bytes is not None
    assert sampler.peak_rss_bytes >= 0.2 * GB, "the 20 ms spike plus two interpreters"
    assert sampler.sample_hz == sampler.slow_hz == 2


def test_the_rate_is_slow_alone_and_fast_while_a_child_lives() -> None:
    done = subprocess.run([sys.executable, "-c", ADAPTIVE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rates = dict(line.split() for line in done.stdout.splitlines())
    assert rates == {"alone": f"{SLOW_HZ}", "thread": f"{SLOW_HZ}", "child": "100.0", "after": f"{SLOW_HZ}"}


def test_a_process_other_than_the_sampling_one_is_sampled_fast() -> None:
    """A command may spike and exit between two reads: it has no high-water mark after its exit."""
    command = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with ProcessTreeSampler(command.pid, sample_hz=100, settle_s=0.0, use_nvml=False) as sampler:
            seen = sampler.samples
            _wait_for(lambda: sampler.samples >= seen + 3)
            assert sampler.current_hz == 100
    finally:
        assert command.stdin is not None
        command.stdin.close()
        command.wait(timeout=60)
    assert sampler.peak_rss_bytes is not None and sampler.peak_rss_bytes > 0
