"""Declared command outputs stay inside the trial directory (issue 12, "Files").

The tuner deletes a declared output before each call, so an output that names the user's file
(``outputs: {audio: "{audio}"}`` with an input ``audio: /data/me.wav``) must never reach
``unlink``: refused when the spec is validated (shape and placeholders), and again when the call
runs (the rendered path resolved through symlinks must lie inside the trial directory).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from adapter_helpers import ROOT
from adapter_helpers import run_on_fresh_worker as run

from tuner.results import Outcome, TrialResult
from tuner.runner.base import TrialRequest
from tuner.spec.adapters import CommandSpec, output_path_problems
from tuner.spec.loading import parse_spec
from tuner.spec.models import SpecError

BASE = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()
CLASS_BLOCK = "workload:\n  class: tuner.workloads.fake:FakeWorkload\n  timeout_s: 20\n"
USER_BYTES = b"RIFF the user's own recording"
OVERWRITE = "import sys; open(sys.argv[1], 'wb').write(b'clobbered')"


def command_spec_text(outputs: str, cwd: str | None = None) -> str:
    """fake_ok.yaml with a command workload writing ``outputs`` and an input file ``audio``."""
    block = (
        "workload:\n  command:\n    argv: [prog, --steps, '{noise}']\n"
        + (f"    cwd: {cwd}\n" if cwd is not None else "")
        + f"    outputs: {outputs}\n  timeout_s: 20\n"
    )
    text = BASE.replace(CLASS_BLOCK, block).replace("  note: simulated\n", "  note: simulated\n  audio: /data/me.wav\n")
    assert text != BASE
    return text


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(text, "bad.yaml")
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "path, why",
    [
        ("/tmp/x.wav", "absolute path"),
        ("../x.wav", "'..' segment"),
        ("results/../../x.wav", "'..' segment"),
        ("'{audio}'", "starts with a placeholder"),
        ("'{noise}/out.wav'", "starts with a placeholder"),
        ("''", "empty"),
        ("./", "directory itself"),
    ],
)
def test_validate_refuses_outputs_that_could_leave_the_trial_directory(path: str, why: str) -> None:
    message = refusal(command_spec_text(f"{{audio: {path}}}"))
    assert message.startswith("bad.yaml:"), message
    assert "workload.command.outputs.audio: " in message, message
    assert "may point outside the trial directory" in message and why in message, message
    assert "like 'out.wav'" in message and "deletes outputs before each call" in message, message


def test_validate_refuses_outputs_relative_to_a_cwd_other_than_the_trial_directory() -> None:
    message = refusal(command_spec_text("{video: out.npz}", cwd="/srv/checkout"))
    assert "workload.command: cwd: '/srv/checkout' is not the trial directory" in message, message
    assert "drop cwd:" in message
    parse_spec(command_spec_text("{text_from_stdout: true}", cwd="/srv/checkout"), "ok.yaml")


@pytest.mark.parametrize(
    "outputs",
    [
        "{audio: 'out_{noise}.wav'}",
        "{video: 'results/{seed}/video.npz'}",
        "{video: out.npz, audio: ./sound.wav, text: 'answers/a_{num_gpus}.txt'}",
    ],
)
def test_validate_accepts_relative_outputs_named_from_settings(outputs: str) -> None:
    spec = parse_spec(command_spec_text(outputs), "ok.yaml")
    assert spec.workload.command is not None
    assert output_path_problems(spec.workload.command, set(spec.inputs)) == []


def test_an_output_named_from_an_input_is_refused_by_the_input_aware_check() -> None:
    command = CommandSpec(argv=["prog"], outputs={"audio": "out_{audio}.wav", "video": "v_{steps}.npz"})
    problems = output_path_problems(command, {"audio", "note"})
    assert [key for key, _ in problems] == ["outputs.audio"], problems
    assert "placeholder {audio} is an input" in problems[0][1] and "like 'out.wav'" in problems[0][1]
    assert output_path_problems(command, {"note"}) == []


# ------------------------------------------------------------------------- run time
def request(
    tmp_path: Path,
    options: dict[str, Any],
    settings: dict[str, Any] | None = None,
    inputs: dict[str, Any] | None = None,
) -> TrialRequest:
    """A command trial from raw options: the adapter's own check, whatever the spec check said."""
    return TrialRequest(
        study_name="t",
        trial_number=0,
        workload_class="tuner.adapters.command:CommandWorkload",
        settings=settings or {},
        inputs=inputs or {},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=60,
        workdir=str(tmp_path / "trial"),
        workload_options={"adapter": "command", **options},
    )


@pytest.fixture()
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "me.wav"
    path.parent.mkdir()
    path.write_bytes(USER_BYTES)
    return path


def assert_refused(result: TrialResult, user_file: Path) -> None:
    assert result.outcome is Outcome.INVALID, (result.outcome, result.reason, result.log_tail)
    assert "outside the trial directory" in str(result.reason), result.reason
    assert str(user_file) in str(result.reason), result.reason
    assert user_file.read_bytes() == USER_BYTES, "the user's file is intact"


def test_an_input_output_bypassing_validation_never_deletes_the_users_file(tmp_path: Path, user_file: Path) -> None:
    options = {"argv": [sys.executable, "-c", OVERWRITE, "{audio}"], "outputs": {"audio": "{audio}"}}
    result = run(request(tmp_path, options, inputs={"audio": str(user_file)}))
    assert_refused(result, user_file)
    assert "outputs.audio '{audio}'" in str(result.reason)


def test_a_setting_value_with_dot_dot_is_refused_at_run_time(tmp_path: Path, user_file: Path) -> None:
    options = CommandSpec(
        argv=[sys.executable, "-c", OVERWRITE, "out_{name}.wav"], outputs={"audio": "out_{name}.wav"}
    ).model_dump(mode="json")
    result = run(request(tmp_path, options, settings={"name": "/../../../data/me"}))
    assert_refused(result, user_file)


def test_a_symlink_in_the_trial_directory_pointing_outside_is_refused(tmp_path: Path, user_file: Path) -> None:
    run_dir = tmp_path / "trial" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "out.wav").symlink_to(user_file)
    options = CommandSpec(argv=[sys.executable, "-c", OVERWRITE, "out.wav"], outputs={"audio": "out.wav"}).model_dump(
        mode="json"
    )
    result = run(request(tmp_path, options))
    assert_refused(result, user_file)
    assert (run_dir / "out.wav").is_symlink(), "refused before unlink: the link is left as found"


def test_an_output_the_program_links_outside_is_not_read(tmp_path: Path, user_file: Path) -> None:
    link = f"import os; os.symlink({str(user_file)!r}, 'answer.txt')"
    options = CommandSpec(argv=[sys.executable, "-c", link], outputs={"text": "answer.txt"}).model_dump(mode="json")
    result = run(request(tmp_path, options))
    assert_refused(result, user_file)
    assert "after the call" in str(result.reason)
