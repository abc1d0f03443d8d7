"""Every view reads right at 80 columns (issue 41): ``tuner front``, ``status``, ``show`` and the study list, in a
real 80-column pseudo-terminal and piped: every trial number and role visible, no line longer than 80, no line
ending in a run of blanks; ``tuner front`` marks the chosen trial and gives units and speed-ups like the run's
closing front.

One small study is really run (a simulated workload, a grid of 4 settings of which 2 run out of memory, plus the
copies the grid repeats); each command runs as its own process, as a user starts it.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from line_widths import too_wide

from tuner.storage.records import TrialRecord

WIDTH = 80
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
SPEC = """\
name: narrow_views_demo
description: Simulated workload; one parameter value really runs out of host memory (tests only).
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 30
parameters:
  behaviour: {type: categorical, choices: [ok, oom]}
  noise: {type: categorical, choices: [0, 10]}
derived:
  frames: "4"
  sleep_s: "0.05 - 0.004 * noise"   # the noisy setting is faster: on the front beside the reference
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {behaviour: ok, noise: 0}
baseline: {behaviour: ok, noise: 10}
measurement: {warmup: 0, min_repeats: 2, max_repeats: 2}
budget: {trials: 4}
sampler: {name: grid}
export: {policy: "minimize latency_p50_s subject to psnr_db >= 40"}
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tuner home holding study ``s``, run to its budget (a few seconds)."""
    import tuner

    root = tmp_path_factory.mktemp("narrow")
    spec = root / "narrow.yaml"
    spec.write_text(SPEC)
    opened = tuner.create_study(spec, study_name="s", storage=f"sqlite:///{root / 'studies.db'}", home=root)
    tuner.run_study(opened, home=root, use_mlflow=False)
    return root


def records(home: Path) -> list[TrialRecord]:
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{home / 'studies.db'}")
    return [TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "TERM")}
    return {**env, "TERM": "xterm-256color", "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}


def _args(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tuner", *args, "--home", str(home), "--storage", f"sqlite:///{home / 'studies.db'}"]


def in_terminal(home: Path, *args: str) -> str:
    """What ``tuner ARGS`` prints in an 80-column pseudo-terminal (its size set before it starts), colours removed."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, WIDTH, 0, 0))
    process = subprocess.Popen(
        _args(home, *args), stdin=slave, stdout=slave, stderr=slave, env=_env(), start_new_session=True
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert process.wait(timeout=120) == 0, b"".join(chunks).decode(errors="replace")
    return ANSI.sub("", b"".join(chunks).decode(errors="replace")).replace("\r\n", "\n")


def piped(home: Path, *args: str) -> str:
    done = subprocess.run(_args(home, *args), capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert ANSI.search(done.stdout) is None, "no colour codes in a pipe"
    return done.stdout


def assert_readable(text: str) -> list[str]:
    """The lines of ``text``: none wider than 80 but a lone deep path (kept whole to be copied), none ending in
    more than 2 blanks, none mostly padding."""
    lines = text.splitlines()
    assert lines, "printed nothing"
    wide = too_wide(lines, WIDTH)
    assert not wide, wide
    assert all(len(line) - len(line.rstrip()) <= 2 for line in lines), [line for line in lines if line.endswith("   ")]
    assert not [line for line in lines if re.search(r"\S {24,}\S", line)], "no padding runs inside a line"
    return lines


VIEWS = [pytest.param(in_terminal, id="terminal"), pytest.param(piped, id="piped")]


@pytest.mark.parametrize("view", VIEWS)
def test_front_shows_each_trial_its_role_units_speed_up_and_the_chosen_mark(home: Path, view) -> None:
    lines = assert_readable(view(home, "front", "s"))
    text = "\n".join(lines)
    front = [r for r in records(home) if r.number in _front_numbers(home)]
    assert front
    for record in front:
        assert re.search(rf"(^|\s){record.number}\s+{record.role}\b|trial {record.number} {record.role}\b", text), (
            record.number,
            record.role,
            text,
        )
    assert any(line.startswith("* ") for line in lines), "the chosen trial is marked"
    assert "* chosen: trial" in text and "latency_p50_s (min, s)" in text and re.search(r"\d s\b", text), text
    assert len(front) >= 2, "the front has a trial beside the reference"
    assert re.search(r"\d\.\d\dx", text), "speed-ups as the closing front gives them"
    assert "peak_rss_gb" in text, "the memory this host measured"


@pytest.mark.parametrize("view", VIEWS)
def test_status_shows_every_trial_its_outcome_role_and_params(home: Path, view) -> None:
    lines = assert_readable(view(home, "status", "s"))
    stored = records(home)
    rows = {int(line.split()[0]): line for line in lines if re.match(r"\s*\d+  \S", line)}
    assert sorted(rows) == [r.number for r in stored], "one row a trial, every trial"
    for record in stored:
        assert rows[record.number].split()[1:3] == [record.outcome, record.role], rows[record.number]
        block = _block(lines, rows[record.number])
        for key, value in record.params.items():
            assert f"{key}={value}" in block, (record.number, block)


@pytest.mark.parametrize("view", VIEWS)
def test_show_and_the_study_list_fit(home: Path, view) -> None:
    oom = next(r for r in records(home) if r.outcome == "OOM")
    lines = assert_readable(view(home, "show", "s", str(oom.number)))
    assert lines[0].startswith(f"trial {oom.number} of study s: {oom.role}, OOM"), lines[0]
    words = " ".join(" ".join(lines).split())
    assert " ".join(str(oom.reason).split()) in words, "the whole reason, wrapped, never cut"
    assert_readable(view(home, "status"))


def _front_numbers(home: Path) -> set[int]:
    from tuner.pareto import front_trials

    study = optuna.load_study(study_name="s", storage=f"sqlite:///{home / 'studies.db'}")
    return {t.number for t in front_trials(study.get_trials(deepcopy=False), ["minimize", "maximize"])}


def _block(lines: list[str], row: str) -> str:
    """A status row and the indented lines under it (its stacked where / params / note)."""
    start = lines.index(row)
    block = [row]
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        block.append(line)
    return "\n".join(block)
