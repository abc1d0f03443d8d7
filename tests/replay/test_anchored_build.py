"""bench/tables/anchored_build.py: the host's speed from the anchor measurements, and the corrected table it
writes (the measuring itself is the build's, run by the script, not here)."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

TABLES_DIR = Path(__file__).resolve().parents[2] / "bench" / "tables"


@pytest.fixture()
def build(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(TABLES_DIR))
    monkeypatch.syspath_prepend(str(TABLES_DIR.parent))
    import anchored_build

    yield anchored_build
    sys.modules.pop("anchored_build", None)


def test_the_anchor_between_two_measurements_is_their_log_interpolation(build: Any) -> None:
    anchors = [(0, 0.1), (6, 0.4), (12, 0.2)]
    assert build.anchor_at(anchors, 3.0) == pytest.approx(0.2)  # halfway in log between 0.1 and 0.4
    assert build.anchor_at(anchors, 0.5) == pytest.approx(math.exp(math.log(0.1) + (0.5 / 6) * math.log(4)))
    assert build.anchor_at(anchors, 12.5) == 0.2  # past the last: the last
    assert build.anchor_at([(3, 0.3), (9, 0.6)], 1.0) == 0.3  # before the first: the first


def test_a_running_median_drops_one_anchors_outlier_and_keeps_a_step(build: Any) -> None:
    values = [0.1, 0.1, 0.5, 0.1, 0.1, 0.2, 0.2, 0.2, 0.2]
    smoothed = build.smoothed([(6 * i, v) for i, v in enumerate(values)], 3)
    assert [p for p, _ in smoothed] == [6 * i for i in range(len(values))]
    assert [v for _, v in smoothed] == [0.1, 0.1, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.2]
    assert build.smoothed([(0, 0.3), (6, 0.1)], 1) == [(0, 0.3), (6, 0.1)]


def test_finish_divides_each_rows_seconds_by_the_hosts_speed_and_keeps_memory_and_quality(
    build: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = {name: tmp_path / f"t.{name}" for name in ("raw", "anchors", "table", "sidecar", "raw_sidecar")}
    monkeypatch.setattr(build, "paths", lambda table: where)
    columns = ["x", "outcome", "reason", "latency_p50_s", "latency_repeats", "peak_rss_gb", "text_f1"]
    columns += ["prefill_s", "decode_token_s"]
    with where["raw"].open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerow(["1", "OK", "", "0.2", "3", "1.5", "0.5", "0.1", "0.01"])
        writer.writerow(["2", "OK", "", "0.4", "3", "1.6", "0.7", "0.3", "0.02"])
        writer.writerow(["3", "INVALID", "a rule", "", "", "", "", "", ""])
    with where["anchors"].open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["after_rows", "unix_s", "latency_p50_s"])
        writer.writerows([[0, 1.0, 0.1], [1, 2.0, 0.2], [2, 3.0, 0.2], [3, 4.0, 0.2]])  # the host slows after row 0
    where["sidecar"].write_text(json.dumps({"hardware": build.HARDWARE, "spec": "s.yaml"}))
    monkeypatch.setitem(build.TABLES, "tiny", build.TABLES["omni_tiny"])
    build.finish("tiny", window=1)
    with where["table"].open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == columns, "the replay's columns only: the raw figures stay in the raw CSV"
    typical = 0.2  # the anchors' median
    assert float(rows[0]["latency_p50_s"]) == pytest.approx(0.2 * typical / math.sqrt(0.1 * 0.2), rel=1e-5)
    assert float(rows[1]["latency_p50_s"]) == pytest.approx(0.4, rel=1e-5)  # measured at the typical speed
    assert float(rows[0]["prefill_s"]) == pytest.approx(0.1 * typical / math.sqrt(0.1 * 0.2), rel=1e-5)
    assert float(rows[0]["decode_token_s"]) == pytest.approx(0.01 * typical / math.sqrt(0.1 * 0.2), rel=1e-5)
    assert (rows[1]["peak_rss_gb"], rows[1]["text_f1"]) == ("1.6", "0.7"), "memory and quality are not scaled"
    assert rows[2]["outcome"] == "INVALID" and rows[2]["latency_p50_s"] == ""
    assert json.loads(where["raw_sidecar"].read_text())["hardware"] == f"{build.HARDWARE}-raw"
