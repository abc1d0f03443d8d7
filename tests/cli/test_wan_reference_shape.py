"""Quality compares like with like (issue 39): a trial is scored against the reference at its own shape.

A tiny Wan study through diffusers' real WanPipeline (random weights, CPU) whose space is the frame count
only (5 or 17 frames, every other knob fixed at the reference's). The baseline is the reference setting at
5 frames. Before: the baseline's 5-frame video was compared with the first 5 frames of the 17-frame
reference (another video: other latent noise, other motion) and scored 24.27 dB PSNR. Now the spec says
``reference_shape: {per: [num_frames]}``; the baseline is the reference setting at its own shape, so it is
that shape's reference and agrees with itself (100 dB), and ``tuner show`` names the shape each trial was
compared with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from offline_model_study import run_tuner

pytest.importorskip("diffusers")

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "search_spaces" / "wan_tiny_cpu.yaml"
FIXED = {
    "height": 48,
    "width": 48,
    "num_inference_steps": 3,
    "guidance_scale": 5.0,
    "scheduler": "unipc",
    "cache": "none",
    "cache_threshold": 0.1,
    "vae_tiling": False,
    "batch_size": 1,
    "precision": "fp32",
    "attention_backend": "native",
}


def frames_spec(per: bool) -> dict[str, Any]:
    """The shipped tiny spec, its space the frame count only; the baseline: the reference at 5 frames."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["parameters"] = {name: {"type": "categorical", "choices": [value]} for name, value in FIXED.items()}
    spec["parameters"]["num_frames"] = {"type": "categorical", "choices": [5, 17]}
    spec["reference"] = {**FIXED, "num_frames": 17}
    spec["baseline"] = {**FIXED, "num_frames": 5}
    spec.pop("reference_shape", None)
    if per:
        spec["reference_shape"] = {"per": ["num_frames"]}
    spec["sampler"] = {"name": "grid"}
    spec["budget"] = {"trials": 2}
    spec["measurement"] = {"warmup": 0, "min_repeats": 1, "max_repeats": 1}  # no verdict here reads a clock
    spec["report"] = []
    return spec


def psnr(trial: optuna.trial.FrozenTrial) -> Any:
    entry = trial.user_attrs["metrics"].get("psnr_db")
    return entry.get("value") if isinstance(entry, dict) else entry


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_trial_is_scored_against_the_reference_at_its_own_frame_count(tmp_path: Path) -> None:
    path = tmp_path / "wan_frames.yaml"
    path.write_text(yaml.safe_dump(frames_spec(per=True), sort_keys=False))
    run_tuner("run", str(path), "--study-name", "s", "--wall-time", "0", "--no-mlflow", cwd=tmp_path)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    by_role = {t.user_attrs.get("role"): t for t in study.trials if t.user_attrs.get("measured")}
    reference, baseline = by_role["reference"], by_role["baseline"]
    assert reference.user_attrs["outcome"] == "OK" and baseline.user_attrs["outcome"] == "OK"
    assert baseline.params["num_frames"] == 5 and reference.params["num_frames"] == 17
    assert psnr(baseline) == pytest.approx(100.0), "the reference setting at 5 frames is its own shape's reference"
    shown = json.loads(run_tuner("show", "s", str(baseline.number), "--json", cwd=tmp_path).stdout)
    assert shown["compared_with"]["shape"] == {"num_frames": 5}
    assert shown["compared_with"]["trial"] == baseline.number
    text = run_tuner("show", "s", str(reference.number), cwd=tmp_path).stdout
    assert "compared with: the reference at num_frames=17" in text
