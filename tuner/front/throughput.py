"""The latency–throughput curve over batch size, and its knee.

For each batch size (the ``batch_size`` parameter or derived value) the curve
keeps the feasible measured trial with the lowest median latency at that batch
size, and plots its latency (``latency_p50_s``, seconds per call) against its
throughput (``throughput_items_per_s``, items per second). The knee
(Kneedle) is the point farthest from the straight line between the smallest
and the largest batch after scaling both axes to [0, 1]: past it, extra
throughput costs disproportionate latency. It needs three batch sizes or more.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.front.labels import metric_label
from tuner.front.report import figure_png, new_figure
from tuner.storage.records import TrialRecord, record_feasible

BATCH_KEY = "batch_size"
LATENCY_METRIC = "latency_p50_s"
THROUGHPUT_METRIC = "throughput_items_per_s"


@dataclass(frozen=True)
class CurvePoint:
    batch_size: int
    trial: int
    latency_s: float
    throughput: float


@dataclass(frozen=True)
class ThroughputCurve:
    """Points ordered by batch size; ``knee`` or the reason there is none."""

    points: tuple[CurvePoint, ...]
    knee: CurvePoint | None
    knee_reason: str | None
    latency_metric: str = LATENCY_METRIC
    throughput_metric: str = THROUGHPUT_METRIC

    def csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["batch_size", "trial", "latency_p50_s", "throughput_items_per_s", "knee"])
        for p in self.points:
            writer.writerow([p.batch_size, p.trial, p.latency_s, p.throughput, int(p == self.knee)])
        return buffer.getvalue()


def _batch_size(record: TrialRecord) -> int | None:
    value = record.params.get(BATCH_KEY, record.derived.get(BATCH_KEY))
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def knee(points: Sequence[CurvePoint]) -> CurvePoint | None:
    """Kneedle on (throughput, latency) scaled to [0, 1]; None for fewer than 3 points or a line."""
    if len(points) < 3:
        return None
    xs = [p.throughput for p in points]
    ys = [p.latency_s for p in points]
    x_span = (max(xs) - min(xs)) or 1.0
    y_span = (max(ys) - min(ys)) or 1.0
    scaled = [((x - min(xs)) / x_span, (y - min(ys)) / y_span) for x, y in zip(xs, ys)]
    (x0, y0), (x1, y1) = scaled[0], scaled[-1]
    length = ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5 or 1.0
    distances = [abs((y1 - y0) * x - (x1 - x0) * y + x1 * y0 - y1 * x0) / length for x, y in scaled]
    best = max(range(1, len(points) - 1), key=lambda i: distances[i])
    return points[best] if distances[best] > 1e-9 else None


def throughput_curve(records: Sequence[TrialRecord]) -> ThroughputCurve | str:
    """The curve, or the reason it cannot be drawn (no batch size, no latency, one batch size)."""
    best: dict[int, CurvePoint] = {}
    saw_batch = False
    for record in records:
        batch = _batch_size(record)
        saw_batch = saw_batch or batch is not None
        if batch is None or not record_feasible(record):
            continue
        latency, throughput = record.metric_value(LATENCY_METRIC), record.metric_value(THROUGHPUT_METRIC)
        if latency is None or throughput is None:
            continue
        point = CurvePoint(batch, record.number, latency, throughput)
        current = best.get(batch)
        if current is None or (latency, record.number) < (current.latency_s, current.trial):
            best[batch] = point
    if not saw_batch:
        return f"the search space has no '{BATCH_KEY}' parameter or derived value"
    if len(best) < 2:
        return (
            f"feasible trials with {LATENCY_METRIC} and {THROUGHPUT_METRIC} cover "
            f"{len(best)} batch size(s); a curve needs 2"
        )
    points = tuple(best[b] for b in sorted(best))
    found = knee(points)
    reason = None if found else ("needs 3 batch sizes or more" if len(points) < 3 else "the curve is a straight line")
    return ThroughputCurve(points, found, reason)


def throughput_png(curve: ThroughputCurve) -> bytes:
    """Latency against throughput, one point per batch size, the knee circled."""
    figure, axes = new_figure()
    xs = [p.throughput for p in curve.points]
    ys = [p.latency_s for p in curve.points]
    axes.plot(xs, ys, "-o", c="tab:green")
    for point in curve.points:
        axes.annotate(
            f"batch {point.batch_size} (#{point.trial})",
            (point.throughput, point.latency_s),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=8,
        )
    if curve.knee is not None:
        axes.scatter(
            [curve.knee.throughput],
            [curve.knee.latency_s],
            s=180,
            facecolors="none",
            edgecolors="tab:red",
            linewidths=2,
            label=f"knee: batch {curve.knee.batch_size}",
        )
        axes.legend(loc="best")
    axes.set_xlabel(metric_label(curve.throughput_metric))
    axes.set_ylabel(metric_label(curve.latency_metric))
    axes.set_title("latency–throughput over batch size" + ("" if curve.knee else f" — knee: {curve.knee_reason}"))
    axes.grid(alpha=0.3)
    return figure_png(figure)
