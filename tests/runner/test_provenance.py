"""What a trial records it ran with (tuner.runner.provenance): git state, hashes, versions (the environment:
tests/runner/test_recorded_env.py)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
from pathlib import Path

import pytest

from tuner.runner import provenance
from tuner.runner.provenance import (
    INFERENCE_PACKAGES,
    git_state,
    package_versions,
    sha256_file,
    trial_runtime,
    weights_record,
    workload_module,
)


def _git(directory: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(directory), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_git_state_outside_a_repository_gives_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # never find a repository above
    state = git_state(tmp_path)
    assert state["commit"] is None and state["dirty"] is None and state["repository"] is None
    assert state["reason"].startswith(f"no git commit for {tmp_path}: ") and "not a git repository" in state["reason"]


def test_git_state_without_git_gives_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no git program on it
    state = git_state(tmp_path)
    assert state["commit"] is None and state["reason"].startswith(f"no git commit for {tmp_path}: ")


def test_git_state_of_a_checkout_names_head_and_tracked_changes(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "model.py").write_text("x = 1\n")
    _git(tmp_path, "add", "model.py")
    _git(tmp_path, "commit", "-q", "-m", "first")
    package = tmp_path / "pkg"
    package.mkdir()
    (tmp_path / "untracked.txt").write_text("not in git")
    clean = git_state(package)
    assert clean == {
        "repository": str(tmp_path.resolve()),
        "commit": _git(tmp_path, "rev-parse", "HEAD"),
        "dirty": False,
        "reason": None,
    }, "untracked files do not make it dirty"
    (tmp_path / "model.py").write_text("x = 2\n")
    assert git_state(package)["dirty"] is True


def test_sha256_is_the_files_and_the_cache_file_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = tmp_path / "w.bin"
    weights.write_bytes(os.urandom(100_003))
    cache = tmp_path / "weights_sha256.json"
    monkeypatch.setattr(provenance, "_hashes", {})
    digest = sha256_file(weights, cache)
    assert digest == hashlib.sha256(weights.read_bytes()).hexdigest()
    stored = json.loads(cache.read_text())
    assert list(stored.values()) == [digest] and str(weights.resolve()) in next(iter(stored))

    monkeypatch.setattr(provenance, "_hashes", {})  # a new worker process: only the file remembers
    stored[next(iter(stored))] = "0" * 64  # what the cache says is what comes back: nothing re-hashed
    cache.write_text(json.dumps(stored))
    assert sha256_file(weights, cache) == "0" * 64

    weights.write_bytes(b"other weights")  # size and mtime change: the cached entry no longer applies
    assert sha256_file(weights, cache) == hashlib.sha256(b"other weights").hexdigest()
    assert len(json.loads(cache.read_text())) == 2


def test_a_broken_cache_file_costs_a_rehash_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"weights")
    cache = tmp_path / "weights_sha256.json"
    cache.write_text("{not json")
    monkeypatch.setattr(provenance, "_hashes", {})
    assert sha256_file(weights, cache) == hashlib.sha256(b"weights").hexdigest()
    assert list(json.loads(cache.read_text()).values()) == [hashlib.sha256(b"weights").hexdigest()]


def test_weights_record_hashes_what_exists_and_names_what_does_not(tmp_path: Path) -> None:
    present = tmp_path / "model.pt"
    present.write_bytes(b"\x00" * 1000)
    record, problems = weights_record({"model": present, "vae": tmp_path / "missing.pt"})
    assert record == {
        "model": {"path": str(present.resolve()), "bytes": 1000, "sha256": hashlib.sha256(b"\x00" * 1000).hexdigest()}
    }
    assert list(problems) == ["weights.vae"]
    assert problems["weights.vae"].startswith(f"cannot hash {tmp_path / 'missing.pt'}: ")


def test_package_versions_name_the_inference_stack_and_the_workloads_distribution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    versions = package_versions(("yaml", "no_such_module_here"))
    for name in INFERENCE_PACKAGES:
        assert versions[name] == importlib.metadata.version(name), name
    assert versions["PyYAML"] == importlib.metadata.version("PyYAML"), "the distribution providing module yaml"
    assert "no_such_module_here" not in versions, "a module no distribution provides is left out"
    monkeypatch.setattr(provenance, "INFERENCE_PACKAGES", ("torch", "no-such-distribution"))
    assert package_versions() == {"torch": importlib.metadata.version("torch"), "no-such-distribution": None}


def test_workload_module_is_the_users_code() -> None:
    assert workload_module("tuner.adapters.python:PythonAdapterWorkload", "my_models.av:make") == "my_models.av"
    assert workload_module("tuner.workloads.avatar_dit:AvatarDiTWorkload", None) == "tuner.workloads.avatar_dit"
    assert workload_module("tuner.adapters.command:CommandWorkload", None) is None


def test_torch_runtime_reports_the_thread_count_at_the_time_of_the_call() -> None:
    """A warm worker changes torch's threads between trials; the record must follow."""
    import torch

    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert provenance.torch_runtime()["threads"] == 2
        torch.set_num_threads(1)
        assert provenance.torch_runtime()["threads"] == 1
    finally:
        torch.set_num_threads(previous)


def test_trial_runtime_marks_every_missing_fact_with_a_reason(tmp_path: Path) -> None:
    import torch

    weights = tmp_path / "w.bin"
    weights.write_bytes(b"abc")
    runtime = trial_runtime(
        ("tuner.workloads.avatar_dit",), {"w": weights, "gone": tmp_path / "gone.bin"}, tmp_path / "cache.json"
    )
    assert runtime["torch"]["version"] == torch.__version__ and runtime["torch"]["threads"] == torch.get_num_threads()
    assert runtime["packages"]["torch"] == importlib.metadata.version("torch")
    assert runtime["weights"]["w"]["sha256"] == hashlib.sha256(b"abc").hexdigest()
    unavailable = runtime["unavailable"]
    assert "weights.gone" in unavailable and "weights.w" not in unavailable
    assert (runtime["driver"] is None) == ("driver" in unavailable), "a driver, or the reason there is none"
    assert (runtime["torch"]["cuda"] is None) == ("torch.cuda" in unavailable)
    assert (runtime["git"]["commit"] is None) == ("git" in unavailable)


def test_an_imported_modules_facts_are_read_once_and_inherited_by_forked_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import multiprocessing

    provenance.warm_cache(["tuner.workloads.fake", "not.imported.anywhere"])
    before = provenance.imported_source_git("tuner.workloads.fake")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("git was run again for an imported module")

    monkeypatch.setattr(provenance.subprocess, "run", refuse)
    runtime = trial_runtime(("tuner.workloads.fake",), {})
    assert runtime["git"] == before and runtime["packages"] == package_versions(("tuner.workloads.fake",))
    assert runtime["packages"]["tuner"] == importlib.metadata.version("tuner")
    # a worker forked from this process (as from the fork server) inherits the facts: git is not run there
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        child = pool.apply(trial_runtime, (("tuner.workloads.fake",), {}))
    assert child["git"] == before and child["packages"] == runtime["packages"]
