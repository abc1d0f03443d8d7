"""Streaming figures of a command that prints chunk markers (issue 40, item 5): the ``chunks`` block of a
command spec, the tap that times marker lines as they are printed, the spec's checks, and a study with a
real-time constraint run end to end by ``tuner run``.

Every program here is a SIMULATED streaming generator written by the test (a few lines of Python that sleep
and print markers), never a model. Timing bounds are generous: a sleep is a lower bound, and the upper
bounds leave a second or more for a loaded machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from adapter_helpers import ROOT
from adapter_helpers import run_on_fresh_worker as run
from test_command import command_request

from tuner.results import Outcome, TrialResult
from tuner.spec.loading import parse_spec
from tuner.spec.metrics import STREAMING_METRICS
from tuner.spec.models import SpecError

MARKER = r"chunk ready (?P<seconds>[0-9.]+)s"


def simulated_streamer(
    gaps_s: list[float],
    seconds: list[Any] | None = None,
    *,
    stream: str = "stdout",
    after_s: float = 0.0,
    last_without_newline: bool = False,
    extra: str = "",
) -> str:
    """Source of a SIMULATED chunk-printing program: sleeps ``gaps_s[k]`` and prints ``chunk ready <s>s`` (no
    flush: the tap's environment makes Python unbuffered), with chatter between markers; ``extra`` runs first."""
    seconds = seconds or [0.5] * len(gaps_s)
    return "\n".join(
        [
            '"""SIMULATED streaming generator: sleeps, then prints a chunk marker per chunk."""',
            "import sys, time",
            extra,
            f"out = sys.{stream}",
            f"gaps, seconds = {gaps_s!r}, {seconds!r}",
            "for k, (gap, s) in enumerate(zip(gaps, seconds)):",
            "    time.sleep(gap)",
            "    print(f'step {k}: denoising done', file=out)",
            f"    end = '' if {last_without_newline!r} and k == len(gaps) - 1 else '\\n'",
            "    print(f'chunk ready {s}s', file=out, end=end)",
            f"time.sleep({after_s!r})",
        ]
    )


def run_streamer(tmp_path: Path, source: str, **chunks: Any) -> TrialResult:
    tmp_path.mkdir(exist_ok=True)
    script = tmp_path / "simulated_streamer.py"
    script.write_text(source)
    block = {"pattern": MARKER, **chunks}
    return run(command_request(tmp_path, [sys.executable, str(script)], {}, chunks=block))


def figures(result: TrialResult) -> dict[str, float | None]:
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail)
    return {name: result.metrics[name].value for name in STREAMING_METRICS}


def test_markers_are_timed_as_printed_with_their_declared_seconds(tmp_path: Path) -> None:
    """The first marker comes after 0.4 s; the last at about 0.7 s, then the program idles 1.5 s: a marker read
    only at exit would put the last chunk after 2.2 s."""
    seconds = [0.5, 1.0, 1.5, 2.0]  # 5 s of output, read from the pattern's group
    result = run_streamer(tmp_path, simulated_streamer([0.4, 0.1, 0.1, 0.1], seconds, after_s=1.5))
    got = figures(result)
    assert got["time_to_first_chunk_s"] is not None and 0.4 <= got["time_to_first_chunk_s"] < 2.0
    assert got["real_time_factor"] is not None
    last_chunk_s = 5.0 / got["real_time_factor"]  # real-time factor = seconds of output / time to the last chunk
    assert 0.7 <= last_chunk_s < 2.0, f"the last marker was timed at {last_chunk_s:.2f} s, not as printed"
    assert got["chunk_latency_p50_s"] is not None and 0.1 <= got["chunk_latency_p50_s"] < 1.0
    assert got["stall_count"] == 0.0
    log = (tmp_path / "trial" / "command" / "call_1.stdout").read_text()
    assert log.count("chunk ready") == 4 and log.count("denoising done") == 4, "the whole stream is kept in the log"


def test_a_late_chunk_is_a_stall_and_an_on_time_stream_has_none(tmp_path: Path) -> None:
    """Fixed ``output_s`` (no group): 0.5 s per chunk. Chunk 2 comes 1.2 s after chunk 1, when a viewer who
    started at the first chunk has played only 1 s."""
    plain = {"pattern": "chunk ready", "output_s": 0.5}
    on_time = figures(run_streamer(tmp_path / "on_time", simulated_streamer([0.2, 0.1, 0.1, 0.1]), **plain))
    late = figures(run_streamer(tmp_path / "late", simulated_streamer([0.2, 0.1, 1.2, 0.1]), **plain))
    assert on_time["stall_count"] == 0.0
    assert late["stall_count"] is not None and late["stall_count"] >= 1.0
    assert late["chunk_latency_p95_s"] is not None and late["chunk_latency_p95_s"] >= 0.9
    assert late["real_time_factor"] is not None and late["real_time_factor"] <= 2.0 / 1.6  # 2 s of output, >= 1.6 s


def test_no_marker_leaves_every_streaming_figure_unavailable_with_the_reason(tmp_path: Path) -> None:
    source = simulated_streamer([0.05, 0.05]).replace("chunk ready", "clip written")
    result = run_streamer(tmp_path, source)
    assert result.outcome is Outcome.OK, result.reason
    for name in STREAMING_METRICS:
        metric = result.metrics[name]
        assert metric.value is None, (name, metric)
        assert "printed no chunk marker" in str(metric.reason) and MARKER in str(metric.reason), metric.reason
    assert result.metrics["real_time_factor"].direction == "maximize"


def test_a_marker_without_usable_seconds_is_a_reason_not_a_number(tmp_path: Path) -> None:
    source = simulated_streamer([0.05, 0.05], seconds=["soon", "soon"])
    result = run_streamer(tmp_path, source, pattern=r"chunk ready (?P<seconds>\S+?)s")
    assert result.outcome is Outcome.OK, result.reason
    reason = str(result.metrics["time_to_first_chunk_s"].reason)
    assert result.metrics["time_to_first_chunk_s"].value is None and "holds 'soon'" in reason, reason


def test_markers_on_stderr_a_last_line_without_newline_and_a_full_pipe(tmp_path: Path) -> None:
    """8 MB of chatter goes through the pipe before the markers (a pipe holds 64 KiB: the program would block
    if nobody read); the last marker has no final newline and still counts."""
    chatter = "sys.stderr.write(('x' * 1023 + '\\n') * 8192); sys.stderr.flush()"
    source = simulated_streamer([0.3, 0.05], [1.0, 1.0], stream="stderr", last_without_newline=True, extra=chatter)
    result = run_streamer(tmp_path, source, stream="stderr")
    got = figures(result)
    assert got["time_to_first_chunk_s"] is not None and got["time_to_first_chunk_s"] >= 0.3
    assert got["real_time_factor"] is not None and got["real_time_factor"] <= 2.0 / 0.35, "both chunks counted"
    log = (tmp_path / "trial" / "command" / "call_1.stderr").read_bytes()
    assert len(log) > 8_000_000 and log.endswith(b"chunk ready 1.0s"), "the whole stream, to its last byte"


def test_failure_classification_reads_the_piped_stream(tmp_path: Path) -> None:
    source = simulated_streamer([0.05], stream="stderr") + "\nprint('CUDA out of memory. Tried', file=out)\nsys.exit(1)"
    result = run_streamer(tmp_path, source, stream="stderr")
    assert result.outcome is Outcome.OOM, result.reason
    assert "CUDA out of memory. Tried" in str(result.reason)


def test_a_process_left_holding_the_pipe_does_not_hold_the_call(tmp_path: Path) -> None:
    """The program starts a SIMULATED helper that keeps its stdout open for 20 s and exits at once: the call
    ends within the tap's grace (not when the helper closes the pipe), and the chunk counts."""
    helper = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(1.5); print(\"helper still here\", flush=True); time.sleep(20)']); "
        "open('helper.pid', 'w').write(str(p.pid))"
    )
    result = run_streamer(tmp_path, simulated_streamer([0.1], extra=helper))
    helper_pid = int((tmp_path / "trial" / "run" / "helper.pid").read_text())
    try:
        got = figures(result)
        assert got["time_to_first_chunk_s"] is not None
        assert result.metrics["latency_p50_s"].value is not None and result.metrics["latency_p50_s"].value < 8.0
    finally:
        try:
            os.kill(helper_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_program_that_cannot_start_is_a_crash_with_chunks_too(tmp_path: Path) -> None:
    block = {"pattern": MARKER}
    result = run(command_request(tmp_path, [str(tmp_path / "no_such_program")], {}, chunks=block))
    assert result.outcome is Outcome.CRASH and "cannot start" in str(result.reason), result.reason


# --------------------------------------------------------------------------- the spec
FAKE_BLOCK = "workload:\n  class: tuner.workloads.fake:FakeWorkload\n  timeout_s: 20\n"


def command_spec_text(chunks: str | None, *, metrics: str = "", objectives: str = "") -> str:
    base = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()
    block = "workload:\n  timeout_s: 20\n  command:\n    argv: [prog]\n"
    block += f"    chunks: {chunks}\n" if chunks is not None else ""
    block += f"    metrics: {metrics}\n" if metrics else ""
    text = base.replace(FAKE_BLOCK, block)
    return text.replace("  - {metric: psnr_db, direction: maximize}\n", objectives) if objectives else text


@pytest.mark.parametrize(
    ("chunks", "key", "problem"),
    [
        ("{pattern: 'chunk (', output_s: 0.5}", "workload.command.chunks.pattern", "does not compile"),
        ("{pattern: 'chunk ready'}", "workload.command.chunks", "has no (?P<seconds>...) group, so give output_s"),
        (
            "{pattern: 'chunk (?P<secs>[0-9.]+)', output_s: 0.5}",
            "workload.command.chunks.pattern",
            "named group 'secs' is not read",
        ),
        ("{pattern: '.*', output_s: 0.5}", "workload.command.chunks.pattern", "matches an empty line"),
        ("{pattern: 'chunk', output_s: -1}", "workload.command.chunks.output_s", "greater than or equal to 0"),
        ("{pattern: 'chunk', output_s: 0.5, stream: stdlog}", "workload.command.chunks.stream", "'stdout' or 'stderr'"),
    ],
)
def test_the_chunks_block_is_checked_when_the_spec_is_loaded(chunks: str, key: str, problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(command_spec_text(chunks), "bad.yaml")
    message = str(caught.value)
    assert message.startswith(f"bad.yaml:7: {key}:") and problem in message, message


def test_a_streaming_objective_of_a_command_needs_the_chunks_block() -> None:
    objective = "  - {metric: real_time_factor, direction: maximize}\n"
    with pytest.raises(SpecError) as caught:
        parse_spec(command_spec_text(None, objectives=objective), "bad.yaml")
    message = str(caught.value)
    assert "workload.command: the spec names real_time_factor" in message and "chunks:" in message, message
    spec = parse_spec(command_spec_text("{pattern: 'chunk ready', output_s: 0.5}", objectives=objective), "ok.yaml")
    assert spec.workload.command is not None and spec.workload.command.chunks is not None
    assert spec.workload.command.chunks.stream == "stdout"


def test_a_regex_metric_may_not_shadow_a_streaming_figure() -> None:
    clash = "[{name: stall_count, regex: 'stalls (\\d+)'}]"
    with pytest.raises(SpecError, match="'stall_count' is a streaming figure the chunks block reports"):
        parse_spec(command_spec_text("{pattern: 'chunk', output_s: 0.5}", metrics=clash), "bad.yaml")


# --------------------------------------------------------------------------- end to end
STUDY = """\
name: streaming_command
description: A SIMULATED streaming program under a real-time constraint.
workload:
  timeout_s: 60
  device: cpu
  command:
    argv: [{python}, {script}, --gap, "{{gap_s}}"]
    chunks: {{pattern: 'chunk ready (?P<seconds>[0-9.]+)s', stream: stdout}}
parameters:
  gap_s: {{type: categorical, choices: [0.02, 0.4]}}
objectives:
  - {{metric: latency_p50_s, direction: minimize}}
  - {{metric: time_to_first_chunk_s, direction: minimize}}
constraints:
  - {{metric: real_time_factor, min: 1}}
report: [stall_count]
reference: {{gap_s: 0.02}}
baseline: {{gap_s: 0.4}}
measurement: {{warmup: 0, min_repeats: 1, max_repeats: 1}}
sampler: {{name: random}}
budget: {{trials: 2}}
"""

STREAMER = '''"""SIMULATED streaming generator: 4 chunks of 0.25 s of output, --gap seconds apart."""
import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--gap", type=float, required=True)
gap = parser.parse_args().gap
for k in range(4):
    time.sleep(gap)
    print(f"chunk ready 0.25s")
'''


def test_a_study_holds_a_command_to_real_time(tmp_path: Path) -> None:
    """1 s of output: 4 x 0.02 s of work is faster than real time (feasible), 4 x 0.4 s is not (infeasible)."""
    import optuna

    from tuner.storage.records import TrialRecord, record_feasible

    script = tmp_path / "simulated_streamer.py"
    script.write_text(STREAMER)
    spec_path = tmp_path / "streaming.yaml"
    spec_path.write_text(STUDY.format(python=sys.executable, script=script))
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "run",
            str(spec_path),
            "--study-name",
            "stream",
            "--no-mlflow",
            "--storage",
            storage,
            "--home",
            str(tmp_path / "home"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [TrialRecord.from_trial(t) for t in optuna.load_study(study_name="stream", storage=storage).trials]
    by_gap = {r.params["gap_s"]: r for r in records if r.outcome == "OK"}
    assert set(by_gap) == {0.02, 0.4}, [(r.params, r.outcome, r.reason) for r in records]
    fast, slow = by_gap[0.02], by_gap[0.4]
    assert fast.metrics["real_time_factor"]["value"] >= 1 and record_feasible(fast), fast.metrics
    assert slow.metrics["real_time_factor"]["value"] < 1 and not record_feasible(slow), slow.metrics
    assert slow.metrics["time_to_first_chunk_s"]["value"] >= 0.4
    assert "stall_count" in fast.metrics and fast.metrics["stall_count"]["value"] == 0.0
