"""The search-efficiency bench's warm-start method (``default+warm:<table>``): a replayed default study on the
source hardware, its front enqueued into the target's study. Its set-up once read its source table through a
name it assigned later in the same function (an UnboundLocalError at the first replay); this runs it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from replay_fixtures import write_tiny_table

ROOT = Path(__file__).resolve().parents[2]


def test_a_warm_started_replay_runs_and_is_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("search_efficiency", ROOT / "bench" / "search_efficiency.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    write_tiny_table(tmp_path / "tables")
    code = bench.main(
        [
            "--table-dir",
            str(tmp_path / "tables"),
            "--tables",
            "tiny:cpu1t",
            "--results-dir",
            str(tmp_path / "results"),
            "--methods",
            "default,default+warm:tiny:cpu1t",
            "--seeds",
            "1",
            "--budget",
            "8",
        ]
    )
    assert code == 0, capsys.readouterr().out[-2000:]
    raw = json.loads((tmp_path / "results" / "search_efficiency_tiny_cpu1t.json").read_text())
    warm = raw["methods"]["default+warm:tiny:cpu1t"]["replays"]
    assert len(warm) == 1 and len(warm[0]["fractions"]) >= 1
