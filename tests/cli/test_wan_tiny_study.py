"""A real tuner study of Wan through diffusers: ``search_spaces/wan_tiny_cpu.yaml`` on a grid, then its export
run from the YAML alone.

The shipped tiny spec (diffusers' real WanPipeline, tiny architecture, seeded random weights, one torch
thread, warm worker) with its space narrowed to a grid over ``num_inference_steps`` x ``precision`` (every
other knob fixed), so every setting of steps is measured at fixed other knobs in both precisions, and the
precision switches reload the model in the warm worker. How latency follows the steps is a benchmark's
question (``bench/models_cpu.py``), not this test's: its verdicts count and compare outputs, never clocks. Then ``tuner export`` and
``docs/examples/run_exported.py`` on the export in a fresh process: its video must equal the trial's
(the reference's whole saved output; another trial's contact-sheet frames). About a minute on an idle
2-core machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml
from offline_model_study import run_exported, run_tuner
from PIL import Image

pytest.importorskip("diffusers")

from tuner.runner.measure.samples import contact_sheet, first_item_frames  # noqa: E402
from tuner.storage.records import trial_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "search_spaces" / "wan_tiny_cpu.yaml"
STEPS = [1, 2, 4, 7, 11, 16]
FIXED = {
    "num_frames": 9,
    "height": 64,
    "width": 64,
    "guidance_scale": 5.0,
    "scheduler": "unipc",
    "cache": "none",
    "cache_threshold": 0.1,
    "vae_tiling": False,
    "batch_size": 1,
    "attention_backend": "native",
}


def grid_spec() -> dict[str, Any]:
    """The shipped spec, its space a grid: steps x precision, the rest fixed."""
    spec = yaml.safe_load(SPEC.read_text())
    assert spec["workload"]["python"]["kwargs"]["weights"] == "random" and "RANDOM" in spec["description"]
    spec["parameters"] = {name: {"type": "categorical", "choices": [value]} for name, value in FIXED.items()}
    spec["parameters"]["num_inference_steps"] = {"type": "categorical", "choices": STEPS}
    spec["parameters"]["precision"] = {"type": "categorical", "choices": ["fp32", "bf16"]}
    spec["reference"] = {**FIXED, "num_inference_steps": 16, "precision": "fp32"}
    spec["baseline"] = {**FIXED, "num_inference_steps": 4, "precision": "bf16"}
    spec["sampler"] = {"name": "grid"}
    spec["budget"] = {"trials": 2 * len(STEPS)}
    spec["measurement"] = {"warmup": 1, "min_repeats": 1, "max_repeats": 1}  # no verdict here reads a clock
    return spec


def value(trial: optuna.trial.FrozenTrial, metric: str) -> Any:
    entry = trial.user_attrs["metrics"].get(metric)
    return entry.get("value") if isinstance(entry, dict) else entry


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, Path]:
    home = tmp_path_factory.mktemp("wan_tiny_study")
    path = home / "wan_tiny_grid.yaml"
    path.write_text(yaml.safe_dump(grid_spec(), sort_keys=False))
    run_tuner("run", str(path), "--study-name", "s", "--wall-time", "0", "--no-mlflow", cwd=home)
    return optuna.load_study(study_name="s", storage=f"sqlite:///{home / 'studies' / 'studies.db'}"), home


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 1 minute on an idle 2-core machine
def test_a_real_wan_study_measures_every_setting_in_one_warm_worker(study: tuple[optuna.Study, Path]) -> None:
    trials, home = study
    measured = [t for t in trials.trials if t.user_attrs.get("measured")]
    assert len(measured) >= 2 * len(STEPS) - 2, [(t.number, t.user_attrs.get("outcome")) for t in trials.trials]
    problems = [
        (t.number, t.user_attrs.get("outcome"), t.user_attrs.get("reason"))
        for t in measured
        if t.user_attrs["outcome"] != "OK"
    ]
    assert problems == []
    settings = {(t.params["num_inference_steps"], t.params["precision"]) for t in measured}
    assert settings == {(steps, precision) for steps in STEPS for precision in ("fp32", "bf16")}, "the whole grid"
    side = trial_records(trials, measured)  # worker_info and runtime are side records (issue 27)
    workers = {side[t.number]["worker_info"]["warm_worker_pid"] for t in measured}
    assert len(workers) == 1, "one warm worker ran them all"
    ran = sorted(measured, key=lambda t: t.datetime_complete)  # run order: a proposal may wait for its precision
    loads = [value(t, "count_adapter_loads") for t in ran]
    assert loads[-1] > loads[0] >= 1 and loads == sorted(loads), "precision changes reloaded the model"
    assert loads[-1] < len(measured), "and only they did"
    for trial in measured:
        assert side[trial.number]["runtime"]["weights_identity"] == "random:tiny:0"
        assert value(trial, "peak_rss_gb") > 0.1, "peak host memory of every trial"
        assert value(trial, "count_steps") == trial.params["num_inference_steps"] and value(trial, "count_frames") == 9
        assert 0 < value(trial, "ssim") <= 1 and value(trial, "psnr_db") > 10, "compared with the reference"
        structure = side[trial.number]["worker_info"]["call_structure"]  # issue 38: the call's cost structure
        assert structure["steps"] == trial.params["num_inference_steps"] and structure["passes_per_step"] == 2
        assert value(trial, "denoise_s") + value(trial, "decode_s") <= value(trial, "model_s") * 1.05
        assert value(trial, "denoise_step_s") > 0 and value(trial, "text_s") >= 0
    shown = run_tuner("show", "s", str(measured[-1].number), cwd=home).stdout
    assert "denoise_step_s" in shown and "decode_s" in shown, "tuner show lists the structure's metrics"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quality_approaches_the_reference_as_steps_grow(study: tuple[optuna.Study, Path]) -> None:
    trials, _ = study
    measured = [t for t in trials.trials if t.user_attrs.get("measured")]
    figures: dict[str, str] = {}
    for precision in ("fp32", "bf16"):
        group = sorted(
            (t for t in measured if t.params["precision"] == precision), key=lambda t: t.params["num_inference_steps"]
        )
        steps = [t.params["num_inference_steps"] for t in group]
        psnr = [value(t, "psnr_db") for t in group]
        figures[precision] = " ".join(f"{s}:{p:.1f}dB" for s, p in zip(steps, psnr))
        assert [value(t, "count_steps") for t in group] == steps, figures
        assert psnr[-2] > psnr[0], figures  # 11 steps agree with the 16-step reference better than 1 step
    reference = next(t for t in measured if t.user_attrs["role"] == "reference")
    assert value(reference, "psnr_db") == 100.0, "the reference is its own reference"
    print(figures)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_export_runs_from_the_yaml_alone_and_gives_the_trials_video(study: tuple[optuna.Study, Path]) -> None:
    trials, home = study
    reference = next(t for t in trials.trials if t.user_attrs.get("role") == "reference")
    for choice in ((), ("--trial", str(reference.number))):
        config = home / f"export{'_'.join(choice)}.yaml"
        run_tuner("export", "s", *choice, "-o", str(config), cwd=home)
        document = yaml.safe_load(config.read_text())
        invocation = document["invocation"]
        assert invocation["interface"] == "factory" and invocation["factory_kwargs"]["weights"] == "random"
        assert invocation["load_params"] == {"precision": document["params"]["precision"]}, "the backend switches"
        output = home / f"{config.stem}.npz"
        run_exported(config, output, home, document["env"]["OMP_NUM_THREADS"])
        with np.load(output, allow_pickle=True) as saved:
            video = saved["video"]
        trial = next(t for t in trials.trials if t.number == document["provenance"]["trial"])
        assert video.shape == (1, 9, 64, 64, 3) and video.dtype == np.uint8
        if trial.user_attrs["role"] == "reference":
            with np.load(home / "studies" / "s" / "reference_output.npz", allow_pickle=True) as saved:
                assert np.array_equal(video, saved["video"]), "the whole output equals the reference trial's"
        sheet = np.asarray(Image.open(trial.user_attrs["samples"]["contact_sheet.png"]).convert("RGB"))
        assert np.array_equal(contact_sheet(first_item_frames(video)), sheet), "the frames equal the trial's sample"
