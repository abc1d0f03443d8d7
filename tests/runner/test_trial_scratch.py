"""Scratch a trial leaves in its directory past ``workload.max_trial_dir_gb``: deleted largest first
once the result is read (or kept with ``trial_scratch: keep``), named in the trial's reason, log and
info; what the tuner needs (result, log, samples, a saved output) is never deleted.

Small sizes stand in for the 1 GB default: a limit of 0.001 GB (1 MB) and files of a few MB.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from process_tree_helpers import make_runner

from tuner.results import Outcome, TrialResult
from tuner.runner.base import ScratchPolicy, Slot, TrialRequest, with_trial_disk_usage
from tuner.spec.adapters import CommandSpec
from tuner.storage.records import trial_records

SLOT = Slot(0, None, 1)
MB = 1_000_000
LIMIT = ScratchPolicy(limit_gb=0.001)


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))  # random: no file system compresses it away
    return path


def _trial_dir(root: Path) -> Path:
    """A trial directory as a worker leaves it: the tuner's files, a sample, the program's files."""
    workdir = root / "trial_00003"
    for name in ("request.json", "result.json"):
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text("{}")
    (workdir / "worker.log").write_text("the worker's log\n")
    _write(workdir / "sample" / "sample.gif", 300_000)
    _write(workdir / "command" / "call_1.stderr", 200_000)
    _write(workdir / "run" / "cache" / "scratch.bin", 3 * MB)
    _write(workdir / "run" / "tmp.bin", 1_500_000)
    _write(workdir / "run" / "out.txt", 20_000)
    return workdir


def test_scratch_over_the_limit_is_deleted_largest_first_and_the_trial_says_so(tmp_path: Path) -> None:
    workdir = _trial_dir(tmp_path)
    outside = _write(tmp_path / "weights.bin", 2 * MB)
    (workdir / "run" / "weights.bin").symlink_to(outside)  # a link to a user's file: never followed
    linked = _write(tmp_path / "tokenizer.bin", 100_000)
    os.link(linked, workdir / "run" / "tokenizer.bin")  # a second name of a user's file: deleting it frees nothing
    result = TrialResult(Outcome.OK, samples={"gif": str(workdir / "sample" / "sample.gif")})

    cleaned = with_trial_disk_usage(result, workdir, LIMIT)

    assert not (workdir / "run" / "cache" / "scratch.bin").exists()
    assert not (workdir / "run" / "tmp.bin").exists(), "largest first until within the limit"
    for kept in (
        "request.json",
        "result.json",
        "worker.log",
        "sample/sample.gif",
        "command/call_1.stderr",
        "run/out.txt",
        "run/weights.bin",
        "run/tokenizer.bin",
    ):
        assert (workdir / kept).exists() or (workdir / kept).is_symlink(), kept
    assert outside.stat().st_size == 2 * MB and linked.stat().st_size == 100_000
    assert cleaned.metrics["trial_disk_gb"].value is not None
    assert cleaned.metrics["trial_disk_gb"].value >= 0.0045, "the metric is what the trial left, before cleaning"
    info = cleaned.info["trial_scratch"]
    assert info["action"] == "cleaned" and info["limit_gb"] == 0.001 and info["files"] == 2
    assert [item["path"] for item in info["deleted"]] == ["run/cache/scratch.bin", "run/tmp.bin"]
    assert info["cleaned_gb"] >= 0.0045 and info["left_gb"] < 0.001
    note = cleaned.info["trial_disk_note"]
    assert cleaned.reason == note and "deleted 2 file(s)" in note and "run/cache/scratch.bin" in note
    assert str(workdir) in note and "workload.max_trial_dir_gb" in note
    assert (workdir / "worker.log").read_text().rstrip().endswith(note), "the note ends the trial's log"


def test_a_saved_output_inside_the_directory_is_never_deleted(tmp_path: Path) -> None:
    workdir = _trial_dir(tmp_path)
    saved = _write(workdir / "reference_output.npz", 2 * MB)
    result = TrialResult(Outcome.OK, output_path=str(saved), reason="earlier words")

    cleaned = with_trial_disk_usage(result, workdir, LIMIT)

    assert saved.exists() and saved.stat().st_size == 2 * MB
    assert not (workdir / "run" / "cache" / "scratch.bin").exists()
    assert not (workdir / "run" / "out.txt").exists(), "the program's files go while the directory is over"
    assert (workdir / "sample" / "sample.gif").exists() and (workdir / "result.json").exists()
    assert str(cleaned.reason).startswith("earlier words\nnote: the trial directory takes")
    assert "still over" in str(cleaned.reason)


def test_keep_names_the_largest_files_and_deletes_nothing(tmp_path: Path) -> None:
    workdir = _trial_dir(tmp_path)
    kept = with_trial_disk_usage(
        TrialResult(Outcome.CRASH, reason="worker died"), workdir, ScratchPolicy(limit_gb=0.001, clean=False)
    )
    assert (workdir / "run" / "cache" / "scratch.bin").exists() and (workdir / "run" / "tmp.bin").exists()
    assert kept.info["trial_scratch"]["action"] == "kept" and kept.info["trial_scratch"]["cleaned_gb"] == 0
    assert kept.info["trial_scratch"]["largest"][0]["path"] == "run/cache/scratch.bin"
    assert "kept (workload.trial_scratch: keep)" in str(kept.reason) and "run/cache/scratch.bin" in str(kept.reason)


def test_a_directory_within_the_limit_is_left_alone(tmp_path: Path) -> None:
    workdir = _trial_dir(tmp_path)
    result = with_trial_disk_usage(TrialResult(Outcome.OK), workdir, ScratchPolicy(limit_gb=0.01))
    assert (workdir / "run" / "cache" / "scratch.bin").exists()
    assert result.reason is None and "trial_scratch" not in result.info
    assert "tuner:" not in (workdir / "worker.log").read_text()


SCRATCH_PROGRAM = (
    "import os, sys; os.makedirs('scratch', exist_ok=True); "
    "open('scratch/big.bin', 'wb').write(os.urandom(3_000_000)); "
    "open('answer.txt', 'w').write('forty-two\\n')"
)


def _command_request(workdir: Path, save_output: Path | None = None) -> TrialRequest:
    options = CommandSpec(argv=[sys.executable, "-c", SCRATCH_PROGRAM], outputs={"text": "answer.txt"}).model_dump(
        mode="json"
    )
    return TrialRequest(
        study_name="scratch",
        trial_number=0,
        workload_class="tuner.adapters.command:CommandWorkload",
        settings={},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=120,
        workdir=str(workdir),
        workload_options={"adapter": "command", **options},
        save_output=str(save_output) if save_output is not None else None,
    )


@pytest.mark.parametrize("kind", ["fork", "warm"])
def test_a_runner_cleans_a_command_s_scratch_after_reading_its_output(kind: str, tmp_path: Path) -> None:
    from tuner.workloads.base import WorkloadOutput

    runner: Any = make_runner(kind)
    runner.scratch = LIMIT
    workdir = tmp_path / "trial"
    saved = workdir / "reference_output.npz"
    try:
        result = runner.run(_command_request(workdir, saved), SLOT)
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-800:])
    assert not (workdir / "run" / "scratch" / "big.bin").exists()
    assert result.info["trial_scratch"]["deleted"][0]["path"] == "run/scratch/big.bin"
    assert "run/scratch/big.bin" in str(result.reason)
    assert WorkloadOutput.load(saved).text == ["forty-two"], "the saved output is intact"
    for name, path in result.samples.items():
        assert Path(path).is_file(), name
    assert (workdir / "result.json").is_file() and (workdir / "worker.log").is_file()


SPEC = """\
name: scratch
workload:
  command:
    argv: [{python}, {program}, "{{n}}"]
    outputs: {{text: answer.txt}}
  timeout_s: 60
  max_trial_dir_gb: 0.001
parameters:
  n: {{type: int, low: 1, high: 4}}
objectives:
  - {{metric: latency_p50_s, direction: minimize}}
reference: {{n: 1}}
measurement: {{warmup: 0, min_repeats: 1, max_repeats: 1}}
budget: {{trials: 2}}
"""


@pytest.mark.slow
def test_a_study_records_the_cleaning_in_the_trial(tmp_path: Path) -> None:
    spec = tmp_path / "scratch.yaml"
    program = tmp_path / "scratchy.py"
    program.write_text(SCRATCH_PROGRAM.replace("; ", "\n"))
    spec.write_text(SPEC.format(python=sys.executable, program=program))
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(spec), "--study-name", "s", "--no-mlflow"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    try:
        loaded = optuna.load_study(study_name="s", storage=storage)
        trials = loaded.trials
        side = trial_records(loaded, trials)  # worker_info is a side record (issue 27)
    finally:
        storage.engine.dispose()
    measured = [t for t in trials if t.user_attrs.get("measured")]
    assert len(measured) == 2
    for trial in measured:
        workdir = tmp_path / "studies" / "s" / f"trial_{trial.number:05d}"
        assert not (workdir / "run" / "scratch" / "big.bin").exists()
        scratch = side[trial.number]["worker_info"]["trial_scratch"]
        assert scratch["action"] == "cleaned" and scratch["deleted"][0]["path"] == "run/scratch/big.bin"
        assert "deleted 1 file(s)" in trial.user_attrs["reason"]
        assert trial.user_attrs["metrics"]["trial_disk_gb"]["value"] >= 0.003
    assert (tmp_path / "studies" / "s" / "reference_output.npz").is_file()
