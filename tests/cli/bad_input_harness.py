"""Running the real ``tuner`` program on bad input and checking what a user would see.

:func:`run_measured` runs ``python -m tuner ARGS`` in its own directory and
returns its output, exit status, CPU seconds and peak memory (``wait4``
rusage of the program, taken by ``measured_child.py``: its own figures, robust
to a busy host). :func:`new_files`
lists what appeared outside the allowed places. The bad specs of the corpus
live in ``tests/bad_input/*.yaml``; each starts with ``# expect: <fragment>``;
:func:`hostile_specs` writes the three too large to ship (alias bomb, deep
nesting, a 5 MB spec).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "bad_input"
MEASURED_CHILD = Path(__file__).resolve().parent / "measured_child.py"
SECRET = "s3cr3tPW-corpus"  # planted in the environment and in URLs; must never come out
CPU_LIMIT_S = 5.0  # each answer within 5 s of CPU (user + system, the child's own)
MEMORY_LIMIT_MB = 500.0  # and 500 MB peak resident memory
WALL_TIMEOUT_S = 120.0  # generous: the machine is shared; CPU time is what is asserted
STARTED = re.compile(r"^study \S+ in ")  # the first line 'tuner run' prints once the study exists


@dataclass(frozen=True)
class Answer:
    """What one invocation did: status, output, the child's CPU seconds and peak RSS (MB)."""

    status: int
    stdout: str
    stderr: str
    cpu_s: float
    peak_mb: float
    started: bool = False  # 'tuner run' printed its study line (then was interrupted)


def environment(home: Path) -> dict[str, str]:
    """The child's environment: this Python, the repo on the path, secrets planted, MLflow in home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNER_", "MLFLOW_"))}
    env.update(
        {
            "PYTHONPATH": str(CORPUS.parents[1]) + os.pathsep + env.get("PYTHONPATH", ""),
            "MLFLOW_TRACKING_URI": f"sqlite:///{home}/mlflow.db",
            "MLFLOW_TRACKING_PASSWORD": SECRET,
            "MLFLOW_TRACKING_TOKEN": SECRET,
            "COLUMNS": "200",
        }
    )
    return env


def run_measured(args: list[str], cwd: Path, home: Path, *, stop_when_started: bool = False) -> Answer:
    """Run ``tuner ARGS``; with ``stop_when_started``, SIGINT it once it prints its study line."""
    figures = Path(tempfile.mkstemp(prefix="tuner-measured-", suffix=".json")[1])
    process = subprocess.Popen(
        [sys.executable, str(MEASURED_CHILD), str(figures), sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        env=environment(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    lines: list[str] = []
    errors: list[str] = []
    started = threading.Event()

    def read_out() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if stop_when_started and STARTED.match(line) and not started.is_set():
                started.set()
                process.send_signal(signal.SIGINT)

    def read_err() -> None:
        assert process.stderr is not None
        errors.extend(process.stderr)

    readers = [threading.Thread(target=read_out), threading.Thread(target=read_err)]
    for reader in readers:
        reader.start()
    try:
        status = process.wait(WALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        status = process.wait()
    for reader in readers:
        reader.join(30)
    measured = json.loads(figures.read_text() or "{}") if figures.exists() else {}
    figures.unlink(missing_ok=True)
    return Answer(
        status,
        "".join(lines),
        "".join(errors),
        float(measured.get("cpu_s", float("inf"))),
        float(measured.get("peak_mb", float("inf"))),
        started.is_set(),
    )


def expected_fragment(spec: Path) -> str:
    """The ``# expect:`` fragment on a corpus spec's first line."""
    first = spec.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace")
    match = re.match(r"# expect: (.+)", first)
    assert match, f"{spec} lacks its '# expect:' line"
    return match.group(1).strip()


def hostile_specs(directory: Path) -> dict[str, tuple[Path, str]]:
    """Write the specs too large to ship; name -> (path, expected fragment)."""
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        bomb.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    bomb.append("name: bomb")
    deep = "name: deep\nparameters: " + "[" * 5000 + "]" * 5000 + "\n"
    big = "name: big\ndescription: |\n" + ("  " + "x" * 98 + "\n") * 52_000
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, text, fragment in (
        ("alias_bomb", "\n".join(bomb) + "\n", "alias"),
        ("deep_nesting", deep, "deep"),
        ("five_megabytes", big, "MiB"),
    ):
        path = directory / f"{name}.yaml"
        path.write_text(text)
        written[name] = (path, fragment)
    return written


def new_files(root: Path, before: set[Path], allowed: list[Path]) -> list[Path]:
    """Files under ``root`` that were not there ``before`` and are not under an ``allowed`` place."""
    now = set(root.rglob("*"))
    return sorted(p for p in now - before if not any(p == a or a in p.parents for a in allowed))


def secret_in_files(root: Path) -> list[Path]:
    """Files under ``root`` whose bytes contain :data:`SECRET`."""
    return [p for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
