"""The audio of a command's video output (issue 15): the container's track, else ``audio_from_input``.

The lip-sync proxy needs the output's audio. A program such as Live Avatar writes one mp4 whose
audio track OpenCV drops; :func:`tuner.adapters.media.read_container_audio` decodes it with PyAV.
When the mp4 has no track, the spec may name the input audio the program copies
(``outputs.audio_from_input``); otherwise the lip-sync metrics are unavailable with the reason.
The programs are the Live Avatar stand-in (SIMULATED) writing real H.264 + AAC mp4 files.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from adapter_helpers import ROOT, STANDINS, write_wav
from adapter_helpers import run_on_fresh_worker as run

from tuner.adapters.media import MediaError, is_container, read_audio, read_container_audio
from tuner.results import Outcome, TrialResult
from tuner.runner.base import TrialRequest
from tuner.spec.adapters import CommandSpec
from tuner.spec.loading import parse_spec
from tuner.spec.models import SpecError

MOUTH_BOX = [0.38, 0.55, 0.62, 0.75]  # live_avatar.yaml's box; the stand-in draws its mouth inside it
LIPSYNC = ["lipsync_margin", "lipsync_lag_frames"]


def write_mp4(path: Path, channels: list[np.ndarray] | None, rate: int = 16000, frames: int = 25) -> Path:
    """An mp4 of ``frames`` grey 32 x 32 frames at 25 fps (H.264) with, when given, one AAC track of
    ``channels`` (float32 arrays of equal length: 1 = mono, 2 = stereo) starting at time 0."""
    import av

    with av.open(str(path), "w") as container:
        picture = container.add_stream("libx264", rate=25)
        picture.width, picture.height, picture.pix_fmt = 32, 32, "yuv420p"
        sound = None
        if channels is not None:  # every stream and its layout before the first mux
            sound = container.add_stream("aac", rate=rate)
            sound.layout = "mono" if len(channels) == 1 else "stereo"
        for index in range(frames):
            frame = np.full((32, 32, 3), 8 * index % 256, dtype=np.uint8)
            container.mux(picture.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(picture.encode(None))
        if sound is not None and channels is not None:
            chunk = av.AudioFrame.from_ndarray(
                np.stack(channels).astype(np.float32), format="fltp", layout=sound.layout.name
            )
            chunk.sample_rate, chunk.pts = rate, 0
            container.mux(sound.encode(chunk))
            container.mux(sound.encode(None))
    return path


def standin_request(
    tmp_path: Path, outputs: dict[str, Any], inputs: dict[str, Any], mux_audio: bool = True
) -> TrialRequest:
    """One trial of the Live Avatar stand-in (2 s of audio: 50 frames at 25 fps) asking for the lip-sync metrics."""
    argv: list[Any] = [
        sys.executable,
        str(STANDINS / "live_avatar_s2v_standin.py"),
        "--ckpt_dir",
        "ckpt",
        "--size",
        "384*256",
        "--infer_frames",
        "48",
        "--num_clip",
        "2",
        "--sample_steps",
        "4",
        "--offload_model",
        "False",
        "--audio",
        "{audio}",
        "--save_file",
        "out.mp4",
    ]
    block = CommandSpec(argv=argv, outputs=outputs, env={"STANDIN_MUX_AUDIO": "1" if mux_audio else "0"})
    return TrialRequest(
        study_name="t",
        trial_number=0,
        workload_class="tuner.adapters.command:CommandWorkload",
        settings={},
        inputs={"fps": 25, "mouth_box": MOUTH_BOX, **inputs},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=120,
        workdir=str(tmp_path / "trial"),
        quality_metrics=LIPSYNC,
        workload_options={"adapter": "command", **block.model_dump(mode="json")},
    )


def lipsync_of(result: TrialResult) -> tuple[float | None, float | None, str | None]:
    """(margin, lag in frames, reason) of a finished trial."""
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail)
    margin, lag = result.metrics["lipsync_margin"], result.metrics["lipsync_lag_frames"]
    return margin.value, lag.value, margin.reason


# --- the reader -------------------------------------------------------------------------------


def test_the_audio_track_reads_back_aligned_mixed_to_mono_and_cut_to_its_duration(tmp_path: Path) -> None:
    rate = 16000
    t = np.arange(rate) / rate  # 1 s
    left = (0.6 * np.sin(2 * np.pi * (200 * t + 1400 * t**2))).astype(np.float32)  # a chirp: one alignment
    track = read_container_audio(write_mp4(tmp_path / "stereo.mp4", [left, np.zeros_like(left)]))
    assert track is not None
    samples, got_rate = track
    assert got_rate == rate and samples.dtype == np.float32
    assert len(samples) == rate, "AAC's priming dropped and its last-frame padding cut: exactly 1 s"
    expected = left / 2  # the mean of the channels, as read_audio mixes a WAV
    middle = slice(2000, rate - 2000)
    offsets = range(-400, 401)
    best = max(offsets, key=lambda k: float(np.dot(expected[middle], samples[2000 + k : rate - 2000 + k])))
    assert best == 0, "sample 0 of the track is time 0 of the video"
    assert np.sqrt(np.mean((samples[middle] - expected[middle]) ** 2)) < 0.02
    assert float(np.max(np.abs(samples))) <= 1.0


def test_a_container_without_audio_gives_none_and_garbage_is_refused(tmp_path: Path) -> None:
    assert read_container_audio(write_mp4(tmp_path / "silent.mp4", None)) is None
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"not a media file at all" * 10)
    with pytest.raises(MediaError, match="garbage.mp4"):
        read_container_audio(garbage)
    assert is_container(Path("out.mp4")) and is_container(Path("out.MKV"))
    assert not is_container(Path("out.npz")) and not is_container(Path("out.npy"))


def test_the_standin_mp4_carries_its_input_audio(tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "speech.wav", 2.0)
    block = standin_request(tmp_path, {"video": "out.mp4"}, {"audio": str(wav)})
    result = run(block)
    assert result.outcome is Outcome.OK, result.reason
    track = read_container_audio(tmp_path / "trial" / "run" / "out.mp4")
    assert track is not None
    original, rate = read_audio(wav)
    assert track[1] == rate and len(track[0]) == len(original)
    assert np.corrcoef(track[0], original)[0, 1] > 0.99, "the AAC track is the input audio"


# --- through the command adapter --------------------------------------------------------------


def test_the_mp4_audio_track_gives_the_lipsync_metrics(tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "speech.wav", 2.0)
    margin, lag, reason = lipsync_of(run(standin_request(tmp_path, {"video": "out.mp4"}, {"audio": str(wav)})))
    assert margin is not None and margin > 0.5, reason
    assert lag == 0, "the stand-in opens the mouth with the sound, without lag"


def test_an_mp4_without_audio_and_no_fallback_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "speech.wav", 2.0)
    result = run(standin_request(tmp_path, {"video": "out.mp4"}, {"audio": str(wav)}, mux_audio=False))
    margin, lag, reason = lipsync_of(result)
    assert margin is None and lag is None
    assert reason is not None and reason.startswith(
        "the video output out.mp4 has no audio track, and the spec declares neither outputs.audio"
    ), reason
    assert "outputs.audio_from_input" in reason


def test_audio_from_input_stands_in_for_a_missing_track(tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "speech.wav", 2.0)
    outputs = {"video": "out.mp4", "audio_from_input": "audio"}
    margin, lag, reason = lipsync_of(
        run(standin_request(tmp_path / "a", outputs, {"audio": str(wav)}, mux_audio=False))
    )
    assert margin is not None and margin > 0.5 and lag == 0, reason
    gone = {"video": "out.mp4", "audio_from_input": "voice"}  # the program gets a real file, the fallback none
    request = standin_request(
        tmp_path / "b", gone, {"audio": str(wav), "voice": str(tmp_path / "gone.wav")}, mux_audio=False
    )
    margin, _, reason = lipsync_of(run(request))
    assert margin is None and reason is not None
    assert (
        "out.mp4 has no audio track, and the audio file of input 'voice' (outputs.audio_from_input) cannot be read"
        in reason
        and "gone.wav" in reason
    ), reason


# --- the spec key -----------------------------------------------------------------------------

BASE = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()
CLASS_BLOCK = "workload:\n  class: tuner.workloads.fake:FakeWorkload\n  timeout_s: 20\n"


def spec_with_outputs(outputs: str, audio_input: str = "/data/me.wav") -> str:
    """fake_ok.yaml with a command workload writing ``outputs`` and an input ``audio``."""
    block = f"workload:\n  command:\n    argv: [prog, '{{noise}}']\n    outputs: {outputs}\n  timeout_s: 20\n"
    text = BASE.replace(CLASS_BLOCK, block).replace(
        "  note: simulated\n", f"  note: simulated\n  audio: {audio_input}\n"
    )
    assert text != BASE
    return text


def test_audio_from_input_is_validated_with_file_line_and_key() -> None:
    parse_spec(spec_with_outputs("{video: out.mp4, audio_from_input: audio}"), "ok.yaml")
    cases = {
        "{video: out.mp4, audio_from_input: voice}": "'voice' is not an input",
        "{video: out.mp4, audio: out.wav, audio_from_input: audio}": "give audio (a file the program writes) or "
        "audio_from_input",
        "{text: out.txt, audio_from_input: audio}": "needs a video output",
        "{video: out.mp4, audio_from_input: note}": "input 'note' is 'simulated', not the path of a .wav or .npz",
    }
    for outputs, problem in cases.items():
        with pytest.raises(SpecError) as caught:
            parse_spec(spec_with_outputs(outputs), "bad.yaml")
        message = str(caught.value)
        assert message.startswith("bad.yaml:") and "workload.command.outputs.audio_from_input: " in message, message
        assert problem in message, message
        line = int(message.split(":")[1])
        assert "outputs:" in spec_with_outputs(outputs).splitlines()[line - 1], (line, message)
