"""The ask/run/tell loop against a real SQLite Optuna storage (InlineRunner: no processes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tuner.pareto import named_constraints
from tuner.runner.base import Slot
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec
from tuner.spec.space import suggest
from tuner.storage.coordination.heartbeats import HOST
from tuner.study.coordinator import Coordinator
from tuner.study.studies import create_study, load_study
from tuner.testing.inline_runner import InlineRunner

SPEC_TEXT = (Path(__file__).parents[1] / "specs" / "fake_ok.yaml").read_text()


def open_new(tmp_path: Path, text: str = SPEC_TEXT, trials: int | None = None, sampler: str = "tpe"):
    spec = parse_spec(text)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    return create_study(spec, text, url, "s", sampler, trials, {"spec_name": spec.name})  # type: ignore[arg-type]


def coordinator(opened, tmp_path: Path, budget: int | None = None, slots: int = 1) -> Coordinator:
    plan = plan_constraints(opened.spec, {"gpu_memory_gb": None, "host_memory_gb": 24.0})
    return Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=InlineRunner(),
        slots=[Slot(i, None, 1) for i in range(slots)],
        home=tmp_path,
        device="cpu",
        plan=plan,
        budget_trials=budget or opened.study.user_attrs["budget_trials"],
        wall_time_s=None,
    )


def test_reference_then_baseline_then_search(tmp_path: Path) -> None:
    opened = open_new(tmp_path)
    summary = coordinator(opened, tmp_path).run()
    trials = opened.study.get_trials()
    assert trials[0].user_attrs["role"] == "reference"
    assert trials[1].user_attrs["role"] == "baseline"
    assert all(t.user_attrs["role"] == "search" for t in trials[2:])
    assert summary.measured == 8
    assert sum(1 for t in trials if t.user_attrs.get("measured")) == 8
    assert Path(trials[0].user_attrs["reference_output"]).exists()
    # the reference compared with itself is perfect; the noisy baseline is not
    assert trials[0].values[1] == 100.0
    assert trials[1].values[1] < 60
    # the disabled peak_vram constraint is absent, the quality constraint present
    assert set(named_constraints(trials[1])) == {"outcome", "psnr_db>=15"}
    # only the per-key form: the legacy list (optuna-dashboard's) lives in the dashboard view, else
    # FrozenTrial.constraints would merge both and a sampler would see every constraint twice
    assert "constraints" not in trials[1].system_attrs


def test_rule_breaking_candidates_are_recorded_never_run(tmp_path: Path) -> None:
    """A rule-breaking proposal is told to the sampler as an infeasible point (like OOM), so it learns the wall."""
    opened = open_new(tmp_path)
    opened.study.enqueue_trial({"sleep_s": 0.001, "noise": 40, "batch_size": 2})
    coordinator(opened, tmp_path, budget=3).run()
    invalid = [t for t in opened.study.get_trials() if t.user_attrs.get("outcome") == "INVALID"]
    assert invalid and invalid[0].state == TrialState.COMPLETE and invalid[0].user_attrs["placeholder_values"]
    assert invalid[0].constraints["outcome"] == 1.0, "infeasible for the sampler"
    measured_latencies = [t.values[0] for t in opened.study.get_trials() if t.user_attrs.get("outcome") == "OK"]
    assert invalid[0].values[0] > max(measured_latencies), "placeholder worse than anything measured"
    assert invalid[0].user_attrs["reason"] == "noise 40 with batch 2 is refused by a rule"
    assert not invalid[0].user_attrs["measured"]
    assert not (tmp_path / "s" / f"trial_{invalid[0].number:05d}").exists(), "never run"


def test_a_setting_seen_before_is_not_run_again(tmp_path: Path) -> None:
    opened = open_new(tmp_path)
    setting = {"sleep_s": 0.003, "noise": 10, "batch_size": 1}
    opened.study.enqueue_trial(setting)
    opened.study.enqueue_trial(setting)
    coordinator(opened, tmp_path, budget=4).run()
    trials = opened.study.get_trials()
    first, copy = trials[2], trials[3]
    assert copy.user_attrs["duplicate_of"] == first.number
    assert copy.values == first.values and not copy.user_attrs["measured"]
    assert not (tmp_path / "s" / f"trial_{copy.number:05d}").exists()


def test_oom_is_an_infeasible_point_and_crash_a_failure(tmp_path: Path) -> None:
    text = SPEC_TEXT.replace(
        "  batch_size: {type: categorical, choices: [1, 2]}",
        "  batch_size: {type: categorical, choices: [1, 2]}\n"
        "  behaviour: {type: categorical, choices: [ok, device_oom, raise]}",
    )
    text = text.replace("batch_size: 1}", "batch_size: 1, behaviour: ok}")
    opened = open_new(tmp_path, text)
    opened.study.enqueue_trial({"sleep_s": 0.001, "noise": 5, "batch_size": 1, "behaviour": "device_oom"})
    opened.study.enqueue_trial({"sleep_s": 0.001, "noise": 5, "batch_size": 1, "behaviour": "raise"})
    coordinator(opened, tmp_path, budget=4).run()
    trials = {t.user_attrs.get("outcome"): t for t in opened.study.get_trials()[2:4]}
    oom, crash = trials["OOM"], trials["CRASH"]
    assert oom.state == TrialState.COMPLETE and oom.constraints["outcome"] == 1.0
    assert oom.user_attrs["placeholder_values"]
    measured_latencies = [t.values[0] for t in opened.study.get_trials()[:2]]
    assert oom.values[0] > max(measured_latencies), "the wall is worse than anything measured"
    assert crash.state == TrialState.FAIL and "simulated workload failure" in crash.user_attrs["reason"]


def test_interrupted_trials_are_rerun_on_resume(tmp_path: Path) -> None:
    opened = open_new(tmp_path, trials=5)
    coordinator(opened, tmp_path, budget=3).run()
    # a coordinator that died mid-trial leaves a RUNNING trial behind (its process on this host is gone)
    stale = opened.study.ask()
    stale.suggest_float("sleep_s", 0.001, 0.02, step=0.001)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale.set_user_attr("worker", f"{HOST}:{gone.pid}")
    url = opened.storage_url
    resumed = load_study(url, "s")
    summary = coordinator(resumed, tmp_path).run()
    trials = resumed.study.get_trials()
    assert trials[stale.number].state == TrialState.FAIL
    assert trials[stale.number].user_attrs["outcome"] == "INTERRUPTED"
    assert any(t.user_attrs.get("rerun_of") == stale.number for t in trials)
    assert sum(1 for t in trials if t.user_attrs.get("measured")) == 5
    assert summary.measured == 5


def test_parallel_slots_complete_the_budget(tmp_path: Path) -> None:
    opened = open_new(tmp_path, trials=8)
    coordinator(opened, tmp_path, slots=2).run()
    measured = [t for t in opened.study.get_trials() if t.user_attrs.get("measured")]
    assert len(measured) == 8
    assert {t.user_attrs["slot"] for t in measured} == {"cpu:0", "cpu:1"}


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random", "grid"])
def test_samplers(tmp_path: Path, sampler: str) -> None:
    opened = open_new(tmp_path, trials=5, sampler=sampler)
    summary = coordinator(opened, tmp_path).run()
    assert summary.measured == 5


def test_existing_study_name_is_refused(tmp_path: Path) -> None:
    from tuner.errors import StudyError

    open_new(tmp_path)
    with pytest.raises(StudyError, match="already exists"):
        open_new(tmp_path)


def test_a_live_host_waits_for_a_trial_running_elsewhere_and_redoes_it_when_that_host_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduces a fleet race (CI, ``test_three_workers_share_a_study_and_survive_a_dead_host[sqlite]``): the
    live hosts met the trial budget while another host's trial still ran; they ended at once, the trial's host
    died, and its setting was left WAITING with nobody to run it. A coordinator now stays while a trial runs
    elsewhere (it may die and be owed), reclaims it once its heartbeat is stale, and runs its rerun."""
    monkeypatch.setenv("TUNER_HEARTBEAT_S", "1")
    monkeypatch.setenv("TUNER_GRACE_PERIOD_S", "2")
    opened = open_new(tmp_path, trials=5)
    coordinator(opened, tmp_path, budget=3).run()
    elsewhere = opened.study.ask()  # another host's trial: it beat once, then its host died
    suggest(elsewhere, opened.spec)
    elsewhere.set_user_attr("worker", "otherhost:4242")
    elsewhere.set_user_attr("slot", "gpu:0")
    from tuner.storage import store

    store.record_heartbeat(opened.study, [store.trial_id(elsewhere)])
    resumed = load_study(opened.storage_url, "s")
    summary = coordinator(resumed, tmp_path, budget=3).run()
    trials = resumed.study.get_trials()
    rerun = [t for t in trials if t.user_attrs.get("rerun_of") == elsewhere.number]
    assert trials[elsewhere.number].user_attrs["outcome"] == "INTERRUPTED", trials[elsewhere.number].user_attrs
    assert [t.state for t in rerun] == [TrialState.COMPLETE], "the dead host's place in the budget is its rerun's"
    assert (summary.measured, summary.ran) == (4, 1)


def test_a_dead_hosts_run_is_redone_when_the_others_met_the_budget(tmp_path: Path) -> None:
    """Reproduces a fleet race (CI, ``test_three_workers_share_a_study_and_survive_a_dead_host``): the live hosts
    fill the trial budget while a dead host's trial still counts as running (it held a place, the overshoot the fleet
    allows), the trial is reclaimed after, and its setting must still be measured -- not left WAITING."""
    opened = open_new(tmp_path, trials=5)
    coordinator(opened, tmp_path, budget=3).run()
    stale = opened.study.ask()  # a trial a host started, then died: its process is gone
    suggest(stale, opened.spec)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale.set_user_attr("worker", f"{HOST}:{gone.pid}")
    stale.set_user_attr("slot", "cpu:7")
    resumed = load_study(opened.storage_url, "s")
    summary = coordinator(resumed, tmp_path, budget=3).run()
    trials = resumed.study.get_trials()
    rerun = [t for t in trials if t.user_attrs.get("rerun_of") == stale.number]
    assert trials[stale.number].user_attrs["outcome"] == "INTERRUPTED"
    assert [t.state for t in rerun] == [TrialState.COMPLETE], "the dead host's place in the budget is its rerun's"
    assert rerun[0].user_attrs["measured"], rerun[0].user_attrs
    assert (summary.measured, summary.ran) == (4, 1)
    assert not [t for t in trials if t.state == TrialState.WAITING]
