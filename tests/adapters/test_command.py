"""The command adapter: literal argv items, outcomes, regex metrics, process-tree memory, an e2e study."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from adapter_helpers import ROOT, STANDINS, live_avatar_standin_spec
from adapter_helpers import run_on_fresh_worker as run

from tuner.results import Outcome
from tuner.runner.base import TrialRequest
from tuner.runner.subprocess import SubprocessRunner
from tuner.spec.adapters import CommandSpec
from tuner.spec.loading import parse_spec
from tuner.spec.models import SpecError

NASTY = ["; rm -rf x", "$(touch pwned)", "`touch pwned2`", 'it\'s "quoted"', "two  spaces", "*", "a\nb", "|| true"]
ECHO_ARGV = "import json, sys; json.dump(sys.argv[1:], open('argv.json', 'w')); open('answer.txt', 'w').write('ok')"


def command_request(tmp_path: Path, argv: list[Any], settings: dict[str, Any], **block: Any) -> TrialRequest:
    options = {"adapter": "command", **CommandSpec(argv=argv, **block).model_dump(mode="json")}
    return TrialRequest(
        study_name="t",
        trial_number=0,
        workload_class="tuner.adapters.command:CommandWorkload",
        settings=settings,
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=60,
        workdir=str(tmp_path / "trial"),
        workload_options=options,
    )


def test_shell_metacharacters_reach_the_program_as_literal_argv_items(tmp_path: Path) -> None:
    settings = {f"p{i}": value for i, value in enumerate(NASTY)}
    argv: list[Any] = [sys.executable, "-c", ECHO_ARGV, *[f"{{p{i}}}" for i in range(len(NASTY))], "--flag={p0}"]
    result = run(command_request(tmp_path, argv, settings, outputs={"text": "answer.txt"}))
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail)
    received = json.loads((tmp_path / "trial" / "run" / "argv.json").read_text())
    assert received == [*NASTY, "--flag=; rm -rf x"]
    assert not list((tmp_path / "trial" / "run").glob("pwned*")), "nothing may reach a shell"
    assert result.invocation is not None and result.invocation["argv"][3:] == [*NASTY, "--flag=; rm -rf x"]


def test_flags_appear_only_when_their_bool_is_true(tmp_path: Path) -> None:
    argv: list[Any] = [
        sys.executable,
        "-c",
        ECHO_ARGV,
        {"flag": "--fp8", "when": "fp8"},
        {"flag": "--offload", "when": "offload"},
        "--steps",
        "{steps}",
    ]
    result = run(
        command_request(tmp_path, argv, {"fp8": True, "offload": False, "steps": 4}, outputs={"text": "answer.txt"})
    )
    assert result.outcome is Outcome.OK, result.reason
    assert json.loads((tmp_path / "trial" / "run" / "argv.json").read_text()) == ["--fp8", "--steps", "4"]


def test_declared_regex_metrics_are_read_from_the_output(tmp_path: Path) -> None:
    script = (
        "import sys; print('step 1: 9.0 it/s'); print('step 2: 12.5 it/s'); print('peak 3.25 GiB', file=sys.stderr)"
    )
    metrics = [
        {"name": "iters_per_s", "regex": r"([0-9.]+) it/s", "unit": "it/s", "direction": "maximize"},
        {"name": "reported_peak_gib", "regex": r"peak ([0-9.]+) GiB", "unit": "GiB"},
        {"name": "never_printed", "regex": r"tokens: (\d+)"},
    ]
    result = run(command_request(tmp_path, [sys.executable, "-c", script], {}, metrics=metrics))
    assert result.outcome is Outcome.OK, result.reason
    assert result.metrics["iters_per_s"].value == 12.5
    assert result.metrics["reported_peak_gib"].value == 3.25
    assert result.metrics["never_printed"].value is None and "no line matching" in str(
        result.metrics["never_printed"].reason
    )
    logs = sorted(p.name for p in (tmp_path / "trial" / "command").iterdir())
    assert logs == ["call_1.stderr", "call_1.stdout"], "stdout and stderr kept per call"


def _standin_argv(size: str, infer_frames: int, steps: int = 4) -> list[Any]:
    return [
        sys.executable,
        str(STANDINS / "live_avatar_s2v_standin.py"),
        "--ckpt_dir",
        "ckpt",
        "--size",
        size,
        "--infer_frames",
        str(infer_frames),
        "--sample_steps",
        str(steps),
        "--num_clip",
        "1",
        "--offload_model",
        "False",
        "--save_file",
        "out.npz",
    ]


def test_cuda_out_of_memory_in_the_log_is_oom(tmp_path: Path) -> None:
    result = run(command_request(tmp_path, _standin_argv("720*400", 96), {}, outputs={"video": "out.npz"}))
    assert result.outcome is Outcome.OOM, (result.reason, result.log_tail)
    assert "torch.OutOfMemoryError: CUDA out of memory" in str(result.reason)


def test_a_refused_flag_value_is_invalid_and_a_good_one_gives_video(tmp_path: Path) -> None:
    refused = run(
        command_request(tmp_path / "a", _standin_argv("688*368", 48, steps=8), {}, outputs={"video": "out.npz"})
    )
    assert refused.outcome is Outcome.INVALID, refused.reason
    assert "sample_steps" in str(refused.reason)
    good = run(command_request(tmp_path / "b", _standin_argv("384*256", 48), {}, outputs={"video": "out.npz"}))
    assert good.outcome is Outcome.OK, good.reason
    assert good.metrics["count_command_calls"].value == 1


def test_a_failing_program_is_a_crash_with_its_stderr(tmp_path: Path) -> None:
    script = (
        "import sys; print('loading weights failed: no such file ckpt/model.safetensors', file=sys.stderr); sys.exit(7)"
    )
    result = run(command_request(tmp_path, [sys.executable, "-c", script], {}))
    assert result.outcome is Outcome.CRASH
    assert "exit status 7" in str(result.reason) and "model.safetensors" in str(result.reason)


def _tree_peak_gb(tmp_path: Path, ranks: int) -> float:
    script = tmp_path / "hold.py"
    script.write_text(
        "import time\nblock = bytearray(300 * 2**20)\nfor i in range(0, len(block), 4096):\n"
        "    block[i] = 1\ntime.sleep(1.5)\n"
    )
    argv: list[Any] = [
        sys.executable,
        str(STANDINS / "torchrun_standin.py"),
        "--nproc_per_node",
        str(ranks),
        str(script),
    ]
    result = run(command_request(tmp_path / f"r{ranks}", argv, {}))
    assert result.outcome is Outcome.OK, result.reason
    peak = result.metrics["peak_rss_gb"].value
    assert peak is not None
    return peak


def test_peak_memory_of_a_command_counts_its_children(tmp_path: Path) -> None:
    one, three = _tree_peak_gb(tmp_path, 1), _tree_peak_gb(tmp_path, 3)
    # each rank (a grandchild of the worker, via the launcher) holds 300 MiB = 0.315 GB
    assert one >= 0.3
    assert three - one >= 2 * 0.315 * 0.8, (one, three)


RANK_THAT_HANGS = (
    "import json, os, sys, time\n"
    "facts = {'pid': os.getpid(), 'sid': os.getsid(0), 'launcher': os.getppid(),\n"
    "         'launcher_sid': os.getsid(os.getppid())}\n"
    "with open(sys.argv[1] + '.tmp' + os.environ['RANK'], 'w') as handle:\n"
    "    json.dump(facts, handle)\n"
    "os.replace(sys.argv[1] + '.tmp' + os.environ['RANK'], sys.argv[1] + os.environ['RANK'])\n"
    "time.sleep(600)\n"
)


def _running(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("kind", ["fork", "warm"])
def test_a_timeout_kills_the_ranks_torchrun_started_in_their_own_sessions(kind: str, tmp_path: Path) -> None:
    """The ranks leave the trial's process group and session (torchrun's ``start_new_session``): the runner
    must still find and kill them when the trial times out."""
    from dataclasses import replace

    from tuner.runner.base import Slot
    from tuner.runner.warm import WarmRunner

    script = tmp_path / "rank.py"
    script.write_text(RANK_THAT_HANGS)
    argv: list[Any] = [
        sys.executable,
        str(STANDINS / "torchrun_standin.py"),
        "--nproc_per_node",
        "2",
        str(script),
        str(tmp_path / "rank"),
    ]
    request = replace(command_request(tmp_path, argv, {}), timeout_s=20)
    runner = WarmRunner() if kind == "warm" else SubprocessRunner(kind)
    try:  # checked before close(), which kills whatever the runner started anyway
        result = runner.run(request, Slot(0, None, 1))
        assert result.outcome is Outcome.TIMEOUT, (result.reason, result.log_tail[-800:])
        ranks = [json.loads((tmp_path / f"rank{r}").read_text()) for r in range(2)]
        for rank in ranks:
            assert rank["sid"] == rank["pid"] != rank["launcher_sid"], f"each rank leads a new session: {rank}"
        pids = [rank["pid"] for rank in ranks] + [ranks[0]["launcher"]]
        deadline = time.monotonic() + 10
        while any(map(_running, pids)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if _running(pid)], "the launcher and its ranks die with the timed-out trial"
    finally:
        runner.close()


def test_spec_refuses_unknown_placeholders_and_non_bool_flags() -> None:
    base = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()
    block = "workload:\n  command:\n    argv: [prog, '--x', '{nosuch}']\n  timeout_s: 20\n"
    text = base.replace("workload:\n  class: tuner.workloads.fake:FakeWorkload\n  timeout_s: 20\n", block)
    with pytest.raises(SpecError, match=r"placeholder \{nosuch\} is not a parameter"):
        parse_spec(text, "bad.yaml")
    flag = text.replace("'{nosuch}'", "{flag: --quick, when: noise}")
    with pytest.raises(SpecError, match="'noise' must be a bool parameter"):
        parse_spec(flag, "bad.yaml")
    both = base.replace("  timeout_s: 20\n", "  timeout_s: 20\n  command: {argv: [prog]}\n", 1)
    with pytest.raises(SpecError, match="exactly one of class, command, python, http"):
        parse_spec(both, "bad.yaml")


def test_study_over_the_live_avatar_standin_exports_the_exact_argv(tmp_path: Path) -> None:
    """Also: the lip-sync proxy is computed from the stand-in's mp4 (H.264 + its AAC audio track)."""
    spec = live_avatar_standin_spec(tmp_path, trials=5)
    assert spec["workload"]["command"]["outputs"].pop("audio_from_input") == "audio"
    spec["report"].append("lipsync_margin")  # from the mp4's own audio track: no fallback declared
    spec_path = tmp_path / "live_avatar.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    common = ["--storage", storage, "--home", str(tmp_path / "home")]
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(spec_path), "--study-name", "la", "--no-mlflow", *common],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    import optuna

    study = optuna.load_study(study_name="la", storage=storage)
    measured = [t for t in study.get_trials() if t.user_attrs.get("measured")]
    assert len(measured) == 5
    assert all("invocation" in t.user_attrs for t in measured)
    ok = [t for t in measured if t.user_attrs["outcome"] == "OK"]
    assert ok, [t.user_attrs.get("reason") for t in measured]
    for trial in ok:
        lipsync = trial.user_attrs["metrics"]["lipsync_margin"]
        assert lipsync["value"] is not None and lipsync["value"] > 0.3, (trial.params, lipsync)
        out = tmp_path / f"export_{trial.number}.yaml"
        exported = subprocess.run(
            [sys.executable, "-m", "tuner", "export", "la", "--trial", str(trial.number), "-o", str(out), *common],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert exported.returncode == 0, exported.stderr[-2000:]
        invocation = yaml.safe_load(out.read_text())["invocation"]
        recorded = trial.user_attrs["invocation"]
        assert invocation["kind"] == "command"
        assert invocation["argv"] == recorded["argv"], "the export renders exactly what the runner ran"
        assert invocation["env"] == recorded["env"] and invocation["cwd"] == recorded["cwd"]
        assert "--size" in invocation["argv"] and trial.params["size"] in invocation["argv"]
        assert "a 'quoted' prompt; with $(shell) characters" in invocation["argv"]


def test_template_errors_name_the_file_line_and_key() -> None:
    base = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()
    block = "workload:\n  command:\n    argv:\n      - prog\n      - --x\n      - '{nosuch}'\n  timeout_s: 20\n"
    text = base.replace("workload:\n  class: tuner.workloads.fake:FakeWorkload\n  timeout_s: 20\n", block)
    with pytest.raises(SpecError) as caught:
        parse_spec(text, "bad.yaml")
    assert str(caught.value).startswith("bad.yaml:8: workload.command.argv.2: placeholder {nosuch}"), str(caught.value)


def test_a_multi_gpu_command_gets_its_slot_gpu_set(tmp_path: Path) -> None:
    from tuner.runner.base import plan_slots

    slots = plan_slots(2, "cuda", list(range(8)), gpus_per_slot=4)
    assert [s.cuda_visible_devices for s in slots] == ["0,1,2,3", "4,5,6,7"]
    with pytest.raises(ValueError, match="needs 4 GPUs but 2 are visible"):
        plan_slots(1, "cuda", [0, 1], gpus_per_slot=4)
    script = "import os; open('gpus.txt', 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"
    request = command_request(tmp_path, [sys.executable, "-c", script], {}, outputs={"text": "gpus.txt"}, gpus=4)
    runner = SubprocessRunner()
    try:
        result = runner.run(request, slots[1])
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, result.reason
    assert (tmp_path / "trial" / "run" / "gpus.txt").read_text() == "4,5,6,7"


TORCHRUN_EXIT_1 = (
    "import subprocess, sys; "
    "sys.exit(1 if subprocess.call([sys.executable, *sys.argv[1:]]) else 0)  # like torchrun: 2 -> 1"
)


def test_an_unrecognized_flag_under_torchrun_is_invalid_with_the_whole_error_line(tmp_path: Path) -> None:
    argv: list[Any] = [
        sys.executable,
        "-c",
        TORCHRUN_EXIT_1,
        str(STANDINS / "torchrun_standin.py"),
        "--nproc_per_node",
        "2",
        *_standin_argv("384*256", 48)[1:],
        "--bogus",
    ]
    result = run(command_request(tmp_path, argv, {}, outputs={"video": "out.npz"}))
    assert result.outcome is Outcome.INVALID, (result.outcome, result.reason)
    assert "exit status 1" in str(result.reason)
    assert "live_avatar_s2v_standin.py: error: unrecognized arguments: --bogus" in str(result.reason)


def test_the_refusal_line_is_kept_whole_however_long_the_log(tmp_path: Path) -> None:
    choices = ", ".join(f"'{w}*{h}'" for w in range(256, 1281, 64) for h in (256, 368, 720))
    line = f"prog: error: argument --size: invalid choice: '999*999' (choose from {choices})"
    script = (
        f"import sys; print({line!r}, file=sys.stderr); "
        "print('\\n'.join('shutting down worker %d: releasing buffers' % i for i in range(300)), file=sys.stderr); "
        "sys.exit(1)"
    )
    result = run(command_request(tmp_path, [sys.executable, "-c", script], {}))
    assert result.outcome is Outcome.INVALID, (result.outcome, result.reason)
    assert len(line) > 500 and line in str(result.reason)


def test_invalid_patterns_of_the_spec_make_a_refusal_invalid(tmp_path: Path) -> None:
    line = "ValueError: unsupported resolution 999x999 for this checkpoint (use 384x256 or 688x368)"
    script = f"import sys; print('loading'); print({line!r}, file=sys.stderr); sys.exit(1)"
    argv: list[Any] = [sys.executable, "-c", script]
    plain = run(command_request(tmp_path / "a", argv, {}))
    assert plain.outcome is Outcome.CRASH, plain.reason
    refused = run(command_request(tmp_path / "b", argv, {}, invalid_patterns=[r"unsupported resolution \d+x\d+"]))
    assert refused.outcome is Outcome.INVALID, refused.reason
    assert line in str(refused.reason)
    with pytest.raises(ValueError, match="does not compile"):
        CommandSpec(argv=["prog"], invalid_patterns=["unbalanced ("])


def test_custom_oom_patterns_and_the_oom_killer_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said = "import sys; print('my allocator gave up: 4.0 GiB requested, 0.5 GiB free', file=sys.stderr); sys.exit(1)"
    oom = run(command_request(tmp_path / "a", [sys.executable, "-c", said], {}, oom_patterns=["allocator gave up"]))
    assert oom.outcome is Outcome.OOM, oom.reason
    assert "my allocator gave up: 4.0 GiB requested, 0.5 GiB free" in str(oom.reason)
    events = tmp_path / "memory.events"  # stands in for the kernel's cgroup file
    events.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    monkeypatch.setenv("TUNER_MEMORY_EVENTS", str(events))
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    crash = run(command_request(tmp_path / "b", [sys.executable, "-c", killed], {}))
    assert crash.outcome is Outcome.CRASH, crash.reason
    assert "SIGKILL, not sent by the tuner" in str(crash.reason)
    by_kernel = (
        f"import os, signal; open({str(events)!r}, 'w').write('oom 1\\noom_kill 1\\n'); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    kernel = run(command_request(tmp_path / "c", [sys.executable, "-c", by_kernel], {}))
    assert kernel.outcome is Outcome.OOM, kernel.reason
    assert "OOM killer killed 1 process" in str(kernel.reason)


def test_invalid_exit_codes_replace_the_default(tmp_path: Path) -> None:
    def exiting(code: int) -> list[Any]:
        return [
            sys.executable,
            "-c",
            f"import sys; print('cannot use this setting', file=sys.stderr); sys.exit({code})",
        ]

    assert run(command_request(tmp_path / "a", exiting(2), {})).outcome is Outcome.INVALID  # argparse's 2
    custom = run(command_request(tmp_path / "b", exiting(5), {}, invalid_exit_codes=[5]))
    assert custom.outcome is Outcome.INVALID and "exit status 5" in str(custom.reason), custom.reason
    two = run(command_request(tmp_path / "c", exiting(2), {}, invalid_exit_codes=[5]))
    assert two.outcome is Outcome.CRASH, two.reason


def test_a_program_that_rejects_a_flag_stops_the_study_after_the_reference(tmp_path: Path) -> None:
    """Every run would be refused (torchrun turns the script's exit 2 into 1): one run, exit 3, the whole line."""
    spec = live_avatar_standin_spec(tmp_path, trials=6)
    spec["workload"]["command"]["argv"].append("--bogus_flag")
    spec_path = tmp_path / "bogus.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "run",
            str(spec_path),
            "--study-name",
            "bogus",
            "--no-mlflow",
            "--storage",
            f"sqlite:///{tmp_path / 'studies.db'}",
            "--home",
            str(tmp_path / "home"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "250"},
    )
    said = " ".join(done.stderr.split())
    assert done.returncode == 3, done.stderr[-3000:]
    assert "study stopped: the reference setting failed (INVALID" in said, said[-2000:]
    assert "unrecognized arguments: --bogus_flag" in said and "Traceback" not in done.stderr
    import optuna

    study = optuna.load_study(study_name="bogus", storage=f"sqlite:///{tmp_path / 'studies.db'}")
    assert sum(1 for t in study.trials if t.user_attrs.get("measured")) == 1
