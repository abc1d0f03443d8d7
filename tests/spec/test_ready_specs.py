"""The ready specs (live_avatar, wan_t2v, wan_s2v and their one-GPU variants, av_llm, video_gen) validate,
render real command lines, and the Wan specs run end to end against the Wan stand-in. av_llm and video_gen
run as tiny CPU variants elsewhere (tests/cli/test_shipped_specs_run.py names the test that runs each spec)."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner
from tuner.ship.invocation import render_invocation
from tuner.spec.loading import load_spec, parse_spec
from tuner.spec.models import IntParameter
from tuner.spec.quality.cases import request_input_fields
from tuner.spec.space import resolve

ROOT = Path(__file__).resolve().parents[2]
READY = ["live_avatar", "wan_t2v", "wan_s2v", "wan_t2v_1gpu", "wan_s2v_1gpu", "av_llm", "video_gen"]


@pytest.mark.parametrize("name", READY)
def test_ready_spec_validates_with_the_cli(name: str) -> None:
    """The file is valid everywhere (--spec-only); on this host validate says what a run would."""
    from tuner.gpu import list_gpus

    done = subprocess.run(
        [sys.executable, "-m", "tuner", "validate", "--spec-only", f"search_spaces/{name}.yaml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "proposals: tpe, a spread start, then by predicted gain" in " ".join(done.stdout.split()), (
        "validate says what will propose: the ready specs name tpe and get the predicted gain by default"
    )
    here = subprocess.run(
        [sys.executable, "-m", "tuner", "validate", f"search_spaces/{name}.yaml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    if list_gpus():
        assert here.returncode == 0, here.stderr
    else:  # these specs pin device: cuda; without a GPU a run could not start, and validate says so
        assert here.returncode == 2 and "workload.device" in here.stderr and "device: auto" in here.stderr, here.stderr
    spec = load_spec(ROOT / "search_spaces" / f"{name}.yaml")
    assert "/path/to/" in yaml.safe_dump(spec.inputs) + yaml.safe_dump(spec.workload.options), (
        "a ready spec says where the user's checkout / weights go"
    )


def test_live_avatar_renders_its_real_flags() -> None:
    spec = load_spec(ROOT / "search_spaces" / "live_avatar.yaml")
    assert spec.reference is not None
    candidate, problem = resolve(spec, spec.reference)
    assert candidate is not None, problem
    argv = render_invocation(spec, candidate.settings)["argv"]
    assert argv[:4] == [
        "torchrun",
        "--standalone",
        "--nproc_per_node=1",
        "/path/to/LiveAvatar/minimal_inference/s2v_streaming_interact.py",
    ]
    flags = dict(zip(argv, argv[1:]))
    assert flags["--size"] == "720*400" and flags["--infer_frames"] == "48" and flags["--sample_steps"] == "4"
    assert flags["--num_clip"] == str(-(-10 * 25 // 48)), "num_clip covers the audio at 25 fps"
    assert "--enable_online_decode" in argv and "--fp8" not in argv and "--offload_kv_cache" not in argv
    assert flags["--offload_model"] == "False"
    sizes = spec.parameters["size"]
    assert {"720*400", "704*384", "688*368", "384*256"} <= set(sizes.choices)  # type: ignore[union-attr]
    assert spec.parameters["sample_steps"].high == 4  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["wan_t2v", "wan_s2v"])
def test_wan_frame_num_is_4n_plus_1_and_ulysses_divides_40(name: str) -> None:
    spec = load_spec(ROOT / "search_spaces" / f"{name}.yaml")
    frames = spec.parameters["frame_num"]
    assert isinstance(frames, IntParameter)
    values = range(frames.low, frames.high + 1, frames.step)
    assert all(v % 4 == 1 for v in values)
    assert spec.baseline is not None
    for ulysses in (1, 2, 3, 4):
        candidate, problem = resolve(spec, {**spec.baseline, "ulysses_size": ulysses})
        assert (candidate is not None) == (40 % ulysses == 0), (ulysses, problem)
    candidate, _ = resolve(spec, {**spec.baseline, "ulysses_size": 2, "t5_cpu": False})
    assert candidate is not None
    argv = render_invocation(spec, candidate.settings)["argv"]
    assert "--nproc_per_node=2" in argv and "--dit_fsdp" in argv and "--t5_fsdp" in argv and "--t5_cpu" not in argv


def _wav(path: Path, seconds: float) -> Path:
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(16000)
        handle.writeframes((np.sin(np.arange(int(16000 * seconds)) / 9.0) * 8000).astype(np.int16).tobytes())
    return path


def _standin_spec(name: str, tmp_path: Path) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "search_spaces" / f"{name}.yaml").read_text())
    argv = data["workload"]["command"]["argv"]
    argv[argv.index("{checkout}/generate.py")] = str(ROOT / "standins" / "wan_generate_standin.py")
    argv[0:1] = [sys.executable, str(ROOT / "standins" / "torchrun_standin.py")]
    argv[argv.index("out.mp4")] = "out.npz"
    data["workload"]["command"]["outputs"] = {"video": "out.npz"}
    data["workload"].update(device="cpu", timeout_s=120)
    data["inputs"].update(checkout=str(tmp_path), ckpt_dir=str(tmp_path))
    if "audio" in data["inputs"]:
        data["inputs"].update(audio=str(_wav(tmp_path / "talk.wav", 5.0)), image=str(tmp_path / "face.jpg"))
    data["objectives"] = [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "psnr_db", "direction": "maximize"},
    ]
    data["constraints"], data["report"] = [], []
    return data


@pytest.mark.parametrize("name", ["wan_t2v", "wan_s2v"])
def test_wan_spec_runs_against_the_standin(name: str, tmp_path: Path) -> None:
    spec = parse_spec(yaml.safe_dump(_standin_spec(name, tmp_path)), f"{name}-standin")
    assert spec.baseline is not None
    runner = SubprocessRunner()
    try:
        for ulysses in (1, 2):
            candidate, problem = resolve(
                spec,
                {
                    **spec.baseline,
                    "ulysses_size": ulysses,
                    "frame_num": 5 if name == "wan_s2v" else 17,
                    "size": "832*480",
                },
            )
            assert candidate is not None, problem
            request = TrialRequest(
                study_name=name,
                trial_number=ulysses,
                workload_class=spec.workload.target,
                settings=candidate.settings,
                **request_input_fields(spec),
                seed=spec.seed,
                device="cpu",
                measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
                timeout_s=120,
                workdir=str(tmp_path / f"trial_{ulysses}"),
                workload_options=spec.workload.options,
            )
            result = runner.run(request, Slot(0, None, 1))
            assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
            assert (
                set(result.per_input) == {"boxing_cats", "coast_car", "rain_portrait"}
                if name == "wan_t2v"
                else {"studio", "street", "calm_room"}
            ), "every prompt of the spec runs"
            assert result.invocation == render_invocation(spec, candidate.settings)  # the first prompt's
    finally:
        runner.close()


@pytest.mark.parametrize("name", ["wan_t2v_1gpu", "wan_s2v_1gpu"])
def test_one_gpu_wan_specs_fit_one_gpu_and_run_against_the_standin(name: str, tmp_path: Path) -> None:
    """A one-GPU host can run these: one GPU per trial, one torchrun process, no sequence parallel flags."""
    spec = parse_spec(yaml.safe_dump(_standin_spec(name, tmp_path)), f"{name}-standin")
    assert load_spec(ROOT / "search_spaces" / f"{name}.yaml").workload.options["gpus"] == 1
    assert spec.baseline is not None and spec.reference is not None
    runner = SubprocessRunner()
    try:
        candidate, problem = resolve(
            spec, {**spec.baseline, "frame_num": 5 if name == "wan_s2v_1gpu" else 17, "size": "832*480"}
        )
        assert candidate is not None, problem
        argv = render_invocation(spec, candidate.settings)["argv"]
        assert "--nproc_per_node=1" in argv and "--ulysses_size" not in argv and "--dit_fsdp" not in argv
        assert "--t5_cpu" in argv and argv[argv.index("--offload_model") + 1] == "True"
        request = TrialRequest(
            study_name=name,
            trial_number=1,
            workload_class=spec.workload.target,
            settings=candidate.settings,
            **request_input_fields(spec),
            seed=spec.seed,
            device="cpu",
            measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
            timeout_s=120,
            workdir=str(tmp_path / "trial"),
            workload_options=spec.workload.options,
        )
        result = runner.run(request, Slot(0, None, 1))
        assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    finally:
        runner.close()
