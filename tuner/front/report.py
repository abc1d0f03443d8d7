"""The front as a table, a CSV and PNG plots — shared by MLflow, ``tuner front`` and export.

Plots are returned as PNG bytes (matplotlib, Agg backend): pairwise Pareto
scatters, the hypervolume history and the latency–throughput curve. Only
feasible measured trials are plotted; OOM / TIMEOUT placeholders never are.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from tuner.front.labels import metric_label
from tuner.spec.metrics import unit_of
from tuner.storage.records import TrialRecord, record_feasible


def front_table(
    records: Sequence[TrialRecord], front: set[int], objective_names: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per front trial: number, role, objective values, ``noisy``, ``device_s``, params (``param.<name>``).

    ``noisy`` is :attr:`TrialRecord.noisy` (latency CV above :data:`tuner.storage.records.NOISY_CV`):
    a front point whose latency is not to be taken as a fact. ``device_s``: the device-seconds its run
    held (:attr:`TrialRecord.device_s`; None when unknown).
    """
    rows: list[dict[str, Any]] = []
    for record in sorted((r for r in records if r.number in front), key=lambda r: r.number):
        row: dict[str, Any] = {"trial": record.number, "role": record.role}
        for name, value in zip(objective_names, record.values or ()):
            row[name] = value
        row["noisy"] = record.noisy
        row["device_s"] = record.device_s
        row.update({f"param.{k}": v for k, v in record.params.items()})
        rows.append(row)
    return rows


def columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Column names in first-seen order."""
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    return keys


def front_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV text (columns in first-seen order)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns(rows), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def new_figure(width: float = 6.4, height: float = 4.8) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), dpi=100)


def figure_png(figure: Any) -> bytes:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def objective_labels(
    records: Sequence[TrialRecord], names: Sequence[str], directions: Sequence[str] | None = None
) -> list[str]:
    """Axis labels of the objectives (:func:`tuner.front.labels.metric_label`): ``latency p50 [s]``,
    with ``(lower is better)`` / ``(higher is better)`` when ``directions`` are given; units as stored
    with the trials, else the metric catalogue's."""
    stored = [r.metrics for r in records]
    return [
        metric_label(name, unit_of(name, stored), directions[i] if directions else None) for i, name in enumerate(names)
    ]


def pareto_pair_png(
    records: Sequence[TrialRecord], front: set[int], names: Sequence[str], directions: Sequence[str], x: int, y: int
) -> bytes:
    """Objective ``x`` against objective ``y``: front points red, joined and numbered; others grey.

    With a single objective (``x == y == 0``) the objective is drawn against
    the trial number.
    """
    measured = [r for r in records if record_feasible(r)]
    walls = sum(1 for r in records if r.placeholder and r.duplicate_of is None)
    single = len(names) == 1

    def xy(r: TrialRecord) -> tuple[float, float]:
        assert r.values is not None
        return (float(r.number), r.values[0]) if single else (r.values[x], r.values[y])

    figure, axes = new_figure()
    others = [xy(r) for r in measured if r.number not in front]
    if others:
        axes.scatter(*zip(*others), c="0.6", s=24, label="measured (feasible)")
    on_front = sorted((xy(r), r.number) for r in measured if r.number in front)
    if on_front:
        axes.plot(*zip(*[p for p, _ in on_front]), "-o", c="tab:red", label="Pareto front")
        for (px, py), number in on_front:
            axes.annotate(str(number), (px, py), textcoords="offset points", xytext=(4, 4), fontsize=8)
    labels = objective_labels(records, names, directions)
    axes.set_xlabel("trial" if single else labels[x])
    axes.set_ylabel(labels[y])
    axes.set_title(f"{len(measured)} feasible measured, {len(front)} on front, {walls} OOM/TIMEOUT")
    axes.grid(alpha=0.3)
    if others or on_front:
        axes.legend(loc="best")
    return figure_png(figure)


def pairwise_pngs(
    records: Sequence[TrialRecord], front: set[int], names: Sequence[str], directions: Sequence[str]
) -> dict[str, bytes]:
    """``<a>_vs_<b>.png`` for every pair of objectives (one plot against trial number for one objective)."""
    if len(names) == 1:
        return {f"{names[0]}_vs_trial.png": pareto_pair_png(records, front, names, directions, 0, 0)}
    return {
        f"{names[i]}_vs_{names[j]}.png": pareto_pair_png(records, front, names, directions, i, j)
        for i in range(len(names))
        for j in range(i + 1, len(names))
    }


def hypervolume_png(
    history: Sequence[tuple[int, float]], names: Sequence[str], records: Sequence[TrialRecord] = ()
) -> bytes:
    """Hypervolume after each feasible measured trial (in completion order); its unit is the
    product of the objectives' (``latency p50 [s] × PSNR [dB]``, units from ``records``)."""
    figure, axes = new_figure(6.4, 3.6)
    if history:
        axes.step(range(1, len(history) + 1), [v for _, v in history], where="post", c="tab:blue")
        axes.scatter(range(1, len(history) + 1), [v for _, v in history], s=12, c="tab:blue")
    axes.set_xlabel("feasible measured trials")
    axes.set_ylabel("hypervolume (" + " × ".join(objective_labels(records, names)) + ")")
    axes.set_title("hypervolume history (reference: worst + 10 % of range)")
    axes.grid(alpha=0.3)
    return figure_png(figure)
