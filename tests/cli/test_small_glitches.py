"""Small things a newcomer reads in the first hour (issue 41): help without ``<bool>`` on flags, counts with
their plural, counters shown without a better direction."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.cli.main import main
from tuner.cli.show_command import render_metric_lines
from tuner.spec.metrics import has_direction

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize("command", [[], ["run"], ["status"], ["export"]])
def test_help_names_no_type_for_a_flag(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys, *command, "--help")
    assert status == 0, err
    assert "--help" in out and "<bool>" not in out, out
    if command == ["run"]:
        assert "<int range>" in out and "<str>" in out, "options that take a value keep their type"


def test_validate_counts_in_the_singular_and_the_plural(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = (ROOT / "search_spaces" / "avatar_demo.yaml").read_text()
    assert spec.count("- expr:") == 1
    status, out, err = _run(capsys, "validate", "--spec-only", str(ROOT / "search_spaces" / "avatar_demo.yaml"))
    out = " ".join(out.split())
    assert status == 0, err
    assert "1 rule" in out and "1 rules" not in out and "6 parameters" in out and "2 objectives" in out, out
    assert "2 constraints" in out, out


def test_counters_have_no_better_direction() -> None:
    assert not has_direction("memory_samples") and not has_direction("count_frames")
    assert not has_direction("memory_sample_hz")
    assert has_direction("latency_p50_s") and has_direction("stall_count") and has_direction("psnr_db")
    lines = render_metric_lines(
        {
            "memory_samples": {"value": 900.0, "unit": "count", "direction": "maximize"},
            "count_frames": {"value": 48.0, "unit": "1", "direction": "minimize"},
            "latency_p50_s": {"value": 0.5, "unit": "s", "direction": "minimize"},
        }
    )
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert "maximize" not in by_name["memory_samples"] and "900 count" in by_name["memory_samples"], lines
    assert "minimize" not in by_name["count_frames"] and "48" in by_name["count_frames"], lines
    assert "(minimize)" in by_name["latency_p50_s"], lines
