"""An interactive Plotly page of the front: hover a point to see its trial, values and params.

The page embeds plotly.js (no CDN: it opens on a machine without internet).
Two objectives: a scatter; three or more: a scatter matrix; one: objective
against trial number. Front points are red, other feasible measured trials
grey. Placeholder values (OOM / TIMEOUT) are never drawn.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from tuner.front.labels import metric_label
from tuner.front.report import objective_labels
from tuner.storage.records import TrialRecord, record_feasible


def hover_text(record: TrialRecord, names: Sequence[str]) -> str:
    """``trial 7 (search)`` then one line per objective value (``latency p50 [s] = 0.0123``) and per
    parameter."""
    lines = [f"<b>trial {record.number}</b> ({html.escape(record.role)})"]
    lines += [
        f"{html.escape(metric_label(n, record.metrics.get(n, {}).get('unit')))} = {v:.6g}"
        for n, v in zip(names, record.values or ())
    ]
    lines += [f"{html.escape(str(k))} = {html.escape(str(v))}" for k, v in record.params.items()]
    lines += [f"{html.escape(str(k))} = {html.escape(str(v))} (derived)" for k, v in record.derived.items()]
    return "<br>".join(lines)


def front_html(
    records: Sequence[TrialRecord], front: set[int], names: Sequence[str], directions: Sequence[str], title: str
) -> str:
    """A self-contained HTML page (plotly.js embedded) of the measured trials and the front."""
    import plotly.graph_objects as go

    measured = sorted((r for r in records if record_feasible(r)), key=lambda r: r.number)
    groups = [
        ("Pareto front", [r for r in measured if r.number in front], "#d62728", 11),
        ("measured (feasible)", [r for r in measured if r.number not in front], "#9a9a9a", 8),
    ]
    figure = go.Figure()
    labels = objective_labels(records, names, directions)
    for label, group, colour, size in groups:
        if not group:
            continue
        texts = [hover_text(r, names) for r in group]
        marker = {"color": colour, "size": size, "line": {"width": 1, "color": "#333"}}
        if len(names) >= 3:
            figure.add_trace(
                go.Splom(
                    dimensions=[
                        {"label": lab, "values": [r.values[i] for r in group if r.values]}
                        for i, lab in enumerate(labels)
                    ],
                    text=texts,
                    hovertemplate="%{text}<extra></extra>",
                    name=label,
                    marker=marker,
                    diagonal_visible=False,
                )
            )
            continue
        if len(names) == 2:
            xs = [r.values[0] for r in group if r.values]
            ys = [r.values[1] for r in group if r.values]
        else:
            xs = [float(r.number) for r in group]
            ys = [r.values[0] for r in group if r.values]
        if label == "Pareto front":
            order = sorted(range(len(xs)), key=lambda i: (xs[i], ys[i]))
            xs, ys, texts = [xs[i] for i in order], [ys[i] for i in order], [texts[i] for i in order]
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                text=texts,
                hovertemplate="%{text}<extra></extra>",
                name=label,
                marker=marker,
                mode="lines+markers" if label == "Pareto front" and len(names) == 2 else "markers",
            )
        )
    if len(names) == 2:
        figure.update_layout(xaxis_title=labels[0], yaxis_title=labels[1])
    elif len(names) == 1:
        figure.update_layout(xaxis_title="trial", yaxis_title=labels[0])
    figure.update_layout(title=title, template="plotly_white", hoverlabel={"align": "left"})
    page: str = figure.to_html(full_html=True, include_plotlyjs=True, div_id="tuner-front")
    return page
