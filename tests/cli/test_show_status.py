"""``tuner show``, ``tuner status`` and ``tuner front`` as a user reads them, on a real study.

One small study is really run (a simulated workload on the CPU, a grid of 4 settings of
which 2 run out of memory for real, plus the 2 copies the grid repeats); every command goes
through the program's entry point, :func:`tuner.cli.main.main`, and its printed output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
from line_widths import too_wide

from tuner.cli.main import main
from tuner.cli.status_view import compact_params
from tuner.storage.records import TrialRecord

SPEC = """\
name: show_demo
description: Simulated workload; one parameter value really runs out of host memory (tests only).
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 30
parameters:
  behaviour: {type: categorical, choices: [ok, oom]}
  noise: {type: categorical, choices: [0, 10]}
derived:
  frames: "4"
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {behaviour: ok, noise: 0}
baseline: {behaviour: ok, noise: 10}
measurement: {warmup: 0, min_repeats: 2, max_repeats: 2}
budget: {trials: 4}
sampler: {name: grid}
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tuner home holding study ``s``, run to its budget (about 3 s)."""
    import tuner

    root = tmp_path_factory.mktemp("show_status")
    spec = root / "show_demo.yaml"
    spec.write_text(SPEC)
    opened = tuner.create_study(spec, study_name="s", storage=f"sqlite:///{root / 'studies.db'}", home=root)
    tuner.run_study(opened, home=root, use_mlflow=False)
    return root


def cli(home: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``tuner ARGS --home HOME --storage <its SQLite>``: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main([*args, "--home", str(home), "--storage", f"sqlite:///{home / 'studies.db'}"])
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


def stored(home: Path) -> list[TrialRecord]:
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{home / 'studies.db'}")
    return [TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)]


def trial_lines(stdout: str) -> dict[int, str]:
    """The status table's trial lines, by the number each starts with."""
    return {int(line.split()[0]): line for line in stdout.splitlines() if re.match(r"\s*\d+  \S", line)}


def test_show_prints_the_whole_reason_the_log_tail_and_the_invocation(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oom = next(r for r in stored(home) if r.outcome == "OOM")
    assert oom.reason is not None and len(oom.reason) > 60
    status, out, err = cli(home, capsys, "show", "s", str(oom.number))
    assert status == 0, err
    assert f"reason: {oom.reason}" in " ".join(out.split()), "the whole reason, wrapped at 80 columns, not cut"
    assert not too_wide(out.splitlines()), "only a deep path is wider"
    log = [line for line in out.splitlines() if line.startswith("  | ")]
    assert any("Traceback" in line for line in log) and "MemoryError" in log[-1], out
    assert len(log) <= 30
    assert "  python: tuner.workloads.fake:FakeWorkload" in out.splitlines()
    assert '  kwargs {"behaviour": "oom", "noise": ' + str(oom.params["noise"]) + ', "frames": 4}' in out.splitlines()
    assert "  behaviour = oom" in out.splitlines() and "  frames = 4" in out.splitlines()
    assert "constraints (feasible when <= 0):" in out and "(violated)" in out
    assert f"trial_{oom.number:05d}" in out and "result.json" in out


def test_show_prints_metrics_with_units_unavailable_ones_with_reasons_and_samples(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = next(r for r in stored(home) if r.role == "reference")
    status, out, err = cli(home, capsys, "show", "s", str(reference.number))
    assert status == 0, err
    text = out.splitlines()
    start = text.index("metrics:") + 1
    section = text[start : start + next(i for i, line in enumerate(text[start:]) if not line.startswith("  "))]
    lines = [line.split() for line in section if not line.startswith("    ")]  # a wrapped line continues indented
    assert len(lines) == len(reference.metrics), "every stored metric, one line each"
    rss = next(words for words in lines if words[:1] == ["peak_rss_gb"])
    assert float(rss[1]) == pytest.approx(reference.metric_value("peak_rss_gb"), rel=1e-5) and rss[2] == "GB"
    latency = next(words for words in lines if words[:1] == ["latency_p50_s"])
    assert latency[2] == "s"
    psnr = next(words for words in lines if words[:1] == ["psnr_db"])
    assert psnr[2] == "dB"
    vram = next(line for line in section if line.strip().startswith("peak_vram_gb "))
    assert (
        "unavailable: " + str(reference.metrics["peak_vram_gb"].get("reason")) in vram
        or reference.metric_value("peak_vram_gb") is not None
    )
    assert "reference" in out.splitlines()[0] and "on the Pareto front" in out.splitlines()[0]
    sheet = reference.samples["contact_sheet.png"]
    assert Path(sheet).is_file() and f"contact_sheet.png = {sheet}" in " ".join(out.split()), "a long path, wrapped"
    assert any(sheet in line.split() for line in out.splitlines()), "the path whole on one line, to be copied"
    assert "ran on host " in out and "slot cpu:0" in out


def test_show_json_is_the_whole_trial(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = stored(home)
    oom = next(r for r in records if r.outcome == "OOM")
    status, out, err = cli(home, capsys, "show", "s", str(oom.number), "--json")
    assert status == 0, err
    document: dict[str, Any] = json.loads(out)
    assert document["reason"] == oom.reason and document["outcome"] == "OOM"
    assert document["params"] == dict(oom.params) and document["derived"] == {"frames": 4}
    assert document["invocation"] == {
        "kind": "python",
        "target": "tuner.workloads.fake:FakeWorkload",
        "kwargs": {**oom.params, "frames": 4},
    }
    assert document["objectives"]["latency_p50_s"] == {"value": None, "unit": "s"}, "an OOM's values are placeholders"
    assert document["placeholder_values"] is True and document["constraints"]["outcome"] > 0
    assert "MemoryError" in document["log_tail"]["lines"][-1]
    copy = next(r for r in records if r.duplicate_of is not None)
    status, out, _ = cli(home, capsys, "show", "s", str(copy.number), "--json")
    assert status == 0 and json.loads(out)["duplicate_of"] == copy.duplicate_of


def test_show_of_an_unknown_trial_or_study_is_one_line_and_exit_2(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(home, capsys, "show", "s", "99")
    assert status == 2 and out == ""
    assert err.strip().splitlines() == [
        f"error: study 's' has no trial 99 (its trials are 0 to {len(stored(home)) - 1})"
    ]
    status, _, err = cli(home, capsys, "show", "nosuch", "0")
    assert status == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: no study 'nosuch'")


def test_status_prints_one_line_a_trial_with_k_v_params_units_and_the_front(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = stored(home)
    status, out, err = cli(home, capsys, "status", "s")
    assert status == 0, err
    header = next(line for line in out.splitlines() if line.startswith("#"))
    assert header.split()[:5] == ["#", "outcome", "role", "latency_p50_s", "[s]"] and "psnr_db [dB]" in header
    shown = trial_lines(out)
    assert sorted(shown) == [r.number for r in records], "one line a trial, every trial"
    text = out.splitlines()
    for record in records:
        line = shown[record.number]
        block = " ".join(text[text.index(line) :][:4])  # the row and what is stacked under it at 80 columns
        assert compact_params(record.params) in block and "behaviour=" in block and "noise=" in block
        assert line.split()[1] == record.outcome and line.split()[2] == record.role
    oom = next(r for r in records if r.outcome == "OOM")
    oom_block = " ".join(text[text.index(shown[oom.number]) :][:4])
    assert oom.reason is not None and oom.reason[:40] in oom_block
    assert "  *  " in shown[next(r.number for r in records if r.role == "reference")], "the reference is on the front"
    assert f"4 measured of budget 4, {len(records)} recorded" in out


def test_status_sort_orders_the_lines(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = stored(home)
    measured = {r.number: r.values[0] for r in records if r.values is not None and not r.placeholder}
    _, out, _ = cli(home, capsys, "status", "s", "--sort", "latency_p50_s")
    order = list(trial_lines(out))
    assert order[: len(measured)] == sorted(measured, key=lambda n: (measured[n], n)), out
    assert set(order[len(measured) :]) == {r.number for r in records if r.number not in measured}, "no value: last"
    _, out, _ = cli(home, capsys, "status", "s", "--sort=-number")
    assert list(trial_lines(out)) == sorted((r.number for r in records), reverse=True)
    _, out, _ = cli(home, capsys, "status", "s", "--sort", "psnr_db")
    psnr = [r.metric_value("psnr_db") for r in (next(x for x in records if x.number == n) for n in trial_lines(out))]
    shown = [value for value in psnr if value is not None]
    assert shown == sorted(shown, reverse=True), "a maximised objective sorts best first"
    _, out, _ = cli(home, capsys, "status", "s", "--sort", "outcome")
    assert [line.split()[1] for line in trial_lines(out).values()] == sorted(r.outcome for r in records)
    status, _, err = cli(home, capsys, "status", "s", "--sort", "no_such_column")
    assert status == 2 and err.startswith("error: --sort: no column 'no_such_column'")


def test_status_outcome_filters(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = stored(home)
    ooms = {r.number for r in records if r.outcome == "OOM"}
    assert len(ooms) == 2
    _, out, _ = cli(home, capsys, "status", "s", "--outcome", "OOM")
    assert set(trial_lines(out)) == ooms and f"showing 2 of {len(records)} trials (outcome OOM)" in out
    _, out, _ = cli(home, capsys, "status", "s", "--outcome", "ok,oom")
    assert set(trial_lines(out)) == {r.number for r in records}
    _, out, _ = cli(home, capsys, "status", "s", "--outcome", "OK", "--outcome", "CRASH")
    assert set(trial_lines(out)) == {r.number for r in records} - ooms
    status, _, err = cli(home, capsys, "status", "s", "--outcome", "BROKEN")
    assert status == 2 and err.startswith("error: --outcome: unknown outcome BROKEN")


def test_status_json_has_every_trial_whole(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = stored(home)
    status, out, err = cli(home, capsys, "status", "s", "--json")
    assert status == 0, err
    document = json.loads(out)
    assert [t["number"] for t in document["trials"]] == [r.number for r in records]
    for trial, record in zip(document["trials"], records):
        assert trial["params"] == dict(record.params) and trial["reason"] == record.reason
        assert trial["outcome"] == record.outcome and trial["derived"] == dict(record.derived)
    assert document["objectives"] == [
        {"metric": "latency_p50_s", "direction": "minimize", "unit": "s"},
        {"metric": "psnr_db", "direction": "maximize", "unit": "dB"},
    ]
    assert document["measured"] == 4 and document["budget_trials"] == 4
    _, out, _ = cli(home, capsys, "status", "s", "--json", "--outcome", "OOM", "--sort=-number")
    assert [t["outcome"] for t in json.loads(out)["trials"]] == ["OOM", "OOM"]


def test_status_without_a_study_still_lists_studies(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(home, capsys, "status")
    assert status == 0 and "s" in out.split() and str(len(stored(home))) in out.split(), out + err
    status, out, _ = cli(home, capsys, "status", "--json")
    (entry,) = json.loads(out)
    assert status == 0 and (entry["study"], entry["trials"], entry["unit"]) == ("s", len(stored(home)), "CPU-h")


def test_front_shows_the_memory_this_host_measured(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(home, capsys, "front", "s")
    assert status == 0, err
    records = {r.number: r for r in stored(home)}
    text = " ".join(out.split())
    shown = [n for n in records if re.search(rf"(^|\s)\*?\s*(trial )?{n}\s+{records[n].role}\b", out, re.M)]
    assert shown, out
    assert "peak_rss_gb" in text, "the memory this host measured"
    for number in shown:
        rss = records[number].metric_value("peak_rss_gb")
        assert rss is not None and f"{rss:.4g} GB" in text, (number, rss, out)
    vram_measured = any(records[n].metric_value("peak_vram_gb") is not None for n in shown)
    assert ("peak_vram_gb" in text) == vram_measured, "device memory only where this host measured it"
    assert all(len(line) <= 80 for line in out.splitlines()), out


def test_a_path_longer_than_the_line_is_printed_whole_so_it_can_be_copied() -> None:
    """A trial directory deeper than 80 columns (CI's clones live deep) stays one piece on its own line."""
    from tuner.cli.show_command import fit_lines

    path = "/check/work/main/tmp/pytest-of-root/pytest-194/popen-gw0/show_status0/s/trial_00004/result.json"
    fitted = fit_lines([f"  result: {path}", "reason: " + "word " * 30, "  |   " + "^" * 100], 80)
    assert f"    {path}" in fitted, fitted
    assert all(len(line) <= 80 or line.split() == [path] for line in fitted), "only the path is wider"
    assert fitted[-2:] == ["  |   " + "^" * 74, "  :   " + "^" * 26], "a word that is no path is cut to fill the line"


def test_a_deep_path_in_a_log_tail_line_stands_whole_under_the_continuation_marker() -> None:
    """A traceback line naming a file deeper than the line (CI's venv under ``/check/...``) keeps the quoted
    path whole after the ``  :`` marker; the width check accepts exactly that line."""
    from tuner.cli.show_command import fit_lines

    deep = '"/check/work/main/.venv/lib/python3.11/site-packages/numpy/_core/numeric_with_a_longer_name.py",'
    fitted = fit_lines([f"  |   File {deep} line 1173, in ones"], 80)
    assert f"  :   {deep}" in fitted, fitted
    assert not too_wide(fitted), fitted
    assert too_wide(["  :   two words " + "x" * 80]), "a wide line that is more than a path is still too wide"
