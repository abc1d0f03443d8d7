"""A study that would waste its budget stops early and says why (real SQLite storage, InlineRunner)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tuner.runner.base import Slot
from tuner.search.guards import REFERENCE_TIMEOUT_FACTOR, SEARCH_TIMEOUT_FACTOR, trial_timeout_s
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec
from tuner.study.coordinator import Coordinator
from tuner.study.studies import create_study, load_study
from tuner.testing.inline_runner import InlineRunner

SPEC_TEXT = (Path(__file__).parents[1] / "specs" / "fake_ok.yaml").read_text()
WITH_BEHAVIOUR = SPEC_TEXT.replace(
    "  batch_size: {type: categorical, choices: [1, 2]}\n",
    "  batch_size: {type: categorical, choices: [1, 2]}\n  behaviour: {type: categorical, choices: [ok, raise]}\n",
)


def open_new(tmp_path: Path, text: str):
    spec = parse_spec(text)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    return create_study(spec, text, url, "s", "tpe", None, {"spec_name": spec.name})  # type: ignore[arg-type]


def run(opened, tmp_path: Path):
    plan = plan_constraints(opened.spec, {"gpu_memory_gb": None, "host_memory_gb": 24.0})
    return Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=InlineRunner(),
        slots=[Slot(0, None, 1)],
        home=tmp_path,
        device="cpu",
        plan=plan,
        budget_trials=opened.study.user_attrs["budget_trials"],
        wall_time_s=None,
    ).run()


def test_a_failed_reference_stops_the_search_at_once(tmp_path: Path) -> None:
    text = WITH_BEHAVIOUR.replace(
        "reference: {sleep_s: 0.02, noise: 0, batch_size: 1}",
        "reference: {sleep_s: 0.02, noise: 0, batch_size: 1, behaviour: raise}",
    ).replace(
        "baseline: {sleep_s: 0.02, noise: 5, batch_size: 1}",
        "baseline: {sleep_s: 0.02, noise: 5, batch_size: 1, behaviour: ok}",
    )
    summary = run(open_new(tmp_path, text), tmp_path)
    assert summary.measured == 1, "nothing after the reference ran"
    assert summary.failure is not None and "reference setting failed (CRASH" in summary.failure
    assert "simulated workload failure" in summary.failure and "Fix:" in summary.failure


def test_resume_runs_the_reference_again_before_anything_else(tmp_path: Path) -> None:
    text = WITH_BEHAVIOUR.replace(
        "reference: {sleep_s: 0.02, noise: 0, batch_size: 1}",
        "reference: {sleep_s: 0.02, noise: 0, batch_size: 1, behaviour: raise}",
    ).replace(
        "baseline: {sleep_s: 0.02, noise: 5, batch_size: 1}",
        "baseline: {sleep_s: 0.02, noise: 5, batch_size: 1, behaviour: ok}",
    )
    run(open_new(tmp_path, text), tmp_path)
    again = load_study(f"sqlite:///{tmp_path / 'studies.db'}", "s")
    summary = run(again, tmp_path)
    assert summary.failure is not None and summary.measured == 2, "one reference run per invocation"
    trials = again.study.get_trials()
    measured = [t for t in trials if t.user_attrs.get("measured")]
    assert [t.user_attrs["role"] for t in measured] == ["reference", "reference"], "the baseline never ran first"
    waiting = [t for t in trials if t.state.name == "WAITING"]
    assert [t.user_attrs["role"] for t in waiting] == ["baseline"], "the baseline is queued behind the reference"


def test_the_same_failure_on_every_first_run_stops_the_study(tmp_path: Path) -> None:
    text = (
        WITH_BEHAVIOUR.replace("choices: [ok, raise]", "choices: [raise]")
        .replace("reference: {sleep_s: 0.02, noise: 0, batch_size: 1}\n", "")
        .replace("baseline: {sleep_s: 0.02, noise: 5, batch_size: 1}\n", "")
        .replace("  - {metric: psnr_db, direction: maximize}\n", "")
        .replace("  - {metric: psnr_db, min: 15}\n", "")
    )
    summary = run(open_new(tmp_path, text), tmp_path)
    assert summary.measured == 3, "stopped after three identical failures, not after the budget of 8"
    assert summary.failure is not None and "all failed the same way" in summary.failure
    assert "CRASH: run: RuntimeError: simulated workload failure" in summary.failure, "the reason, whole"


def test_timeouts_adapt_to_the_reference_unless_pinned(tmp_path: Path) -> None:
    opened = open_new(tmp_path, SPEC_TEXT)
    run(opened, tmp_path)
    trials = opened.study.get_trials()
    reference_wall = next(t for t in trials if t.user_attrs.get("role") == "reference").user_attrs["wall_time_s"]
    spec, attrs = opened.spec, dict(opened.study.user_attrs)
    assert trial_timeout_s(spec, "reference", attrs, trials) == REFERENCE_TIMEOUT_FACTOR * 20
    assert trial_timeout_s(spec, "search", attrs, trials) == max(20, SEARCH_TIMEOUT_FACTOR * reference_wall)
    attrs["timeout_s_override"] = 500
    assert trial_timeout_s(spec, "search", attrs, trials) == 500, "resume --timeout replaces timeout_s"
    pinned = parse_spec(SPEC_TEXT.replace("timeout_s: 20", "timeout_s: 20\n  timeout_mode: fixed"))
    assert trial_timeout_s(pinned, "reference", {}, trials) == 20


@pytest.mark.parametrize("how", ["read-only directory", "a file in the way"])
def test_an_unwritable_home_stops_the_study_and_counts_nothing(tmp_path: Path, how: str) -> None:
    """A real read-only home: the immutable attribute (``chattr +i``) stops even root, which ignores
    permission bits; and a file where the study's directory should be."""
    opened = open_new(tmp_path, SPEC_TEXT)
    home = tmp_path / "home"
    home.mkdir()
    if how == "read-only directory":
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(home)]).returncode != 0:
            pytest.skip("chattr +i is not available on this filesystem")
    else:
        (home / "s").write_text("a file where the study's directory should be")
    try:
        summary = run(opened, home)
    finally:
        if how == "read-only directory":
            subprocess.run(["chattr", "-i", str(home)], check=True)
    assert summary.measured == 0 and summary.failure is not None
    assert summary.failure.startswith("environment: cannot write the trial directory")
    trials = opened.study.get_trials()
    assert not any(t.user_attrs.get("measured") for t in trials)
    assert any(t.state.name == "WAITING" and t.user_attrs.get("role") == "reference" for t in trials), "queued again"
