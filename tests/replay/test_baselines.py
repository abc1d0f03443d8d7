"""The benchmark's baseline samplers: the hand sweep's documented order, the hill climb's moves."""

from __future__ import annotations

from pathlib import Path

import optuna
from replay_fixtures import write_tiny_table

from tuner.replay.baselines import HillClimbSampler, SweepSampler, sweep_order, sweep_values
from tuner.replay.methods import Method, Target, replay_once
from tuner.replay.table import load_hardware_types, load_table, replay_spec
from tuner.spec.candidate import canonical_key
from tuner.spec.space import suggest


def tiny_table(tmp_path: Path):
    return load_table(load_hardware_types(write_tiny_table(tmp_path / "table"))["tiny:cpu1t"])


def test_values_move_away_from_the_start_the_lower_side_first() -> None:
    assert sweep_values([6, 12, 18, 24], 24) == [24, 18, 12, 6]
    assert sweep_values(["a", "b", "c", "d"], "b") == ["b", "a", "c", "d"]
    assert sweep_values([1, 2, 3, 4, 5], 3) == [3, 2, 4, 1, 5]
    assert sweep_values([False, True], True) == [True, False]
    assert sweep_values([1, 2], 7) == [1, 2]  # not a value: the parameter's own order


def test_the_sweep_nests_parameters_in_spec_order_the_last_fastest(tmp_path: Path) -> None:
    spec, _ = replay_spec(tiny_table(tmp_path), budget_trials=20)
    order = [(s["steps"], s["res"], s["fast"], s["mode"]) for s in sweep_order(spec)]
    assert order[:5] == [
        (4, 64, True, "a"),
        (4, 64, False, "a"),
        (4, 32, True, "a"),
        (4, 32, False, "a"),
        (3, 64, True, "a"),
    ]
    assert order[-1] == (1, 32, False, "a") and len(order) == len(set(order)) == 16


def test_the_sweep_proposes_in_order_skips_what_the_study_holds_and_exhausts(tmp_path: Path) -> None:
    spec, _ = replay_spec(tiny_table(tmp_path), budget_trials=20)
    sampler = SweepSampler(spec)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.enqueue_trial(dict(spec.reference or {}))
    proposed = []
    while not sampler.exhausted:
        trial = study.ask()
        proposed.append(tuple(suggest(trial, spec).values()))
        study.tell(trial, [1.0, 1.0])
    expected = [tuple(s.values()) for s in sweep_order(spec)]
    assert proposed[0] == expected[0]  # the enqueued reference, which the sweep then skips
    assert proposed[1:] == expected[1:]
    assert len(study.trials) == 16


def test_the_hill_climb_starts_next_to_the_baseline_and_never_repeats(tmp_path: Path) -> None:
    table = tiny_table(tmp_path)
    replay = replay_once(
        Target.of(table), Method("hillclimb", "hillclimb"), seed=1, budget=20, workdir=tmp_path / "run"
    )
    assert replay.stopped_because.startswith("grid exhausted")
    storage = f"sqlite:///{tmp_path / 'run' / 'hillclimb-seed1.db'}"
    study = optuna.load_study(study_name="hillclimb-seed1", storage=storage)
    trials = sorted(study.get_trials(), key=lambda t: t.number)
    assert [t.user_attrs["role"] for t in trials[:2]] == ["reference", "baseline"]
    baseline, first = trials[1].params, trials[2].params
    changed = [name for name in baseline if baseline[name] != first[name]]
    assert len(changed) == 1, (baseline, first)
    orders: dict[str, list[object]] = {"steps": [1, 2, 3, 4], "res": [32, 64], "fast": [False, True]}
    values = orders[changed[0]]
    assert abs(values.index(first[changed[0]]) - values.index(baseline[changed[0]])) == 1
    keys = [canonical_key(t.params) for t in trials]
    assert len(keys) == len(set(keys)) == 16  # every setting once, then exhausted


def test_the_hill_climb_jumps_when_the_front_has_no_unvisited_neighbour(tmp_path: Path) -> None:
    spec, _ = replay_spec(tiny_table(tmp_path), budget_trials=20)
    sampler = HillClimbSampler(spec, seed=0)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    seen = set()
    for _ in range(16):
        trial = study.ask()
        seen.add(tuple(suggest(trial, spec).values()))
        study.tell(trial, state=optuna.trial.TrialState.FAIL)  # nothing feasible: jumps from the baseline's area
    assert len(seen) == 16 and sampler.exhausted
