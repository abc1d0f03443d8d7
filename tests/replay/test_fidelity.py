"""Rank agreement and the screening replay of multi-fidelity, on a tiny SYNTHETIC table."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from replay_fixtures import write_tiny_table

from tuner.replay.fidelity import kendall_tau, rank_agreement, screening_replay
from tuner.replay.methods import Target
from tuner.replay.table import load_hardware_types, load_table


def _naive_tau_b(a: list[float], b: list[float]) -> float:
    concordant = discordant = ties_a = ties_b = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        da, db = a[i] - a[j], b[i] - b[j]
        if da == 0 and db == 0:
            continue
        if da == 0:
            ties_a += 1
        elif db == 0:
            ties_b += 1
        elif da * db > 0:
            concordant += 1
        else:
            discordant += 1
    return (concordant - discordant) / ((concordant + discordant + ties_a) * (concordant + discordant + ties_b)) ** 0.5


def test_kendall_tau_is_one_for_the_same_order_minus_one_reversed_and_tau_b_with_ties() -> None:
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    a, b = [1.0, 2.0, 2.0, 3.0, 5.0, 4.0], [2.0, 1.0, 3.0, 3.0, 6.0, 5.0]
    assert kendall_tau(a, b) == pytest.approx(_naive_tau_b(a, b))


def test_a_proxy_equal_to_the_full_table_agrees_fully_and_screening_keeps_the_whole_front(tmp_path: Path) -> None:
    table = load_table(load_hardware_types(write_tiny_table(tmp_path / "table"))["tiny:cpu1t"])
    agreement = rank_agreement(table, table)
    assert agreement == {"latency_p50_s": pytest.approx(1.0), "stlpips_alex": pytest.approx(1.0)}
    run = screening_replay(Target.of(table), table, seed=4)
    assert run.screened_final_share == pytest.approx(1.0)
    # screening paid every proxy run plus the promoted full runs; the plain walk paid each full run once
    assert run.promoted < run.settings
    assert run.screened_total_s > 0 and run.full_total_s > 0
    assert run.full_cost_to[0.99] is not None and run.screened_cost_to[0.99] is not None
