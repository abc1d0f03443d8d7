"""bench/tables/measure_overhead.py: which settings it runs, how samples become the sidecar's overhead,
and its oneDNN switch (the real trials themselves are run by the script, not here)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from replay_fixtures import write_tiny_table

from tuner.replay.table import load_hardware_types, load_table
from tuner.spec.candidate import canonical_key

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "tables" / "measure_overhead.py"


def script() -> Any:
    spec = importlib.util.spec_from_file_location("measure_overhead", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_runs_the_reference_and_baseline_then_quick_ok_settings(tmp_path: Path) -> None:
    table = load_table(load_hardware_types(write_tiny_table(tmp_path))["tiny:cpu1t"])
    settings = script().pick_settings(table, 4)
    assert settings[:2] == [table.spec.reference, table.spec.baseline] and len(settings) == 4
    latencies = sorted(float(r.values["latency_p50_s"] or 0) for r in table.rows.values() if r.outcome.value == "OK")
    for setting in settings[2:]:
        row = table.lookup(setting)
        assert row is not None and row.outcome.value == "OK"
        assert float(row.values["latency_p50_s"] or 0) <= latencies[len(latencies) // 2]
    assert len({canonical_key(s) for s in settings}) == 4
    assert script().pick_settings(table, 4) == settings  # seeded


def sample(outcome: str, startup: float, evaluation: float, calls: float, modelled: float) -> dict[str, Any]:
    return {
        "outcome": outcome,
        "phases_s": {"startup": startup, "evaluation": evaluation},
        "calls_s": calls,
        "modelled_calls_s": modelled,
    }


def test_the_overhead_is_the_median_of_the_ok_runs() -> None:
    samples = [
        sample("OK", 5.0, 1.0, 4.0, 2.0),
        sample("OK", 0.2, 0.5, 3.0, 1.0),
        sample("OK", 0.3, 0.7, 2.0, 1.0),
        sample("CRASH", 9.0, 0.0, 0.0, 1.0),
    ]
    overhead = script().overhead_of(samples, "SubprocessRunner", 1, True, ((0.5,), (0.7,)))
    assert (overhead["startup"], overhead["evaluation"], overhead["trials"]) == (0.3, 0.7, 3)
    assert overhead["calls_vs_model"] == 2.0  # median of 2, 3, 2
    assert overhead["source"] == "bench/tables/measure_overhead.py" and overhead["samples"] == samples
    assert overhead["measured_at"].endswith("Z")


@pytest.mark.slow
def test_the_onednn_switch_waits_for_torch_and_turns_it_off() -> None:
    code = (
        "import sys, measure_overhead as m; m.onednn_off(); assert 'torch' not in sys.modules; "
        "import torch; print(torch.backends.mkldnn.enabled)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parent), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert "oneDNN backend switched off" in done.stderr
