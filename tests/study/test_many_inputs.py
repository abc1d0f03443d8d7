"""Many inputs per trial (issue 39, item 2): a spec's ``cases`` make every measured trial run each input, its
quality compared per input with the same input's reference; ``psnr_db:worst`` sees a cliff that the mean hides.

The SIMULATED fake workload (:mod:`tuner.workloads.fake`) adds noise to its video; one input, ``fragile``, gets
much more in a band of the ``noise`` knob (a simulated quality cliff). ``count_cost_ms`` is the fake's nominal
cost, a deterministic stand-in for latency, so the fronts compared here do not depend on a clock.

Settings (noise -> cost ms): 0 -> 11 (the reference), 2 -> 9, 6 -> 5 (inside fragile's cliff), 10 -> 1. With the
mean PSNR the noise-6 setting is on the front (its mean, 29.3 dB, beats noise 10's 28.3 dB); with the worst
input's PSNR it is not (22.5 dB on fragile), so the two objectives give two fronts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.pareto import front_trials
from tuner.results import Metric
from tuner.runner.measure.inputs import cliff_lines, combine_inputs, load_outputs, percentile_of_badness, save_outputs
from tuner.spec.loading import parse_spec
from tuner.spec.models import SpecError
from tuner.spec.quality.cases import input_sets
from tuner.testing.noop_spec import CASES, cases_spec
from tuner.workloads.base import WorkloadOutput

SPEC = cases_spec("QUALITY")


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def run_study(tmp_path: Path, quality: str) -> tuple[optuna.Study, subprocess.CompletedProcess[str]]:
    spec = tmp_path / f"{quality.replace(':', '_')}.yaml"
    spec.write_text(SPEC.replace("QUALITY", quality))
    name = f"s_{quality.replace(':', '_')}"
    done = tuner("run", str(spec), "--study-name", name, "--no-mlflow", cwd=tmp_path)
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    return study, done


def mlflow_run_of(tmp_path: Path, study_name: str, number: int) -> Any:
    """Trial ``number``'s child run, once the study is synced into a real MLflow store (SQLite)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tuner("sync-mlflow", study_name, "--mlflow-uri", uri, cwd=tmp_path)
    client = MlflowClient(uri)
    runs = [
        run
        for experiment in client.search_experiments()
        for run in client.search_runs([experiment.experiment_id])
        if run.data.tags.get("tuner.trial_number") == str(number)
    ]
    assert len(runs) == 1
    return runs[0]


def noise_on_front(study: optuna.Study) -> set[int]:
    return {t.params["noise"] for t in front_trials(study.trials, ["minimize", "maximize"])}


def by_noise(study: optuna.Study) -> dict[int, Any]:
    return {
        t.params["noise"]: t
        for t in study.trials
        if t.user_attrs.get("measured") and t.user_attrs.get("duplicate_of") is None
    }


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_three_inputs_report_per_input_quality_and_the_worst_case_changes_the_front(tmp_path: Path) -> None:
    mean_study, said = run_study(tmp_path, "psnr_db")
    assert "every measured trial runs 3 inputs (calm, busy, fragile)" in said.stdout + said.stderr
    trials = by_noise(mean_study)
    assert set(trials) == {0, 2, 6, 10}
    cliff = trials[6].user_attrs
    per_input = cliff["per_input"]
    assert set(per_input) == {"calm", "busy", "fragile"}
    quality = {case: figures["psnr_db"]["value"] for case, figures in per_input.items()}
    assert quality["calm"] == pytest.approx(quality["busy"])  # the same noise on the same scene
    assert quality["fragile"] < quality["calm"] - 5  # inside its cliff
    metrics = cliff["metrics"]
    assert metrics["psnr_db"]["value"] == pytest.approx(sum(quality.values()) / 3)
    assert metrics["psnr_db:worst"]["value"] == pytest.approx(quality["fragile"])
    assert quality["fragile"] < metrics["psnr_db:p90"]["value"] < metrics["psnr_db"]["value"]
    assert len(cliff["cliffs"]) == 1 and cliff["cliffs"][0].startswith("input fragile: psnr_db")
    reference = trials[0].user_attrs
    assert all(figures["psnr_db"]["value"] == pytest.approx(100.0) for figures in reference["per_input"].values())
    assert "cliffs" not in trials[10].user_attrs  # every input alike outside the cliff
    shown = tuner("show", "s_psnr_db", str(trials[6].number), cwd=tmp_path).stdout
    assert "per input (3 inputs" in shown and "input fragile: psnr_db" in shown
    as_json = json.loads(tuner("show", "s_psnr_db", str(trials[6].number), "--json", cwd=tmp_path).stdout)
    assert set(as_json["per_input"]) == {"calm", "busy", "fragile"}
    logged = mlflow_run_of(tmp_path, "s_psnr_db", trials[6].number)
    assert logged.data.metrics["input.fragile.psnr_db"] == pytest.approx(quality["fragile"])
    assert logged.data.metrics["psnr_db.worst"] == pytest.approx(quality["fragile"])
    assert logged.data.tags["tuner.cliffs"].startswith("input fragile: psnr_db")

    worst_study, _ = run_study(tmp_path, "psnr_db:worst")
    assert noise_on_front(mean_study) == {0, 2, 6, 10}
    assert noise_on_front(worst_study) == {0, 2, 10}, "the worst case drops the setting that ruins one input"


def test_cases_give_each_input_its_values_over_the_shared_ones() -> None:
    spec = parse_spec(SPEC.replace("QUALITY", "psnr_db:worst"))
    sets = input_sets(spec)
    assert [s.name for s in sets] == ["calm", "busy", "fragile"]
    assert sets[0].inputs == {"note": "simulated"}
    assert sets[2].inputs == {"note": "simulated", "cliff_low": 5, "cliff_high": 7, "cliff_noise": 14}
    assert spec.measured_metrics >= {"psnr_db", "count_cost_ms"} and "psnr_db:worst" not in spec.measured_metrics


def test_a_folder_gives_one_case_per_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clips = tmp_path / "clips"
    clips.mkdir()
    for name in ("b.wav", "a.wav", "notes.txt"):
        (clips / name).write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    text = SPEC.replace("QUALITY", "psnr_db").replace(CASES, "cases: {folder: clips, as: audio, glob: '*.wav'}\n")
    sets = input_sets(parse_spec(text))
    assert [(s.name, s.inputs["audio"]) for s in sets] == [("a", "clips/a.wav"), ("b", "clips/b.wav")]
    with pytest.raises(ValueError, match=r"cases.folder: no file in empty matches"):
        (tmp_path / "empty").mkdir()
        input_sets(parse_spec(text.replace("folder: clips", "folder: empty")))


@pytest.mark.parametrize(
    "change, problem",
    [
        ("  - {name: calm}", r"cases: the name 'busy' is used twice|cases.0.name"),
        ("cliff_margins: {psnr_db: 3}", r"cliff_margins.psnr_db: the margin must be > 0"),
        ("report: [psnr_db, psnr_db:worst, psnr_db:p90]", r"report.0: unknown metric 'psnr_db:p100'"),
        ("  - {name: calm}", r"cases.0: \['noise'\] are parameters or derived values, not inputs"),
    ],
)
def test_a_wrong_cases_block_is_refused_with_its_key(change: str, problem: str) -> None:
    replacement = {
        r"cases: the name 'busy' is used twice|cases.0.name": "  - {name: busy}",
        r"cliff_margins.psnr_db: the margin must be > 0": "cliff_margins: {psnr_db: 0}",
        r"report.0: unknown metric 'psnr_db:p100'": "report: [psnr_db:p100]",
        r"cases.0: \['noise'\] are parameters or derived values, not inputs": "  - {name: calm, noise: 3}",
    }[problem]
    with pytest.raises(SpecError, match=problem):
        parse_spec(SPEC.replace("QUALITY", "psnr_db").replace(change, replacement))


def metric(name: str, value: float | None, direction: str = "maximize", reason: str | None = None) -> Metric:
    return Metric(name, value, "dB", direction, reason)  # type: ignore[arg-type]


def test_figures_over_inputs_mean_worst_percentile_and_peaks() -> None:
    per_input = {
        "a": {
            "psnr_db": metric("psnr_db", 30.0),
            "peak_rss_gb": metric("peak_rss_gb", 1.0, "minimize"),
            "lpips": metric("lpips", 0.1, "minimize"),
        },
        "b": {
            "psnr_db": metric("psnr_db", 20.0),
            "peak_rss_gb": metric("peak_rss_gb", 3.0, "minimize"),
            "lpips": metric("lpips", 0.3, "minimize"),
        },
    }
    combined = combine_inputs(per_input, ["psnr_db:worst", "lpips:worst", "lpips:p90", "psnr_db:p90", "gone:worst"])
    assert combined["psnr_db"].value == 25.0 and combined["peak_rss_gb"].value == 3.0  # a peak: the maximum
    assert combined["psnr_db:worst"].value == 20.0 and combined["lpips:worst"].value == 0.3
    assert combined["lpips:p90"].value == pytest.approx(0.28)  # 90 % of inputs at least this good
    assert combined["psnr_db:p90"].value == pytest.approx(21.0)
    assert "gone:worst" not in combined
    assert percentile_of_badness([1.0, 2.0, 3.0], 50, "minimize") == 2.0


def test_a_figure_over_inputs_is_unavailable_when_one_input_is() -> None:
    per_input = {
        "a": {"psnr_db": metric("psnr_db", 30.0)},
        "b": {"psnr_db": metric("psnr_db", None, reason="frames differ")},
    }
    combined = combine_inputs(per_input, ["psnr_db:worst"])
    assert combined["psnr_db"].value is None and combined["psnr_db"].reason == "input b: frames differ"
    assert combined["psnr_db:worst"].value is None
    alike = {"a": {"x": metric("x", None, reason="no GPU")}, "b": {"x": metric("x", None, reason="no GPU")}}
    assert combine_inputs(alike, [])["x"].reason == "no GPU"


def test_cliffs_name_the_input_past_the_margin() -> None:
    per_input = {
        "a": {"psnr_db": metric("psnr_db", 30.0)},
        "b": {"psnr_db": metric("psnr_db", 30.0)},
        "c": {"psnr_db": metric("psnr_db", 18.0)},
    }
    combined = combine_inputs(per_input, [])
    assert cliff_lines(per_input, combined, {"psnr_db": 3.0}) == [
        "input c: psnr_db 18 dB, 8 worse than the mean 26 (margin 3)"
    ]
    assert cliff_lines(per_input, combined, {"psnr_db": 9.0}) == []


def test_outputs_of_several_inputs_travel_as_one_file(tmp_path: Path) -> None:
    outputs = {"cat": WorkloadOutput(text=["a cat"]), "city": WorkloadOutput(text=["a city"], items=2)}
    save_outputs(outputs, tmp_path / "ref.npz")
    loaded = load_outputs(tmp_path / "ref.npz")
    assert list(loaded) == ["cat", "city"] and loaded["city"].text == ["a city"] and loaded["city"].items == 2
    save_outputs({"": WorkloadOutput(text=["one"])}, tmp_path / "one.npz")
    assert WorkloadOutput.load(tmp_path / "one.npz").text == ["one"]  # one input: the plain format, as before
    assert load_outputs(tmp_path / "one.npz")[""].text == ["one"]
