"""bench/gpu_check.sh: one line and exit 0 without a GPU; the check script's own code on the CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _gpu_listed() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return listed.returncode == 0 and any(line.startswith("GPU ") for line in listed.stdout.splitlines())


@pytest.mark.skipif(_gpu_listed(), reason="a GPU is listed here: the script would run its GPU checks")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh")], capture_output=True, text=True,
                          timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no NVIDIA GPU"), done.stdout
    assert not list(tmp_path.iterdir()), "nothing is written in the no-GPU mode"


def test_cpu_plumbing_runs_every_study_and_writes_the_figures(tmp_path: Path) -> None:
    """The checks' own code (specs, studies, reading the figures back) on host stand-ins."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu-plumbing", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    checks = report["checks"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert report["mode"] == "cpu-plumbing" and set(checks) == {"latency_truth", "avatar_cpu", "slot_pinning"}
    latency = checks["latency_truth"]["trials"]
    assert sorted(t["kernel_ms"] for t in latency) == [20, 100]
    for trial in latency:  # a sleep never ends early; the error is a finite comparison of two measurements
        assert trial["outcome"] == "OK" and trial["true_ms"] >= trial["kernel_ms"]
        assert trial["reported_ms"] >= trial["kernel_ms"] and 0 <= trial["error"] < 1
    avatar = checks["avatar_cpu"]
    assert avatar["ok_trials"] == 3 and avatar["fp32_over_bf16_latency"] > 0
    assert {t["precision"] for t in avatar["trials"] if t["role"] in ("reference", "baseline")} == {"fp32", "bf16"}
    slots = checks["slot_pinning"]["trials"]
    assert len(slots) >= 3 and all(t["slot"] == "cpu:0" and t["cuda_visible_devices"] == "" for t in slots)
    assert "gpu_check: all checks OK" in done.stdout
