"""Hypervolume, knee points and the latency–throughput knee on hand-computed cases."""

from __future__ import annotations

import pytest

from tuner.front.throughput import CurvePoint, knee
from tuner.pareto import Point, hypervolume, hypervolume_history, knee_point


def test_hypervolume_two_and_three_dimensions() -> None:
    # minimised points against reference (4, 4): staircases of unit-wide rectangles
    assert hypervolume([(1, 3)], (4, 4)) == 3.0
    assert hypervolume([(1, 3), (2, 2)], (4, 4)) == 3.0 + 2.0 * 1.0
    assert hypervolume([(1, 3), (2, 2), (3, 1)], (4, 4)) == 6.0
    assert hypervolume([(5, 1)], (4, 4)) == 0.0, "a point beyond the reference adds nothing"
    assert hypervolume([(1, 1, 1)], (2, 3, 4)) == 1 * 2 * 3
    assert hypervolume([(0, 1, 1), (1, 0, 0)], (2, 2, 2)) == pytest.approx(2 * 1 * 1 + 1 * 2 * 2 - 1 * 1 * 1)


def test_hypervolume_history_grows_and_turns_maximised_objectives() -> None:
    points = [Point(0, (3.0, 10.0)), Point(1, (2.0, 20.0)), Point(2, (4.0, 5.0)), Point(3, (1.0, 30.0))]
    history = hypervolume_history(points, ["minimize", "maximize"])
    values = [v for _, v in history]
    assert [n for n, _ in history] == [0, 1, 2, 3]
    assert values == sorted(values) and values[2] == values[1] and values[3] > values[2]


def test_knee_point_is_the_balanced_compromise() -> None:
    front = [Point(0, (1.0, 20.0)), Point(1, (2.0, 38.0)), Point(2, (6.0, 40.0))]
    chosen = knee_point(front, ["minimize", "maximize"])
    assert chosen is not None and chosen.number == 1
    assert knee_point([], ["minimize"]) is None


def test_latency_throughput_knee() -> None:
    curve = [
        CurvePoint(1, 0, 0.10, 10.0),
        CurvePoint(2, 1, 0.11, 18.0),
        CurvePoint(4, 2, 0.12, 33.0),
        CurvePoint(8, 3, 0.30, 36.0),
        CurvePoint(16, 4, 0.70, 38.0),
    ]
    found = knee(curve)
    assert found is not None and found.batch_size == 4
    assert knee(curve[:2]) is None
