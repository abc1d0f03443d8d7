"""Every spec in ``search_spaces/`` is run by a test: a real ``tuner run``, as shipped or as a tiny CPU variant.

:data:`RUN_BY` names the test that runs each shipped spec. The ones no other test runs are run here,
two trials each (the reference and the baseline) through ``tuner run`` in a child process, offline:

* ``avqa_demo`` -- as shipped (the built-in AVQA model runs on the CPU);
* ``av_omni`` -- its factory, kwargs, inputs keys and knobs, with the ``tiny`` thinker preset on the CPU
  instead of the 7B one on a GPU, a small synthetic clip, and each knob pinned to a cheap value;
* ``wan_t2v_diffusers`` -- its factory and knobs with the ``tiny`` Wan preset on the CPU, the ``resolution``
  knob mapped to small frames (480p / 720p would take minutes per step on a CPU);
* ``video_gen`` -- its factory reading a LOCAL diffusers directory (``model_path``), here the tiny Wan
  pipeline saved by the test, at small frame sizes.

What a variant changes is written next to it; the rest -- workload block, rules, objectives,
constraints, report, export rule -- is the shipped file's. About 20 s each on an idle 2-core machine.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from offline_model_study import run_tuner

ROOT = Path(__file__).resolve().parents[2]

RUN_BY: dict[str, str] = {
    "avatar_demo": "tests/cli/test_demo_study.py",
    "avatar_demo_robust": "tests/cli/test_shipped_specs_run.py",
    "avqa_demo": "tests/cli/test_shipped_specs_run.py",
    "av_llm": "tests/adapters/test_transformers_av_llm.py",
    "av_omni": "tests/cli/test_shipped_specs_run.py",
    "av_omni_tiny_cpu": "tests/cli/test_omni_tiny_study.py",
    "live_avatar": "tests/adapters/test_command.py",
    "video_gen": "tests/cli/test_shipped_specs_run.py",
    "wan_s2v": "tests/spec/test_ready_specs.py",
    "wan_s2v_1gpu": "tests/spec/test_ready_specs.py",
    "wan_t2v": "tests/spec/test_ready_specs.py",
    "wan_t2v_1gpu": "tests/spec/test_ready_specs.py",
    "wan_t2v_diffusers": "tests/cli/test_shipped_specs_run.py",
    "wan_tiny_cpu": "tests/cli/test_wan_tiny_study.py",
}
"""Shipped spec -> the test file that runs it end to end (as shipped, against a stand-in, or a tiny variant)."""

ONE_REPEAT = {"warmup": 0, "min_repeats": 1, "max_repeats": 1}


def test_every_shipped_spec_is_run_by_a_named_test() -> None:
    shipped = sorted(path.stem for path in (ROOT / "search_spaces").glob("*.yaml"))
    assert shipped == sorted(RUN_BY), "a new spec needs a test that runs it (and a row here)"
    for name, test in RUN_BY.items():
        text = (ROOT / test).read_text()
        assert f"{name}.yaml" in text or f'"{name}"' in text, f"{test} does not name {name}"


def pinned(spec: dict[str, Any], reference: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with every knob pinned to its reference / baseline value (categorical, one or two choices)."""
    assert set(reference) == set(baseline) == set(spec["parameters"]), "every shipped knob is set"
    spec["parameters"] = {
        name: {"type": "categorical", "choices": [value] if baseline[name] == value else [value, baseline[name]]}
        for name, value in reference.items()
    }
    spec["reference"], spec["baseline"] = reference, baseline
    spec["measurement"] = ONE_REPEAT
    return spec


def av_omni(spec: dict[str, Any], home: Path) -> dict[str, Any]:
    """The ``tiny`` thinker on the CPU (random weights, as shipped), a 2 s 168 x 224 synthetic clip."""
    assert spec["workload"]["python"]["kwargs"]["weights"] == "random"
    spec["workload"].update(device="cpu", timeout_s=300, torch_threads=1)
    spec["workload"]["python"]["kwargs"].update(architecture="tiny", device="cpu")
    spec["inputs"].update(video_seconds=2.0, video_height=168, video_width=224, min_pixels=3136, prompt_tokens=16)
    reference = {
        "video_fps": 2.0,
        "max_frames": 16,
        "max_pixels": 100352,
        "audio_seconds": 10.0,
        "max_new_tokens": 32,
        "num_beams": 1,
        "use_cache": True,
        "batch_size": 1,
        "attn_implementation": "sdpa",
        "precision": "bf16",
    }
    return pinned(spec, reference, {**reference, "video_fps": 1.0})


def wan_t2v_diffusers(spec: dict[str, Any], home: Path) -> dict[str, Any]:
    """The ``tiny`` Wan preset on the CPU (random weights, as shipped); 480p / 720p mapped to 48 x 80 / 64 x 112."""
    assert spec["workload"]["python"]["kwargs"]["weights"] == "random"
    spec["workload"].update(device="cpu", timeout_s=300, torch_threads=1)
    spec["workload"]["python"]["kwargs"].update(architecture="tiny", device="cpu")
    spec["derived"] = {"height": "48 if resolution == '480p' else 64", "width": "80 if resolution == '480p' else 112"}
    reference = {
        "num_frames": 17,
        "resolution": "480p",
        "num_inference_steps": 15,
        "guidance_scale": 3.0,
        "flow_shift": 3.0,
        "scheduler": "unipc",
        "cache": "none",
        "cache_threshold": 0.1,
        "attention_backend": "native",
        "vae_tiling": False,
        "offload": "none",
        "compile": "none",
        "batch_size": 1,
        "precision": "bf16",
    }
    return pinned(spec, reference, {**reference, "num_inference_steps": 10})


def video_gen(spec: dict[str, Any], home: Path) -> dict[str, Any]:
    """``model_path``: the tiny Wan pipeline saved as a diffusers directory; 48 x 80 frames on the CPU."""
    from tuner.adapters.factories.diffusers_video import make_video_pipeline

    weights = home / "tiny-wan-diffusers"
    model = make_video_pipeline(weights="random", architecture="tiny", device="cpu", seed=0)
    model.load({"precision": "fp32"})
    model.pipe.save_pretrained(weights)
    spec["workload"].update(device="cpu", timeout_s=300, torch_threads=1)
    spec["workload"]["python"]["kwargs"].update(model_path=str(weights), device="cpu")
    reference = {
        "num_frames": 17,
        "height": 48,
        "width": 80,
        "num_inference_steps": 15,
        "guidance_scale": 3.0,
        "vae_tiling": False,
        "cpu_offload": False,
        "compile": False,
        "batch_size": 1,
        "precision": "bf16",
    }
    return pinned(spec, reference, {**reference, "num_inference_steps": 10})


def as_shipped(spec: dict[str, Any], home: Path) -> dict[str, Any]:
    return spec


def avatar_demo_robust(spec: dict[str, Any], home: Path) -> dict[str, Any]:
    """Its three clips as shipped, each 1 s of speech and measured once (the shipped 3 s and repeats: minutes)."""
    spec["inputs"]["audio_seconds"] = 1.0
    spec["measurement"] = ONE_REPEAT
    return spec


VARIANTS: dict[str, Callable[[dict[str, Any], Path], dict[str, Any]]] = {
    "avqa_demo": as_shipped,
    "av_omni": av_omni,
    "avatar_demo_robust": avatar_demo_robust,
    "wan_t2v_diffusers": wan_t2v_diffusers,
    "video_gen": video_gen,
}


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 20 s each on an idle 2-core machine; generous for a loaded one
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_spec_runs_its_reference_and_baseline(name: str, tmp_path: Path) -> None:
    if name in ("wan_t2v_diffusers", "video_gen"):
        pytest.importorskip("diffusers")
    spec = VARIANTS[name](yaml.safe_load((ROOT / "search_spaces" / f"{name}.yaml").read_text()), tmp_path)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    run_tuner("run", str(path), "--study-name", "s", "--trials", "2", "--wall-time", "0", "--no-mlflow", cwd=tmp_path)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    measured = [t for t in study.trials if t.user_attrs.get("measured")]
    assert sorted(t.user_attrs["role"] for t in measured) == ["baseline", "reference"]
    assert [(t.user_attrs["outcome"], t.user_attrs.get("reason")) for t in measured] == [("OK", None)] * 2
    objectives = [objective["metric"] for objective in spec["objectives"]]
    for trial in measured:
        values = {metric: trial.user_attrs["metrics"].get(metric, {}).get("value") for metric in objectives}
        assert all(isinstance(value, float) for value in values.values()), (trial.number, values)
        if spec.get("cases"):  # every input measured, each with its own figures
            assert len(trial.user_attrs["per_input"]) == len(spec["cases"]), trial.number
