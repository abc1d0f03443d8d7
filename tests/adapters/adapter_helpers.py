"""Shared bits of the adapter tests: paths, a WAV writer, the stand-in Live Avatar spec."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tuner.testing.audio import write_tone_wav

if TYPE_CHECKING:
    from tuner.results import TrialResult
    from tuner.runner.base import TrialRequest

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "standins"


def write_wav(path: Path, seconds: float, rate: int = 16000) -> Path:
    """A speech-like test tone (16-bit PCM mono): :func:`tuner.testing.audio.write_tone_wav`."""
    return write_tone_wav(path, seconds, rate)


def live_avatar_standin_spec(tmp_path: Path, trials: int = 5) -> dict[str, Any]:
    """The shipped live_avatar.yaml pointed at the stand-ins (torchrun and the s2v script), on the CPU."""
    spec = yaml.safe_load((ROOT / "search_spaces" / "live_avatar.yaml").read_text())
    command = spec["workload"]["command"]
    argv = command["argv"]
    assert argv[0] == "torchrun"
    script = argv.index("{checkout}/minimal_inference/s2v_streaming_interact.py")
    argv[script] = str(STANDINS / "live_avatar_s2v_standin.py")
    argv[0:1] = [sys.executable, str(STANDINS / "torchrun_standin.py")]
    spec["workload"]["device"] = "cpu"
    spec["workload"]["timeout_s"] = 120
    audio = write_wav(tmp_path / "speech with spaces.wav", 2.0)
    spec["inputs"].update(
        checkout=str(tmp_path),
        ckpt_dir=str(tmp_path / "ckpt"),
        audio=str(audio),
        audio_seconds=2.0,
        prompt="a 'quoted' prompt; with $(shell) characters",
    )
    spec["name"] = "live_avatar"
    spec["objectives"] = [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "psnr_db", "direction": "maximize"},
    ]
    spec["constraints"] = []
    spec["report"] = ["ssim"]
    spec["budget"] = {"trials": trials}
    spec["sampler"] = {"name": "random"}
    return spec


def run_on_fresh_worker(request: TrialRequest) -> TrialResult:
    """Run one trial request on a real SubprocessRunner (slot 0, CPU) and close it."""
    from tuner.runner.base import Slot
    from tuner.runner.subprocess import SubprocessRunner

    runner = SubprocessRunner()
    try:
        return runner.run(request, Slot(0, None, 1))
    finally:
        runner.close()
