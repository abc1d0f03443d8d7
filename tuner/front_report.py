"""The front as a table, a CSV and a plot — shared by MLflow, ``tuner status`` and export."""

from __future__ import annotations

import csv
import io
from typing import Any, Sequence

from tuner.records import TrialRecord


def front_table(records: Sequence[TrialRecord], front: set[int], objective_names: Sequence[str]) -> list[dict[str, Any]]:
    """One row per front trial: number, role, objective values, params."""
    rows: list[dict[str, Any]] = []
    for record in sorted((r for r in records if r.number in front), key=lambda r: r.number):
        row: dict[str, Any] = {"trial": record.number, "role": record.role}
        for name, value in zip(objective_names, record.values or ()):
            row[name] = value
        row.update({f"param.{k}": v for k, v in record.params.items()})
        rows.append(row)
    return rows


def front_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV text (columns in first-seen order)."""
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def front_plot_png(records: Sequence[TrialRecord], front: set[int], objective_names: Sequence[str],
                   directions: Sequence[str]) -> Any:
    """A scatter of the first two objectives (or objective vs trial number): RGB array.

    Front points are joined and labelled with their trial number; other
    feasible measured trials are grey; OOM / TIMEOUT trials are not plotted
    (their values are placeholders) but counted in the title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    measured = [r for r in records if r.values is not None and not r.placeholder and r.duplicate_of is None]
    walls = sum(1 for r in records if r.placeholder and r.duplicate_of is None)
    figure, axes = plt.subplots(figsize=(6.4, 4.8), dpi=100)
    if len(objective_names) >= 2:
        def xy(r: TrialRecord) -> tuple[float, float]:
            assert r.values is not None
            return r.values[0], r.values[1]
        x_label, y_label = objective_names[0], objective_names[1]
    else:
        def xy(r: TrialRecord) -> tuple[float, float]:
            assert r.values is not None
            return float(r.number), r.values[0]
        x_label, y_label = "trial", objective_names[0]
    others = [xy(r) for r in measured if r.number not in front]
    if others:
        xs, ys = zip(*others)
        axes.scatter(xs, ys, c="0.6", s=24, label="measured")
    on_front = sorted((xy(r), r.number) for r in measured if r.number in front)
    if on_front:
        points = [p for p, _ in on_front]
        axes.plot(*zip(*points), "-o", c="tab:red", label="Pareto front")
        for (x, y), number in on_front:
            axes.annotate(str(number), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    arrows = {"minimize": "↓ better", "maximize": "↑ better"}
    axes.set_xlabel(x_label + (f" ({directions[0]})" if len(directions) >= 2 else ""))
    axes.set_ylabel(f"{y_label} ({arrows.get(directions[-1 if len(directions) < 2 else 1], '')})")
    axes.set_title(f"{len(measured)} measured, {len(front)} on front, {walls} OOM/TIMEOUT")
    axes.grid(alpha=0.3)
    if others or on_front:
        axes.legend(loc="best")
    figure.tight_layout()
    figure.canvas.draw()
    image = np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()  # type: ignore[attr-defined]
    plt.close(figure)
    return image
