"""What a study cost, in every view of one real study: ``tuner run``'s summary, ``tuner status`` (the study
list, the table and ``--json``), ``tuner show``, the MLflow study run (live and rebuilt), the service's
views and the export (issue 26).

One small study is really run by ``tuner run`` in a subprocess (a simulated workload on the CPU, a grid
of 6 settings: 2 run out of memory for real, 1 crashes, 1 is refused by a rule, and the reference and
baseline settings come round again as copies), with MLflow on a local SQLite store. Every view must
show used + wasted = the sum of the trials' stored ``cost.device_s``, count the failed runs as wasted,
the copies and the refused setting as avoided, and show the same figures as the others.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from tuner.cli.main import main
from tuner.front.cost import device_s_text
from tuner.storage.cost import SECONDS_PER_HOUR
from tuner.storage.records import TrialRecord

SPEC = """\
name: cost_demo
description: Simulated workload; settings that run out of host memory, crash, or a rule refuses (tests only).
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 30
parameters:
  behaviour: {type: categorical, choices: [ok, oom, raise]}
  noise: {type: categorical, choices: [0, 10]}
rules:
  - expr: "not (behaviour == 'raise' and noise == 10)"
    message: "raise with noise 10 is refused by a rule"
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {behaviour: ok, noise: 0}
baseline: {behaviour: ok, noise: 10}
measurement: {warmup: 0, min_repeats: 2, max_repeats: 2}
budget: {trials: 6}
sampler: {name: grid}
"""
STUDY = "c"
LINE = re.compile(
    r"^(?P<unit>[CG]PU-h): used (?P<used>\S+) \((?P<ok>\d+) runs OK\), wasted (?P<wasted>\S+)"
    r"(?: \((?P<wasted_counts>[^)]*)\))?, avoided ~(?P<avoided>\S+)(?: \((?P<avoided_counts>[^)]*)\))?; "
    r"(?P<recorded>\S+) device-s recorded by (?P<runs>\d+) runs \(used \+ wasted\)$"
)


def storage(root: Path) -> str:
    return f"sqlite:///{root / 'studies.db'}"


def mlflow_uri(root: Path, store: str = "mlflow") -> str:
    return f"sqlite:///{root / store / 'mlflow.db'}"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A tuner home holding study ``c`` run to the end of its grid by ``tuner run``; and what the run printed."""
    root = tmp_path_factory.mktemp("cost_views")
    (root / "cost_demo.yaml").write_text(SPEC)
    env = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": "", "COLUMNS": "1000"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "run",
            str(root / "cost_demo.yaml"),
            "--study-name",
            STUDY,
            "--home",
            str(root),
            "--storage",
            storage(root),
            "--mlflow-uri",
            mlflow_uri(root),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root, done.stdout


def records(root: Path) -> list[TrialRecord]:
    loaded = optuna.load_study(study_name=STUDY, storage=storage(root))
    return [TrialRecord.from_trial(t) for t in loaded.get_trials(deepcopy=False)]


def cli(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``tuner ARGS --home ROOT --storage <its SQLite>``'s stdout (exit status 0 asserted)."""
    with pytest.raises(SystemExit) as exited:
        main([*args, "--home", str(root), "--storage", storage(root)])
    captured = capsys.readouterr()
    assert int(exited.value.code or 0) == 0, captured.err
    return captured.out


def unwrapped(text: str) -> str:
    """``text`` with each line that continues the one above (indented by 4: a stacked or wrapped part) joined to it."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("    ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines)


def cost_line(text: str) -> tuple[str, re.Match[str]]:
    """The one cost line of a view's text, and its parts."""
    found = [(line, LINE.match(line)) for line in text.splitlines() if LINE.match(line)]
    assert len(found) == 1, text
    line, match = found[0]
    assert match is not None
    return line, match


def counts(text: str | None) -> dict[str, int]:
    """``1 CRASH, 2 OOM`` -> {"CRASH": 1, "OOM": 2}."""
    pairs = [part.strip().split(" ", 1) for part in (text or "").split(",") if part.strip()]
    return {kind: int(number) for number, kind in pairs}


def expected(root: Path) -> dict[str, Any]:
    """The study's cost as the stored trials say it: their ``device_s`` summed by outcome."""
    stored = records(root)
    costed = [r for r in stored if r.device_s is not None]
    wasted: dict[str, int] = {}
    for record in costed:
        if record.outcome != "OK":
            wasted[record.outcome] = wasted.get(record.outcome, 0) + 1
    return {
        "recorded_s": sum(r.device_s or 0.0 for r in costed),
        "used_s": sum(r.device_s or 0.0 for r in costed if r.outcome == "OK"),
        "wasted_s": sum(r.device_s or 0.0 for r in costed if r.outcome != "OK"),
        "ok": sum(1 for r in costed if r.outcome == "OK"),
        "wasted": wasted,
        "runs": len(costed),
        "copies": sum(1 for r in stored if r.duplicate_of is not None),
        "refused": sum(1 for r in stored if r.outcome == "INVALID" and not r.measured),
    }


def test_the_study_has_failed_runs_copies_and_a_refused_setting(study: tuple[Path, str]) -> None:
    root, _ = study
    stored = records(root)
    figures = expected(root)
    assert figures["wasted"].get("OOM", 0) >= 1 and figures["wasted"].get("CRASH", 0) >= 1, figures
    assert figures["copies"] >= 2 and figures["refused"] == 1, [(r.number, r.outcome, r.duplicate_of) for r in stored]
    for record in stored:
        if record.measured:
            assert record.device_s is not None and record.device_s > 0, record
            phases = (record.cost or {})["phases_device_s"]
            assert sum(phases.values()) == pytest.approx(record.device_s, abs=1e-5), "the phases add up"
        else:
            assert record.device_s is None, "a copy or a refused setting ran nothing"


def test_run_summary_says_used_wasted_avoided_adding_up_to_the_recorded_seconds(study: tuple[Path, str]) -> None:
    root, printed = study
    figures = expected(root)
    _, match = cost_line(printed)
    assert match["unit"] == "CPU-h"
    assert float(match["recorded"]) == pytest.approx(figures["recorded_s"], rel=6e-3)
    assert float(match["used"]) * SECONDS_PER_HOUR == pytest.approx(figures["used_s"], rel=6e-3)
    assert float(match["wasted"]) * SECONDS_PER_HOUR == pytest.approx(figures["wasted_s"], rel=6e-3)
    assert int(match["ok"]) == figures["ok"] and int(match["runs"]) == figures["runs"]
    assert counts(match["wasted_counts"]) == figures["wasted"], "every failed run is wasted"
    assert counts(match["avoided_counts"]) == {"copy": figures["copies"], "refused by rules": 1}
    assert float(match["avoided"]) > 0
    assert any(
        line.startswith("avoided is an estimate: a copy: its original's recorded cost") for line in printed.splitlines()
    ), printed


def test_status_shows_each_trials_device_seconds_and_the_same_cost(
    study: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, printed = study
    out = unwrapped(cli(root, capsys, "status", STUDY))  # 80 columns: what is stacked under a row joins it again
    header = next(line for line in out.splitlines() if line.startswith("#"))
    edge = header.index("  dev-s") + len("  dev-s")  # a numeric column: its cells end where its header does
    stored = {r.number: r for r in records(root)}
    rows = {int(line.split()[0]): line for line in out.splitlines() if re.match(r"\s*\d+  \S", line)}
    assert sorted(rows) == sorted(stored)
    for number, row in rows.items():
        assert row[:edge].split()[-1] == device_s_text(stored[number].device_s), (number, row)
        assert row[edge : edge + 1] in (" ", ""), row
    line, _ = cost_line(out)
    assert line == cost_line(printed)[0], "status and the run's summary show the same figures"


def test_status_shows_each_phases_share_of_the_device_time(
    study: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = study
    out = cli(root, capsys, "status", STUDY)
    line = next(line for line in out.splitlines() if line.startswith("device time: "))
    shares = {word: int(value) for word, value in re.findall(r"([a-z-]+) (\d+) %", line)}
    assert list(shares) == ["measured", "warm-up", "start-up", "scoring", "other"], line
    assert len(line) <= 80, "one line at 80 columns"
    phases: dict[str, float] = {}
    for record in records(root):
        for phase, seconds in ((record.cost or {}).get("phases_device_s") or {}).items():
            phases[phase] = phases.get(phase, 0.0) + seconds
    total = sum(phases.values())
    assert shares["measured"] == round(100 * phases["measured"] / total), (line, phases)
    assert shares["start-up"] == round(100 * phases["startup"] / total), (line, phases)
    assert abs(sum(shares.values()) - 100) <= 3, "each share rounded on its own"


def test_phase_shares_line_words_each_phase_and_none_without_phases() -> None:
    from tuner.front.cost import phase_shares_line
    from tuner.storage.cost import StudyCost

    assert phase_shares_line(StudyCost()) is None
    cost = StudyCost(
        phases_s={
            "startup": 8.0,
            "warmup": 9.0,
            "measured": 76.0,
            "evaluation": 5.0,
            "finish": 1.5,
            "unattributed": 0.5,
        }
    )
    assert phase_shares_line(cost) == ("device time: measured 76 %, warm-up 9 %, start-up 8 %, scoring 5 %, other 2 %")


def test_status_json_cost_adds_up_and_the_study_list_shows_the_hours_used(
    study: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = study
    figures = expected(root)
    document = json.loads(cli(root, capsys, "status", STUDY, "--json"))
    cost = document["cost"]
    trial_seconds = [t["device_s"] for t in document["trials"] if t["device_s"] is not None]
    assert cost["used_device_s"] + cost["wasted_device_s"] == pytest.approx(sum(trial_seconds), abs=2e-3)
    assert sum(trial_seconds) == pytest.approx(figures["recorded_s"], abs=1e-6)
    assert cost["recorded_device_h"] == pytest.approx(cost["used_device_h"] + cost["wasted_device_h"], abs=2e-6)
    assert cost["wasted_trials"] == figures["wasted"] and cost["used_trials"] == {"OK": figures["ok"]}
    assert cost["avoided_trials"] == {"copy": figures["copies"], "refused by rules": 1}
    assert cost["unit"] == "CPU-h" and cost["budget_device_hours"] is None and cost["runs_without_cost"] == 0
    for trial in document["trials"]:
        assert (trial["cost"] or {}).get("device_s") == trial["device_s"]
    (entry,) = json.loads(cli(root, capsys, "status", "--json"))
    assert entry == {
        "study": STUDY,
        "trials": len(document["trials"]),
        "used_device_h": cost["used_device_h"],
        "wasted_device_h": cost["wasted_device_h"],
        "unit": "CPU-h",
    }
    listed = cli(root, capsys, "status")
    assert f"{cost['used_device_h']:.4g} CPU-h" in listed, listed


def test_show_gives_a_trials_device_seconds_devices_and_phases(
    study: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = study
    stored = records(root)
    shown_total = 0.0
    for record in stored:
        document = json.loads(cli(root, capsys, "show", STUDY, str(record.number), "--json"))
        assert document["device_s"] == record.device_s and document["device"] == "cpu"
        if record.device_s is None:
            assert document["cost"] is None
            continue
        assert document["cost"]["devices"] == 1 and document["cost"]["phases_device_s"] == dict(
            (record.cost or {})["phases_device_s"]
        )
        shown_total += document["device_s"]
    assert shown_total == pytest.approx(expected(root)["recorded_s"], abs=1e-6)
    oom = next(r for r in stored if r.outcome == "OOM")
    lines = cli(root, capsys, "show", STUDY, str(oom.number)).splitlines()
    head = next(line for line in lines if line.startswith("cost: "))
    assert head.startswith(f"cost: {oom.device_s:.3g} device-s (") and "x 1 device(s)" in head, head
    phases = lines[lines.index(head) + 1 :]
    phases = phases[: next(i for i, line in enumerate(phases) if not line.startswith("  "))]
    assert phases and all(
        line.split()[0] in ("startup", "warmup", "measured", "evaluation", "finish", "unattributed") for line in phases
    ), phases
    copy = next(r for r in stored if r.duplicate_of is not None)
    out = cli(root, capsys, "show", STUDY, str(copy.number))
    assert f"cost: a copy of trial {copy.duplicate_of}: it ran nothing" in out


def _parent_and_children(uri: str) -> tuple[Any, dict[int, Any]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("cost_demo @ cpu")
    runs = client.search_runs([experiment.experiment_id], f"tags.`tuner.study` = '{STUDY}'")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = {int(r.data.tags["tuner.trial_number"]): r for r in runs if "mlflow.parentRunId" in r.data.tags}
    return parent, children


def _assert_mlflow_shows(uri: str, root: Path, status_cost: dict[str, Any], line: str) -> None:
    from mlflow.tracking import MlflowClient

    parent, children = _parent_and_children(uri)
    metrics = parent.data.metrics
    for name in ("used", "wasted", "avoided", "recorded"):
        assert metrics[f"cost_{name}_device_h"] == pytest.approx(status_cost[f"{name}_device_h"], abs=1e-6), name
    assert metrics["cost_used_device_h"] + metrics["cost_wasted_device_h"] == pytest.approx(
        expected(root)["recorded_s"] / SECONDS_PER_HOUR, rel=1e-9
    )
    assert metrics["cost_wasted_runs"] == sum(status_cost["wasted_trials"].values())
    assert parent.data.tags["tuner.cost"] == line
    assert line in parent.data.tags["mlflow.note.content"], "the description says it too"
    stored = {r.number: r for r in records(root)}
    assert sorted(children) == sorted(stored)
    for number, run in children.items():
        assert run.data.metrics.get("device_s") == stored[number].device_s, number
    table = json.loads(Path(MlflowClient(uri).download_artifacts(parent.info.run_id, "trials.json")).read_text())
    column = table["columns"].index("device_s")
    by_trial = {row[0]: row[column] for row in table["data"]}
    assert by_trial == {n: r.device_s for n, r in stored.items()}


def test_the_mlflow_study_run_shows_the_same_cost_live_and_rebuilt(
    study: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, printed = study
    status_cost = json.loads(cli(root, capsys, "status", STUDY, "--json"))["cost"]
    line = cost_line(printed)[0]
    _assert_mlflow_shows(mlflow_uri(root), root, status_cost, line)
    with pytest.raises(SystemExit) as exited:
        main(["sync-mlflow", STUDY, "--storage", storage(root), "--mlflow-uri", mlflow_uri(root, "rebuilt")])
    assert int(exited.value.code or 0) == 0, capsys.readouterr().err
    _assert_mlflow_shows(mlflow_uri(root, "rebuilt"), root, status_cost, line)


def test_the_service_views_show_the_same_cost(study: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    from tuner.fleet.study_views import study_list, study_summary, trial_page
    from tuner.storage.opening import open_storage

    root, _ = study
    status_cost = json.loads(cli(root, capsys, "status", STUDY, "--json"))["cost"]
    loaded = optuna.load_study(study_name=STUDY, storage=storage(root))
    summary = study_summary(loaded).cost
    assert summary.model_dump() == {**{k: status_cost[k] for k in summary.model_dump()}}
    (entry,) = study_list(open_storage(storage(root), create=False, read_only=True)).studies
    assert entry.used_device_h == status_cost["used_device_h"] and entry.unit == "CPU-h"
    page = trial_page(loaded, 0, 100)
    assert {t.number: t.device_s for t in page.trials} == {r.number: r.device_s for r in records(root)}


def test_the_export_says_what_finding_the_setting_cost_and_check_accepts_it(
    study: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from tuner.ship.config_schema import load_config

    root, _ = study
    status_cost = json.loads(cli(root, capsys, "status", STUDY, "--json"))["cost"]
    target = root / "exported.yaml"
    cli(root, capsys, "export", STUDY, "--output", str(target))
    document = yaml.safe_load(target.read_text())
    cost = document["provenance"]["cost"]
    for key in (
        "used_device_h",
        "wasted_device_h",
        "avoided_device_h",
        "recorded_device_h",
        "used_trials",
        "wasted_trials",
        "avoided_trials",
        "avoided_estimate",
    ):
        assert cost[key] == status_cost[key], key
    chosen = next(r for r in records(root) if r.number == document["provenance"]["trial"])
    assert cost["trial_device_s"] == chosen.device_s and cost["unit"] == "CPU-h" and cost["device"] == "cpu"
    assert cost["runs"] == expected(root)["runs"]
    assert cost["recorded_device_s"] == pytest.approx(expected(root)["recorded_s"], abs=1e-3)
    assert load_config(target).provenance.cost is not None, "the schema holds it"
    best = yaml.safe_load((root / STUDY / "best.yaml").read_text())["provenance"]["cost"]
    assert best["recorded_device_s"] == cost["recorded_device_s"], "tuner run's own export says the same"
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "check",
            str(target),
            "--rounds",
            "1",
            "--max-rounds",
            "1",
            "--home",
            str(root),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""},
    )
    assert checked.returncode in (0, 1) and "error:" not in checked.stderr, checked.stderr[-2000:]
    assert "speed-up" in checked.stdout, "tuner check read the export and re-measured it"
