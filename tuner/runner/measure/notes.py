"""The one-line notes a trial's result carries when its timed repeats stopped early: cut short by the time
limit (``share`` of the trial's ``timeout_s``), past the latency ceiling, or settled
(:func:`tuner.runner.measure.trial.result_of`)."""

from __future__ import annotations

from typing import Any


def settled_note(stats: Any, settings: Any) -> str:
    """One line: the repeats stopped once the timed calls settled the trial's place on the front."""
    from tuner.evaluators.latency import CEILING_MARGIN

    low, high = min(stats.samples_s), max(stats.samples_s)
    asked = (
        f"{settings.min_repeats}"
        if settings.min_repeats == settings.max_repeats
        else f"{settings.min_repeats}-{settings.max_repeats}"
    )
    return (
        f"repeats stopped settled: {len(stats.samples_s)} of {asked} repeats ({low:.4g}-{high:.4g} s), no front "
        f"latency within {CEILING_MARGIN:.0%} of them: more could not move its place on the front"
    )


def past_ceiling_note(fastest_s: float, ceiling_s: float) -> str:
    """One line: the repeats stopped because every timed call was past the latency ceiling."""
    return (
        f"repeats stopped: every timed call took >= {fastest_s:.4g} s, past the {ceiling_s:.4g} s of a front "
        "trial at least as good on every other objective (it cannot join the front)"
    )


def cut_short_note(stats: Any, settings: Any, timeout_s: float, share: float) -> str:
    """One line saying how a deadline shortened the measurement (``stats``: a cut-short ``LatencyStats``)."""
    asked = (
        f"{settings.min_repeats}"
        if settings.min_repeats == settings.max_repeats
        else f"{settings.min_repeats}-{settings.max_repeats}"
    )
    return (
        f"{len(stats.samples_s)} of {asked} repeats and {stats.warmup}/{settings.warmup} warmup fit in "
        f"{share:.0%} of the {timeout_s:.0f} s limit"
    )
