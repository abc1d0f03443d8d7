"""A warm worker reloads less when the coordinator starts first the proposal its loaded model serves (issue 38,
item 4: order queued settings so reload-inducing parameters change less often, without biasing the search).

The unit tests pin :class:`~tuner.study.load_order.LoadOrder`'s choices; the study test runs the same seeded
random proposals twice through a real warm worker (a SIMULATED model whose loads are logged) and checks that
asking ahead runs exactly the same settings, every one asked, with fewer loads."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.cli.status_view import trial_note
from tuner.runner.base import Slot
from tuner.spec.candidate import Candidate
from tuner.storage.records import TrialRecord
from tuner.study.load_order import LoadOrder
from tuner.testing.simulated_reloads import loads_logged

SLOT = Slot(0, None, 1)


def proposal(number: int, precision: str, role: str = "search") -> tuple[Any, Candidate, str]:
    return (number, Candidate.create({"precision": precision, "n": number}, {}), role)


def numbers(held: list[Any]) -> list[int]:
    return [h[0] for h in held]


def test_a_proposal_the_loaded_model_serves_starts_and_another_waits() -> None:
    order = LoadOrder(("precision",), window=3)
    assert order.keep(proposal(1, "bf16"), SLOT, None)[0] == 1, "nothing loaded yet: it starts"
    order.started(SLOT, proposal(1, "bf16")[1])
    assert order.keep(proposal(2, "bf16"), SLOT, None)[0] == 2, "loaded: it starts"
    assert order.keep(proposal(3, "fp32"), SLOT, None) is None, "another load: set aside, ask again"
    assert order.next_aside(SLOT, None) is None, "room to ask another: none forced"
    assert order.keep(proposal(4, "bf16"), SLOT, None)[0] == 4
    assert order.keep(proposal(5, "fp32"), SLOT, None) is None, "two wait, a third may still be asked"
    assert order.next_aside(SLOT, None) is None
    forced = order.keep(proposal(6, "fp32"), SLOT, None)
    assert forced is not None and forced[0] == 3, "the window of three is full: the oldest starts (first in, first out)"
    order.started(SLOT, forced[1])
    assert numbers([order.next_aside(SLOT, None), order.next_aside(SLOT, None)]) == [5, 6], "now loaded: in turn"
    assert order.waiting() == 0


def test_a_full_window_runs_the_oldest_and_keeps_the_new_one_waiting() -> None:
    order = LoadOrder(("precision",), window=2)
    order.started(SLOT, proposal(0, "fp32")[1])
    assert order.keep(proposal(1, "bf16"), SLOT, None) is None
    started = order.keep(proposal(2, "int8"), SLOT, None)
    assert started is not None and started[0] == 1, "no room for both: the oldest starts, the new one waits"
    assert numbers(order.aside) == [2]


def test_no_more_is_asked_than_the_trial_budget_lets_start() -> None:
    order = LoadOrder(("precision",), window=4)
    order.started(SLOT, proposal(0, "fp32")[1])
    held = order.keep(proposal(1, "bf16"), SLOT, remaining=1)
    assert held is not None and held[0] == 1, "one trial left in the budget: it starts, nothing is asked ahead"
    assert order.keep(proposal(2, "bf16"), SLOT, remaining=2) is None, "two left: it may wait for one more"
    forced = order.next_aside(SLOT, remaining=1)
    assert forced is not None and forced[0] == 2, "then only it fits: it starts"


def test_a_waiting_proposal_the_sampler_proposes_again_starts() -> None:
    order = LoadOrder(("precision",), window=3)
    order.started(SLOT, proposal(0, "fp32")[1])
    waiting = proposal(1, "bf16")
    assert order.keep(waiting, SLOT, None) is None
    assert order.next_aside(SLOT, None) is None, "room to ask another"
    again = order.next_aside(SLOT, None, wanted={waiting[1].key})
    assert again is not None and again[0] == 1, "a later proposal repeats it (a twin waits): it runs now"


@pytest.mark.parametrize("role", ["reference", "baseline", "shape_reference"])
def test_only_search_proposals_wait(role: str) -> None:
    order = LoadOrder(("precision",), window=3)
    order.started(SLOT, proposal(0, "fp32")[1])
    assert order.keep(proposal(1, "bf16", role), SLOT, None) is not None


def test_off_in_order_with_a_window_of_one_or_without_reload_on() -> None:
    for order in (LoadOrder(("precision",), window=1), LoadOrder((), window=3)):
        order.started(SLOT, proposal(0, "fp32")[1])
        assert order.keep(proposal(1, "bf16"), SLOT, None) is not None
        assert not order.active


SPEC = """
name: reloads
workload:
  timeout_s: 60
  worker: warm
  python:
    factory: tuner.testing.simulated_reloads:make_simulated_model
    kwargs: {{load_log: "{log}"}}
    reload_on: [precision]
parameters:
  precision: {{type: categorical, choices: [fp32, bf16]}}
  sleep_s: {{type: categorical, choices: [0.001, 0.002, 0.003, 0.004, 0.005]}}
  noise: {{type: categorical, choices: [0, 10, 20, 30]}}
objectives:
  - {{metric: latency_p50_s, direction: minimize}}
  - {{metric: psnr_db, direction: maximize}}
reference: {{precision: fp32, sleep_s: 0.005, noise: 0}}
measurement: {{warmup: 0, min_repeats: 1, max_repeats: 1}}
budget: {{trials: 14}}
sampler: {{name: random, skip_dominated: null, predicted_gain: null, reload_lookahead: {lookahead}}}
seed: 3
"""


def run_study(tmp_path: Path, lookahead: int) -> tuple[list[optuna.trial.FrozenTrial], int]:
    """The study's trials and the loads its warm worker made."""
    import tuner

    home = tmp_path / f"lookahead{lookahead}"
    home.mkdir()
    log = home / "loads.txt"
    spec_path = home / "spec.yaml"
    spec_path.write_text(SPEC.format(log=log, lookahead=lookahead))
    url = f"sqlite:///{home / 'studies.db'}"
    opened = tuner.create_study(spec_path, study_name="s", storage=url, home=home)
    tuner.run_study(opened, home=home, use_mlflow=False)
    return optuna.load_study(study_name="s", storage=url).get_trials(), len(loads_logged(log))


def test_asking_ahead_runs_the_same_settings_with_fewer_reloads(tmp_path: Path) -> None:
    in_order, loads_in_order = run_study(tmp_path, 1)
    ahead, loads_ahead = run_study(tmp_path, 3)
    for trials in (in_order, ahead):
        assert all(t.state is optuna.trial.TrialState.COMPLETE for t in trials), "every proposal asked ran or was told"
        assert sum(1 for t in trials if t.user_attrs.get("measured")) == 14, "the whole trial budget measured"
    settings = [Counter(tuple(sorted(t.params.items())) for t in trials) for trials in (in_order, ahead)]
    assert settings[0] == settings[1], "the seeded proposals are the same: only their turn moved"
    assert loads_ahead < loads_in_order, (loads_ahead, loads_in_order)
    ran = sorted((t for t in ahead if t.user_attrs.get("measured")), key=lambda t: t.datetime_complete)
    assert [t.number for t in ran] != sorted(t.number for t in ran), "some proposal waited for its precision"
    waited = [t for t in ahead if "waiting" in t.user_attrs]
    assert waited and all(
        t.user_attrs["waiting"].startswith("asked ahead: waits for a worker with precision=") for t in waited
    ), "each proposal set aside says why (status shows it while it waits)"
    assert not any("waiting" in t.user_attrs for t in in_order)


def test_status_says_why_an_asked_trial_waits_until_it_starts() -> None:
    why = LoadOrder(("precision",), window=3).waiting_note(proposal(4, "bf16")[1])
    assert why == "asked ahead: waits for a worker with precision=bf16 loaded"
    fields: dict[str, Any] = {
        "number": 4,
        "state": "RUNNING",
        "role": "search",
        "outcome": "RUNNING",
        "reason": None,
        "params": {},
        "derived": {},
        "values": None,
        "constraints": {},
        "metrics": {},
        "placeholder": False,
        "duplicate_of": None,
        "wall_time_s": None,
        "eval_time_s": None,
        "datetime_start": None,
        "datetime_complete": None,
        "waiting": why,
    }
    assert trial_note(TrialRecord(slot=None, **fields)) == why
    assert trial_note(TrialRecord(slot="cpu0", **fields)) == "", "started: it no longer waits"


def test_a_grid_runs_every_setting_though_the_last_ones_waited(tmp_path: Path) -> None:
    """A grid sampler says it is exhausted once every setting was proposed: the proposals still waiting for
    their precision then run, none is given back."""
    import tuner

    log = tmp_path / "loads.txt"
    spec_path = tmp_path / "spec.yaml"
    text = SPEC.format(log=log, lookahead=3).replace("name: random", "name: grid").replace("trials: 14", "trials: 60")
    spec_path.write_text(text.replace("choices: [0, 10, 20, 30]", "choices: [0, 30]"))
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    opened = tuner.create_study(spec_path, study_name="g", storage=url, home=tmp_path)
    tuner.run_study(opened, home=tmp_path, use_mlflow=False)
    trials = optuna.load_study(study_name="g", storage=url).get_trials()
    measured = {tuple(sorted(t.params.items())) for t in trials if t.user_attrs.get("measured")}
    assert len(measured) == 2 * 5 * 2, "the whole grid measured"
    assert not [t.number for t in trials if t.state is not optuna.trial.TrialState.COMPLETE], "none given back"
