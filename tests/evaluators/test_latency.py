"""Latency measurement against a fake clock: exact samples, no wall-time dependence."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tuner.evaluators.latency import LatencySettings, LatencyStats, measure_latency


class FakeWorkload:
    """A clock whose time advances only when ``call`` runs, by the next scripted duration.

    ``events`` records the order of calls, syncs and clock reads.
    """

    def __init__(self, durations_s: list[float]) -> None:
        self.durations_s = list(durations_s)
        self.now_s = 1000.0
        self.calls = 0
        self.events: list[str] = []

    def clock(self) -> float:
        self.events.append("clock")
        return self.now_s

    def synchronize(self) -> None:
        self.events.append("sync")

    def call(self) -> int:
        self.events.append("call")
        self.now_s += self.durations_s[self.calls]
        self.calls += 1
        return self.calls


def measure(durations_s: list[float], **settings: Any) -> tuple[LatencyStats, int, FakeWorkload]:
    fake = FakeWorkload(durations_s)
    stats, result = measure_latency(
        fake.call,
        fake.synchronize,
        LatencySettings(**settings),  # type: ignore[arg-type]
        clock=fake.clock,
    )
    return stats, result, fake


def test_warmup_calls_are_not_timed() -> None:
    stats, _, fake = measure([100.0, 100.0, 1.0, 1.0, 1.0], warmup=2, min_repeats=3, max_repeats=3)
    assert stats.samples_s == (1.0, 1.0, 1.0)
    assert stats.warmup == 2
    assert fake.calls == 5


def test_a_last_warmup_as_fast_as_the_repeats_is_counted_and_a_slow_one_is_not() -> None:
    stats, _, fake = measure([5.0, 1.03, 1.0, 1.0], warmup=2, min_repeats=2, max_repeats=3, count_warmup_within=0.04)
    assert stats.samples_s == pytest.approx((1.03, 1.0)) and stats.warmup == 1 and stats.warmup_counted, (
        "counted: first"
    )
    assert fake.calls == 3, "two samples from three calls: one call saved"
    assert stats.p50_s == pytest.approx(1.015), "moved by half the share at most"
    slow, _, fake = measure([1.2, 1.0, 1.0], warmup=1, min_repeats=2, max_repeats=2, count_warmup_within=0.04)
    assert slow.samples_s == (1.0, 1.0) and slow.warmup == 1 and not slow.warmup_counted and fake.calls == 3
    plain, _, _ = measure([1.0, 1.0, 1.0], warmup=1, min_repeats=2, max_repeats=2)
    assert plain.samples_s == (1.0, 1.0) and not plain.warmup_counted, "without the setting, never counted"
    _, _, fake = measure([1.0, 1.0], warmup=1, min_repeats=1, max_repeats=1, count_warmup_within=0.04)
    counted = ["sync", "clock", "call", "sync", "clock"]  # the candidate is timed as a repeat is
    assert fake.events[:5] == counted


def test_each_repeat_is_synchronised_before_both_clock_reads() -> None:
    _, _, fake = measure([1.0] * 3, warmup=1, min_repeats=2, max_repeats=2)
    warmup = ["clock", "call", "sync", "clock"]  # a warmup call's device work ends inside it
    repeat = ["sync", "clock", "call", "sync", "clock"]
    assert fake.events == warmup + repeat + repeat


def test_percentiles_mean_and_sample_cv() -> None:
    stats, _, _ = measure([1.0, 2.0, 3.0, 4.0, 5.0], warmup=0, min_repeats=5, max_repeats=5)
    assert stats.p50_s == pytest.approx(3.0)
    assert stats.p95_s == pytest.approx(4.8)  # linear interpolation: 4 + 0.8 * (5 - 4)
    assert stats.mean_s == pytest.approx(3.0)
    assert stats.std_s == pytest.approx(math.sqrt(2.5))  # sample std, ddof=1
    assert stats.cv == pytest.approx(math.sqrt(2.5) / 3.0)
    assert stats.noisy is True
    assert stats.converged is False


def test_stops_at_min_repeats_when_already_steady() -> None:
    stats, _, fake = measure([2.0] * 10, warmup=0, min_repeats=3, max_repeats=10, cv_target=0.05)
    assert len(stats.samples_s) == 3
    assert fake.calls == 3
    assert stats.cv == 0.0
    assert stats.converged is True
    assert stats.noisy is False


def test_keeps_repeating_until_cv_reaches_target() -> None:
    durations = [1.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    # CV (ddof=1) after 3, 4, 5, 6 repeats: 0.247, 0.222, 0.203, 0.188 -> first <= 0.2 at 6.
    stats, _, _ = measure(durations, warmup=0, min_repeats=3, max_repeats=10, cv_target=0.2)
    assert len(stats.samples_s) == 6
    expected_cv = np.std(durations[:6], ddof=1) / np.mean(durations[:6])
    assert stats.cv == pytest.approx(expected_cv)
    assert stats.cv is not None and stats.cv <= 0.2
    assert stats.converged is True


def test_stops_at_max_repeats_when_never_steady() -> None:
    stats, _, _ = measure([1.0, 3.0] * 10, warmup=0, min_repeats=3, max_repeats=7, cv_target=0.05, noisy_cv=0.10)
    assert len(stats.samples_s) == 7
    assert stats.converged is False
    assert stats.noisy is True


def test_noisy_flag_uses_noisy_cv_threshold() -> None:
    # CV of (1.0, 1.1, 1.0, 1.1, ...) over 4 samples is about 0.055: above target, below noisy.
    stats, _, _ = measure([1.0, 1.1] * 5, warmup=0, min_repeats=4, max_repeats=4, cv_target=0.01, noisy_cv=0.10)
    assert stats.cv is not None and 0.01 < stats.cv < 0.10
    assert stats.noisy is False
    assert stats.converged is False


def test_time_budget_stops_early_but_never_below_min_repeats() -> None:
    stats, _, _ = measure([1.0, 3.0] * 10, warmup=0, min_repeats=3, max_repeats=10, cv_target=0.01, max_seconds=5.0)
    assert stats.samples_s == (1.0, 3.0, 1.0)  # 5 s of timed work after 3 repeats
    stats, _, _ = measure([1.0, 3.0] * 10, warmup=0, min_repeats=3, max_repeats=10, cv_target=0.01, max_seconds=0.5)
    assert len(stats.samples_s) == 3
    stats, _, _ = measure([1.0, 3.0] * 10, warmup=0, min_repeats=3, max_repeats=10, cv_target=0.01, max_seconds=9.0)
    assert len(stats.samples_s) == 5  # 1+3+1+3 = 8 < 9, 1+3+1+3+1 = 9


def test_returns_the_last_calls_value() -> None:
    _, result, fake = measure([1.0] * 10, warmup=2, min_repeats=3, max_repeats=3)
    assert result == fake.calls == 5


def test_call_exceptions_propagate() -> None:
    def out_of_memory() -> None:
        raise MemoryError("boom")

    with pytest.raises(MemoryError):
        measure_latency(out_of_memory, lambda: None, LatencySettings())


def test_backwards_clock_is_an_error() -> None:
    readings = iter([10.0, 9.0])
    with pytest.raises(RuntimeError, match="backwards"):
        measure_latency(lambda: None, lambda: None, LatencySettings(warmup=0), clock=lambda: next(readings))


def test_metrics_names_units_directions_and_throughput() -> None:
    stats, _, _ = measure([2.0, 2.0, 4.0], warmup=0, min_repeats=3, max_repeats=3)
    metrics = {m.name: m for m in stats.to_metrics(items=4)}
    assert set(metrics) == {
        "latency_p50_s",
        "latency_p95_s",
        "latency_mean_s",
        "latency_cv",
        "latency_noisy",
        "repeats",
        "throughput_items_per_s",
    }
    for name in ("latency_p50_s", "latency_p95_s", "latency_mean_s"):
        assert metrics[name].unit == "s" and metrics[name].direction == "minimize"
    assert metrics["latency_p50_s"].value == pytest.approx(2.0)
    assert metrics["latency_p95_s"].value == pytest.approx(3.8)
    assert metrics["latency_cv"].unit == "1"
    assert metrics["latency_noisy"].value == 1.0
    assert metrics["repeats"].value == 3.0
    throughput = metrics["throughput_items_per_s"]
    assert throughput.value == pytest.approx(4 / 2.0)
    assert throughput.direction == "maximize"
    assert all(m.available for m in metrics.values())
    with pytest.raises(ValueError):
        stats.to_metrics(items=0)


def test_single_repeat_reports_spread_as_unavailable() -> None:
    stats, _, _ = measure([1.5], warmup=0, min_repeats=1, max_repeats=1)
    assert stats.std_s is None and stats.cv is None
    metrics = {m.name: m for m in stats.to_metrics(items=1)}
    assert metrics["latency_p50_s"].value == pytest.approx(1.5)
    for name in ("latency_cv", "latency_noisy"):
        assert metrics[name].value is None
        assert metrics[name].reason == "needs at least two repeats"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"warmup": -1},
        {"min_repeats": 0},
        {"min_repeats": 5, "max_repeats": 4},
        {"max_repeats": 2.5},
        {"min_repeats": True},
        {"cv_target": -0.1},
        {"cv_target": float("nan")},
        {"noisy_cv": float("inf")},
        {"max_seconds": 0},
        {"max_seconds": -1.0},
    ],
)
def test_invalid_settings_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="LatencySettings"):
        LatencySettings(**kwargs)  # type: ignore[arg-type]


def test_default_settings_are_valid() -> None:
    settings = LatencySettings()
    assert (settings.warmup, settings.min_repeats, settings.max_repeats) == (1, 3, 10)
    assert settings.max_seconds is None


def measure_until(
    durations_s: list[float], deadline_after_s: float, **settings: float | int | None
) -> tuple[LatencyStats, FakeWorkload]:
    fake = FakeWorkload(durations_s)
    stats, _ = measure_latency(
        fake.call,
        fake.synchronize,
        LatencySettings(**settings),  # type: ignore[arg-type]
        clock=fake.clock,
        deadline=fake.now_s + deadline_after_s,
    )
    return stats, fake


def test_deadline_stops_repeats_a_further_call_would_overrun() -> None:
    # warmup 10 s, then 10 s repeats: at 20 s a third call would end at 30 s, past the 25 s deadline
    stats, fake = measure_until([10.0] * 8, 25.0, warmup=1, min_repeats=3, max_repeats=6)
    assert stats.samples_s == (10.0,)
    assert fake.calls == 2
    assert stats.cut_short is True
    assert stats.converged is False
    assert stats.warmup == 1


def test_deadline_uses_the_longest_repeat_as_the_prediction() -> None:
    # repeats 2, 6, 2: at 10 s the next is predicted to take 6 s -> 16 s > 15 s deadline
    stats, _ = measure_until([2.0, 6.0, 2.0, 2.0, 2.0], 15.0, warmup=0, min_repeats=5, max_repeats=5)
    assert stats.samples_s == (2.0, 6.0, 2.0)
    assert stats.cut_short is True


def test_deadline_skips_warmup_calls_but_always_times_one_repeat() -> None:
    stats, fake = measure_until([30.0, 30.0, 30.0], 20.0, warmup=2, min_repeats=3, max_repeats=3)
    assert stats.warmup == 1  # the second warmup call would have ended at 60 s
    assert stats.samples_s == (30.0,)  # made although it ends past the deadline: nothing else to report
    assert fake.calls == 2
    assert stats.cut_short is True


def test_a_deadline_that_leaves_room_changes_nothing() -> None:
    stats, fake = measure_until([1.0] * 10, 1000.0, warmup=1, min_repeats=3, max_repeats=3)
    assert stats.samples_s == (1.0, 1.0, 1.0)
    assert stats.cut_short is False
    assert stats.warmup == 1 and fake.calls == 4


def test_repeats_stop_once_every_call_is_past_the_ceiling_and_not_within_its_margin() -> None:
    """A trial the front surely beats (issue 38, item 3b): one timed call past the ceiling ends the repeats."""
    stats, _, fake = measure([9.0, 2.0, 2.0, 2.0], warmup=1, min_repeats=3, max_repeats=3, ceiling_s=1.0)
    assert stats.samples_s == (2.0,) and stats.past_ceiling and fake.calls == 2, "the warm-up proves nothing"
    near, _, _ = measure([1.04, 1.04, 1.04], warmup=0, min_repeats=3, max_repeats=3, ceiling_s=1.0)
    assert len(near.samples_s) == 3 and not near.past_ceiling, "within 5 %: a timing's noise, measured in full"
    mixed, _, _ = measure([0.5, 2.0, 2.0], warmup=0, min_repeats=3, max_repeats=3, ceiling_s=1.0)
    assert len(mixed.samples_s) == 3 and not mixed.past_ceiling, "one fast call: not every call is past it"
    free, _, _ = measure([2.0, 2.0, 2.0], warmup=0, min_repeats=3, max_repeats=3)
    assert len(free.samples_s) == 3 and not free.past_ceiling


def test_repeats_stop_once_the_samples_settle_the_trials_place_on_the_front() -> None:
    """Issue 38, item 3c: two timed calls clear (by 5 %) of every front latency end the repeats -- more could move
    the p50, not which front trials are faster -- while a front latency inside their span asks for the rest."""
    fronts = (0.5, 2.0)
    stats, _, fake = measure([1.0, 1.02, 1.0, 1.0, 1.0], warmup=0, min_repeats=5, max_repeats=5, thresholds_s=fronts)
    assert stats.samples_s == pytest.approx((1.0, 1.02)) and stats.settled and fake.calls == 2, "after two calls"
    near, _, _ = measure([1.0, 1.02] + [1.0] * 3, warmup=0, min_repeats=5, max_repeats=5, thresholds_s=(1.06,))
    assert len(near.samples_s) == 5 and not near.settled, "a front trial within 5 % of the calls: measured in full"
    inside, _, _ = measure([0.9, 1.3] + [1.0] * 3, warmup=0, min_repeats=5, max_repeats=5, thresholds_s=(1.1,))
    assert len(inside.samples_s) == 5 and not inside.settled, "a front latency between the calls"
    one, _, _ = measure([1.0, 1.1, 1.0], warmup=0, min_repeats=1, max_repeats=5, cv_target=0.01, thresholds_s=fronts)
    assert len(one.samples_s) == 2 and one.settled, "never on one call: one call tells no spread"
    done, _, _ = measure([1.0] * 5, warmup=0, min_repeats=2, max_repeats=5, thresholds_s=fronts)
    assert len(done.samples_s) == 2 and not done.settled, "stopped by the CV rule anyway: not marked settled"
    free, _, _ = measure([1.0, 1.02] + [1.0] * 3, warmup=0, min_repeats=5, max_repeats=5)
    assert len(free.samples_s) == 5 and not free.settled, "no thresholds: the protocol as before"
    with pytest.raises(ValueError, match="thresholds_s"):
        LatencySettings(thresholds_s=(-1.0,))
