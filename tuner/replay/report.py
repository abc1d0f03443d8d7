"""What the search-efficiency benchmark reports: trials and device-seconds to a share of the front, curves, plots.

Statistics are over the seeds of a method. A seed that never reaches a target counts as
"more than its budget" (+inf), so the median and quartiles stay honest: a median past the
budget is shown as ``>N``; every cell also says how many seeds reached the target. The
hypervolume fraction after ``k`` trials of a study that stopped earlier (its space exhausted)
is its final fraction.

**Device-seconds** to a target are the replay's cumulative device-seconds
(:attr:`~tuner.replay.methods.Replay.device_s`, the recorded ``cost`` of each run: MODELLED by
:mod:`tuner.replay.cost_model`) after the measured trial that first reached it. A quantile past
the budget is shown as ``>S``: S is the same quantile with each seed that never reached the
target counted at what its whole study spent (it would have needed more), so a lower bound. :func:`cost_comparison` compares two methods
by their median device-seconds to 95 %: the bench's last line (the new default against the old).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tuner.replay.hypervolume import trials_to_reach
from tuner.replay.methods import Replay

TARGETS = (0.90, 0.95, 0.99)
CHECKPOINTS = (10, 20, 40)  # trials: the fractions written to the results JSON
PRINTED_CHECKPOINTS = (40,)  # ... and the one the table prints
COST_TARGET = 0.95


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (``q`` in [0, 1]) of ``values``; +inf entries sort last."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    if ordered[high] == math.inf:
        return math.inf if position > low or ordered[low] == math.inf else ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def fraction_at(replay: Replay, trials: int) -> float:
    """Hypervolume fraction after ``trials`` measured trials (the last one when it stopped sooner)."""
    if not replay.fractions:
        return 0.0
    return replay.fractions[min(trials, len(replay.fractions)) - 1]


@dataclass(frozen=True)
class MethodResult:
    """The replays of one method on one table."""

    name: str
    replays: list[Replay]
    budget: int

    def trials_to(self, target: float) -> list[float]:
        """Per seed: measured trials to reach ``target`` of the front's hypervolume (+inf: never)."""
        found = (trials_to_reach(r.fractions, target) for r in self.replays)
        return [float(n) if n is not None else math.inf for n in found]

    def median_trials_to(self, target: float) -> float:
        return quantile(self.trials_to(target), 0.5)

    def device_s_to(self, target: float) -> list[float]:
        """Per seed: device-seconds spent when ``target`` of the front's hypervolume was first reached
        (+inf: never; see the module docstring)."""
        return [device_s_to_reach(r, target) for r in self.replays]

    def median_device_s_to(self, target: float) -> float:
        return quantile(self.device_s_to(target), 0.5)

    def device_cell(self, target: float) -> str:
        """``median [q1, q3] reached/seeds`` in device-seconds, e.g. ``412 [380, 530] 5/5``; ``>S`` past the
        budget (see the module docstring)."""
        spent = self.device_s_to(target)
        reached = sum(1 for s in spent if s != math.inf)
        if reached == 0:
            return f"- 0/{len(spent)}"
        at_least = [s if s != math.inf else total_device_s(r) for r, s in zip(self.replays, spent)]
        parts = [_seconds(quantile(spent, q), quantile(at_least, q)) for q in (0.5, 0.25, 0.75)]
        spread = f" [{parts[1]}, {parts[2]}]" if len(spent) > 1 else ""
        return f"{parts[0]}{spread} {reached}/{len(spent)}"

    @property
    def median_study_device_s(self) -> float:
        """Median over seeds of a whole study's device-seconds."""
        return quantile([total_device_s(r) for r in self.replays], 0.5)

    def cell(self, target: float) -> str:
        """``median [q1, q3] reached/seeds``, e.g. ``31 [24, 40] 20/20``; ``>100`` past the budget."""
        counts = self.trials_to(target)
        reached = sum(1 for c in counts if c != math.inf)
        if reached == 0:
            return f"- 0/{len(counts)}"
        parts = [_count(quantile(counts, q), self.budget) for q in (0.5, 0.25, 0.75)]
        spread = f" [{parts[1]}, {parts[2]}]" if len(counts) > 1 else ""
        return f"{parts[0]}{spread} {reached}/{len(counts)}"

    @property
    def mean_oom_runs(self) -> float:
        """Mean per study of trials that ran out of memory (each cost a run)."""
        return sum(r.oom_runs for r in self.replays) / max(len(self.replays), 1)

    @property
    def mean_skipped(self) -> float:
        """Mean per study of proposals the memory model skipped as predicted OOM (free)."""
        return sum(r.skipped_oom for r in self.replays) / max(len(self.replays), 1)

    def median_fraction_at(self, trials: int) -> float:
        return quantile([fraction_at(r, trials) for r in self.replays], 0.5)

    def median_curve(self) -> list[float]:
        """Median hypervolume fraction after 1, 2, ... trials (up to the longest replay)."""
        longest = max((len(r.fractions) for r in self.replays), default=0)
        return [quantile([fraction_at(r, k) for r in self.replays], 0.5) for k in range(1, longest + 1)]


def device_s_to_reach(replay: Replay, target: float) -> float:
    """Device-seconds ``replay`` had spent after the measured trial that first reached ``target`` of the
    front's hypervolume; +inf when it never did. ValueError when its cost curve is not aligned with its
    fractions (one entry per measured trial)."""
    if len(replay.device_s) != len(replay.fractions):
        raise ValueError(
            f"{replay.method} seed {replay.seed}: {len(replay.device_s)} device-seconds entries for "
            f"{len(replay.fractions)} measured trials"
        )
    reached = trials_to_reach(replay.fractions, target)
    return math.inf if reached is None else replay.device_s[reached - 1]


def total_device_s(replay: Replay) -> float:
    """The device-seconds of ``replay``'s whole study (0 when nothing ran)."""
    return replay.device_s[-1] if replay.device_s else 0.0


def _count(value: float, budget: int) -> str:
    return f">{budget}" if value == math.inf else f"{value:g}"


def _seconds(value: float, at_least: float = math.inf) -> str:
    """Device-seconds for a cell: ``>S`` past the budget (S = ``at_least``), whole seconds from 10 s."""
    if value == math.inf:
        return f">{_seconds(at_least)}" if at_least != math.inf else ">budget"
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def table_lines(results: Sequence[MethodResult]) -> list[str]:
    """The per-method table: trials, then device-seconds, to each target; the fraction at the printed
    checkpoint (:data:`PRINTED_CHECKPOINTS`); OOM runs and skips; a study's device-seconds; the replay's
    own seconds per study and sampler milliseconds per trial."""
    header = (
        f"{'method':<28} {'seeds':>5}  "
        + "  ".join(f"{f'to {round(t * 100)} %':<22}" for t in TARGETS)
        + "  "
        + "  ".join(f"{f'dev-s to {round(t * 100)} %':<22}" for t in TARGETS)
        + "  "
        + "  ".join(f"{f'HV@{k}':>6}" for k in PRINTED_CHECKPOINTS)
        + f"  {'OOM run':>7} {'skipped':>7}"
        + f"  {'dev-s/study':>11}  {'s/study':>8} {'sampler ms/trial':>16}"
    )
    lines = [header]
    for result in results:
        trials = sum(r.trials for r in result.replays) or 1
        study_s = sum(r.elapsed_s for r in result.replays) / max(len(result.replays), 1)
        sampler_ms = 1000 * sum(r.sampler_s for r in result.replays) / trials
        lines.append(
            f"{result.name:<28} {len(result.replays):>5}  "
            + "  ".join(f"{result.cell(t):<22}" for t in TARGETS)
            + "  "
            + "  ".join(f"{result.device_cell(t):<22}" for t in TARGETS)
            + "  "
            + "  ".join(f"{result.median_fraction_at(k):>6.3f}" for k in PRINTED_CHECKPOINTS)
            + f"  {result.mean_oom_runs:>7.1f} {result.mean_skipped:>7.1f}"
            + f"  {_seconds(result.median_study_device_s):>11}  {study_s:>8.1f} {sampler_ms:>16.1f}"
        )
    return lines


def comparison(label: str, default: MethodResult, sweep: MethodResult, target: float = 0.95) -> tuple[str, float]:
    """The line comparing the default method with the sweep at ``target``, and the ratio (inf: not reached)."""
    ours, theirs = default.median_trials_to(target), sweep.median_trials_to(target)
    percent = round(target * 100)
    where = f"{label}: " if label else ""
    if ours == math.inf:
        return (
            f"{where}default does not reach {percent} % of the front's hypervolume within {default.budget} trials "
            f"(median); the sweep needs {_count(theirs, sweep.budget)}"
        ), math.inf
    ratio = ours / theirs if theirs not in (0, math.inf) else math.nan
    return (
        f"{where}default reaches {percent} % of the front's hypervolume in {ours:g} trials (median) = "
        f"{ratio:.2f} x the sweep's {_count(theirs, sweep.budget)}"
    ), ratio


def cost_ratio(new: MethodResult, old: MethodResult, target: float = COST_TARGET) -> float:
    """``new``'s median device-seconds to ``target`` over ``old``'s: inf when only ``old`` reaches it,
    nan when ``old`` does not (or spent nothing to get there)."""
    ours, theirs = new.median_device_s_to(target), old.median_device_s_to(target)
    if theirs in (0, math.inf) or math.isnan(theirs):
        return math.nan
    return ours / theirs


def cost_comparison(
    label: str, new: MethodResult, old: MethodResult, target: float = COST_TARGET, old_called: str | None = None
) -> tuple[str, float]:
    """The line comparing ``new``'s median device-seconds to ``target`` of the front's hypervolume with
    ``old``'s (called ``old_called``, default its name), and their ratio (:func:`cost_ratio`), e.g.
    ``avatar_dit:cpu1t: default reaches 95 % of the front's hypervolume in 512 device-s (median) = 0.80 x
    default-v1's 640 device-s``."""
    ours, theirs = new.median_device_s_to(target), old.median_device_s_to(target)
    percent, where, them = round(target * 100), f"{label}: " if label else "", old_called or old.name
    ratio = cost_ratio(new, old, target)
    if ours == math.inf:
        after = f"{them} needs {_seconds(theirs)}" if theirs != math.inf else f"nor does {them}"
        return (
            f"{where}{new.name} does not reach {percent} % of the front's hypervolume within its budget "
            f"(median); {after}"
        ), ratio
    head = f"{where}{new.name} reaches {percent} % of the front's hypervolume in {_seconds(ours)} device-s (median)"
    if math.isnan(ratio):
        why = "does not within its budget (median)" if theirs == math.inf else "spent nothing"
        return f"{head}; {them} {why}", ratio
    return f"{head} = {ratio:.2f} x {them}'s {_seconds(theirs)} device-s", ratio


def sweep_cost_line(label: str, method: MethodResult, sweep: MethodResult, target: float = COST_TARGET) -> str:
    """``method``'s median device-seconds to ``target`` against a person's sweep of the same space."""
    return cost_comparison(label, method, sweep, target, old_called="the sweep")[0]


def write_outputs(
    directory: Path, stem: str, title: str, results: Sequence[MethodResult], about: dict[str, object]
) -> tuple[Path, Path]:
    """``<stem>.png`` (median fraction vs trials per method) and ``<stem>.json`` (raw curves) in ``directory``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(8, 5))
    for index, result in enumerate(results):
        curve = result.median_curve()
        twin = next((r.name for r in results[:index] if r.replays is result.replays), None)
        seeds = len(result.replays)
        label = f"{result.name} (= {twin})" if twin else f"{result.name} ({seeds} seed{'s' if seeds != 1 else ''})"
        if curve:
            axes.plot(range(1, len(curve) + 1), curve, label=label, linestyle="--" if twin else "-")
    for target in TARGETS:
        axes.axhline(target, color="grey", linewidth=0.5, linestyle=":")
    axes.set_xscale("log")
    axes.set_xlabel("trials that ran a workload (log scale)")
    axes.set_ylabel("hypervolume / exhaustive front's (median over seeds)")
    axes.set_ylim(0, 1.02)
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    png, raw = directory / f"{stem}.png", directory / f"{stem}.json"
    figure.savefig(png, dpi=120)
    plt.close(figure)
    raw.write_text(json.dumps({**about, "methods": {r.name: _raw(r) for r in results}}, indent=1) + "\n")
    return png, raw


def _raw(result: MethodResult) -> dict[str, object]:
    """One method's raw results: per-seed curves (fractions, cumulative device-seconds) and, per target,
    each seed's trials and device-seconds to reach it (null: never)."""

    def finite(values: list[float], digits: int) -> list[float | None]:
        return [None if v == math.inf else round(v, digits) for v in values]

    return {
        "budget": result.budget,
        "trials_to": {f"{t:g}": finite(result.trials_to(t), 0) for t in TARGETS},
        "device_s_to": {f"{t:g}": finite(result.device_s_to(t), 3) for t in TARGETS},
        "median_fraction_at": {str(k): round(result.median_fraction_at(k), 6) for k in CHECKPOINTS},
        "replays": [
            {
                "seed": x.seed,
                "fractions": [round(f, 6) for f in x.fractions],
                "device_s": [round(d, 3) for d in x.device_s],
                "trials_recorded": x.trials,
                "runs": x.runs,
                "stopped_because": x.stopped_because,
                "elapsed_s": round(x.elapsed_s, 3),
                "sampler_s": round(x.sampler_s, 3),
                "oom_runs": x.oom_runs,
                "skipped_predicted_oom": x.skipped_oom,
            }
            for x in result.replays
        ],
    }
