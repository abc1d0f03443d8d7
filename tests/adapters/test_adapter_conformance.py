"""Every adapter passes the workload conformance suite; a python-adapter study runs warm end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from adapter_helpers import ROOT, STANDINS, write_wav
from test_warm_python import AVQA_INPUTS, AVQA_PARAMS

from tuner.adapters.command import CommandWorkload
from tuner.adapters.http import HttpWorkload
from tuner.adapters.python import PythonAdapterWorkload
from tuner.spec.adapters import CommandSpec, HttpSpec, PythonSpec
from tuner.testing.workload_conformance import check_workload_conformance
from tuner.workloads.base import RunContext


def test_command_adapter_conformance(tmp_path: Path) -> None:
    audio = write_wav(tmp_path / "a.wav", 1.0)
    block = CommandSpec(
        argv=[
            sys.executable,
            str(STANDINS / "live_avatar_s2v_standin.py"),
            "--ckpt_dir",
            "c",
            "--audio",
            "{audio}",
            "--size",
            "{size}",
            "--infer_frames",
            "{infer_frames}",
            "--sample_steps",
            "{sample_steps}",
            "--base_seed",
            "{seed}",
            "--save_file",
            "out.mp4",
        ],
        outputs={"video": "out.mp4"},
    )
    options = {"adapter": "command", **block.model_dump(mode="json")}
    context = RunContext(device="cpu", seed=3, inputs={"audio": str(audio)}, workdir=tmp_path / "w")
    check_workload_conformance(
        lambda: CommandWorkload(options),
        {"size": "384*256", "infer_frames": 12, "sample_steps": 2},
        context,
        invalid_params=[
            {"size": "999*999", "infer_frames": 12, "sample_steps": 2},
            {"size": "384*256", "infer_frames": 12, "sample_steps": 9},
        ],
    )


def test_python_adapter_conformance(tmp_path: Path) -> None:
    block = PythonSpec(
        factory="standins.avqa_factory:make_avqa_model", kwargs={"workdir": str(tmp_path)}, reload_on=["precision"]
    )
    options = {"adapter": "python", **block.model_dump(mode="json")}
    context = RunContext(device="cpu", seed=0, inputs=AVQA_INPUTS, workdir=tmp_path)
    check_workload_conformance(
        lambda: PythonAdapterWorkload(options),
        AVQA_PARAMS,
        context,
        invalid_params=[{**AVQA_PARAMS, "num_beams": 0}, {"video_fps": 2.0}],
    )


def test_http_adapter_conformance(server: str, tmp_path: Path) -> None:
    block = HttpSpec(
        url=server + "/v1/chat/completions",
        prompts="prompts",
        requests=3,
        concurrency=2,
        body={"max_tokens": "{max_tokens}", "temperature": 0},
    )
    options = {"adapter": "http", **block.model_dump(mode="json")}
    context = RunContext(device="cpu", seed=0, inputs={"prompts": ["a b c", "d e"]}, workdir=tmp_path)
    check_workload_conformance(
        lambda: HttpWorkload(options), {"max_tokens": 2}, context, invalid_params=[{"max_tokens": -1}]
    )


def test_python_adapter_study_runs_warm_with_one_load(tmp_path: Path) -> None:
    spec: dict[str, Any] = {
        "name": "avqa_python_adapter",
        "workload": {
            "timeout_s": 300,
            "device": "cpu",
            "torch_threads": 1,
            "python": {
                "factory": "standins.avqa_factory:make_avqa_model",
                "kwargs": {"load_log": str(tmp_path / "loads.txt"), "workdir": str(tmp_path)},
                "reload_on": ["precision"],
            },
        },
        "inputs": {**AVQA_INPUTS},
        "parameters": {
            "max_new_tokens": {"type": "categorical", "choices": [2, 4, 6]},
            "num_beams": {"type": "categorical", "choices": [1, 3]},
            "precision": {"type": "categorical", "choices": ["fp32"]},
        },
        "derived": {
            k: repr(v) if isinstance(v, str) else str(v)
            for k, v in AVQA_PARAMS.items()
            if k not in ("max_new_tokens", "num_beams", "precision")
        },
        "objectives": [
            {"metric": "latency_p50_s", "direction": "minimize"},
            {"metric": "text_exact_match", "direction": "maximize"},
        ],
        "reference": {"max_new_tokens": 6, "num_beams": 3, "precision": "fp32"},
        "baseline": {"max_new_tokens": 6, "num_beams": 1, "precision": "fp32"},
        "measurement": {"warmup": 0, "min_repeats": 1, "max_repeats": 2},
        "budget": {"trials": 5},
        "sampler": {"name": "random"},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "run",
            str(path),
            "--study-name",
            "py",
            "--no-mlflow",
            "--storage",
            storage,
            "--home",
            str(tmp_path / "home"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    import optuna

    trials = [
        t for t in optuna.load_study(study_name="py", storage=storage).get_trials() if t.user_attrs.get("measured")
    ]
    assert len(trials) == 5 and all(t.user_attrs["outcome"] == "OK" for t in trials), [
        t.user_attrs.get("reason") for t in trials
    ]
    assert len((tmp_path / "loads.txt").read_text().splitlines()) == 1, "the warm worker loaded the model once"
    assert all(t.user_attrs["invocation"]["target"] == "standins.avqa_factory:make_avqa_model" for t in trials)
