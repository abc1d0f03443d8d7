"""What ``tuner status STUDY`` shows: one line a trial, sorted and filtered, or every trial as JSON.

The table is plain aligned text, one line a trial, never wrapped nor cut (a long line
runs past the terminal's edge rather than onto a second line, so ``grep`` and ``sort``
see one trial a line): number, outcome, role, each objective with its unit, the front
marker, the device-seconds its run held (``dev-s``: wall time x devices of its slot, ``-``
for a copy, a skip or a run whose cost is unknown), where it ran, its parameters as ``k=v`` and
a short note. Below the table, what the study cost (:func:`tuner.front.cost.cost_lines`:
device-hours used / wasted / avoided, which add up to the ``dev-s`` column's sum). The note is the only
shortened field (a reason's first :data:`NOTE_CHARS` characters); ``tuner show STUDY N``
prints the whole trial and ``--json`` prints every field of every trial, nothing cut.

Contracts shared with ``tuner show`` (:mod:`tuner.cli.show_command`):
:func:`trial_document` is the JSON form of one trial and
:func:`tuner.spec.metrics.objective_units` the unit of each objective.

Without a study name, ``tuner status`` lists the studies (:func:`study_list_entries`): name, trials
and the device-hours each has used.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, get_args

from tuner.cli.status_sort import StatusTrial as StatusTrial  # re-exported
from tuner.cli.status_sort import shown_values as shown_values
from tuner.cli.status_sort import sort_trials
from tuner.front.cost import (
    budget_hours,
    cost_lines,
    cost_of_records,
    device_s_text,
    phase_shares_line,
    scored_off_device_line,
    trial_cost_document,
)
from tuner.results import Outcome
from tuner.search.dominance import skip_summary
from tuner.session.front_lines import wrap_items
from tuner.spec.metrics import objective_units
from tuner.spec.search.sampler import SamplerName
from tuner.storage.cost import SECONDS_PER_HOUR, device_unit
from tuner.storage.records import StudyRecord, TrialRecord

if TYPE_CHECKING:
    from tuner.study.studies import OpenStudy

NOTE_CHARS = 80  # a reason in the table's note column is cut here ("tuner show" prints it whole)
TRIAL_STATES = ("RUNNING", "WAITING", "FAIL", "PRUNED", "COMPLETE")  # an outcome shown for a trial with none
OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome) + TRIAL_STATES


def parse_outcomes(values: Sequence[str] | None) -> set[str]:
    """The outcome names of ``--outcome`` (repeated and/or comma lists, any case); empty: all.

    Raises ``ValueError`` naming an unknown outcome and the known ones (:data:`OUTCOMES`).
    """
    chosen = {part.strip().upper() for value in values or () for part in value.split(",") if part.strip()}
    unknown = sorted(chosen - set(OUTCOMES))
    if unknown:
        raise ValueError(f"--outcome: unknown outcome {', '.join(unknown)} (use {', '.join(OUTCOMES)})")
    return chosen


def trial_document(
    record: TrialRecord, names: Sequence[str], units: Mapping[str, str], on_front: bool
) -> dict[str, Any]:
    """The JSON form of one trial, nothing cut: params, derived, objectives (value, unit), every
    stored metric, constraints, the whole reason, where and when it ran, samples, copy and warm-start links,
    ``device_s`` (device-seconds its run held; None: it ran nothing or its cost is unknown) and ``cost``
    (:func:`tuner.front.cost.trial_cost_document`: device-seconds, wall seconds, devices, phases)."""
    values = shown_values(record, names)
    return {
        "number": record.number,
        "state": record.state,
        "outcome": record.outcome,
        "role": record.role,
        "on_front": on_front,
        "reason": record.reason,
        "params": dict(record.params),
        "derived": dict(record.derived),
        "objectives": {name: {"value": values[name], "unit": units.get(name, "")} for name in names},
        "values": list(record.values) if record.values is not None else None,
        "placeholder_values": record.placeholder,
        "constraints": dict(record.constraints),
        "metrics": {k: dict(v) for k, v in record.metrics.items()},
        "noisy": record.noisy,
        "latency_cv": record.latency_cv,
        "cut_short": record.cut_short,
        "past_ceiling": record.past_ceiling,
        "settled": record.settled,
        "waiting": record.waiting,
        "duplicate_of": record.duplicate_of,
        "warm_start_from": record.warm_start_from,
        "predicted_peak_gb": record.predicted_peak_gb,
        "prediction_witness": record.prediction_witness,
        "host": record.host,
        "slot": record.slot,
        "worker": record.worker,
        "fingerprint_note": record.fingerprint_note,
        "compared_with": record.compared_with,
        "datetime_start": record.datetime_start,
        "datetime_complete": record.datetime_complete,
        "wall_time_s": record.wall_time_s,
        "eval_time_s": record.eval_time_s,
        "quality_scored": record.quality_scored,
        "samples": dict(record.samples),
        "per_input": {case: dict(figures) for case, figures in record.per_input.items()},
        "cliffs": list(record.cliffs),
        "device_s": record.device_s,
        "cost": trial_cost_document(record),
        "sustained": record.sustained,
        "prediction": record.prediction,
    }


def one_line_cut(text: str) -> str:
    """``text`` on one line, cut at :data:`NOTE_CHARS` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 1] + "…"


def trial_note(record: TrialRecord) -> str:
    """The note column: copy, why an asked trial waits, predicted OOM, noisy, a measurement the time limit cut
    short, else the reason's start (cut at :data:`NOTE_CHARS`)."""
    if record.duplicate_of is not None:
        return f"copy of #{record.duplicate_of}"
    if record.outcome == "RUNNING" and record.slot is None and record.waiting:
        return one_line_cut(record.waiting)  # asked, set aside: it has not started
    if record.outcome == Outcome.SKIPPED_PREDICTED_OOM.value:
        peak = f"peak {record.predicted_peak_gb:.1f} GB, " if record.predicted_peak_gb is not None else "OOM at "
        return f"predicted OOM: {peak}{record.prediction_witness}"
    if record.outcome == Outcome.SKIPPED_PREDICTED_DOMINATED.value:
        return one_line_cut(record.reason or "predicted dominated")
    reason = one_line_cut(record.reason or "")
    if record.noisy:
        return f"NOISY (latency cv {record.latency_cv or 0:.2f})" + (f"; {reason}" if reason else "")
    if record.cut_short:
        return f"cut short: {one_line_cut(record.cut_short)}"
    if record.past_ceiling:
        return one_line_cut(record.past_ceiling)
    if record.settled and not reason:
        return one_line_cut(record.settled)
    return reason


def compact_params(params: Mapping[str, Any]) -> str:
    """``k=v`` pairs separated by spaces, every parameter, values as stored (strings unquoted)."""
    return " ".join(f"{key}={value}" for key, value in params.items())


def status_lines(
    trials: Sequence[StatusTrial], names: Sequence[str], units: Mapping[str, str], width: int | None = None
) -> list[str]:
    """The table: a header and one line a trial, columns padded to their widest cell (the last not).

    When a line would be wider than ``width`` (an 80-column terminal, a pipe), each trial's row keeps its
    number, outcome, role, objectives, front mark and ``dev-s``, and its host/slot, parameters and note are
    stacked on indented lines under it, wrapped to ``width`` (a word wider stands alone)."""
    headers = [
        "#",
        "outcome",
        "role",
        *(f"{n} [{units[n]}]" if units.get(n) not in (None, "", "1") else n for n in names),
        "front",
        "dev-s",
        "where",
        "params",
        "note",
    ]
    rows = []
    for trial in trials:
        record = trial.record
        values = shown_values(record, names)
        rows.append(
            [
                str(record.number),
                record.outcome,
                record.role_shown,
                *(f"{values[n]:.4g}" if values[n] is not None else "-" for n in names),
                "*" if trial.on_front else "",
                device_s_text(record.device_s),
                trial.where or "-",
                compact_params(record.params) or "-",
                trial_note(record),
            ]
        )
    numeric = {0, *range(3, 3 + len(names)), 4 + len(names)}
    lines = aligned([headers, *rows], numeric)
    if width is None or all(len(line) <= width for line in lines):
        return lines
    kept = len(headers) - 3  # where, params and note go under the row
    stacked = [aligned([headers[:kept], *(row[:kept] for row in rows)], numeric)[0]]
    for row, line in zip(rows, aligned([headers[:kept], *(row[:kept] for row in rows)], numeric)[1:]):
        where, params, note = row[kept:]
        stacked.append(line)
        stacked += wrap_items(
            params.split(" ") if params != "-" else [], width, STACK_INDENT + f"on {where}: ", STACK_INDENT, sep=" "
        ) or [STACK_INDENT + f"on {where}"]
        if note:
            stacked += textwrap.wrap(
                note,
                width,
                initial_indent=STACK_INDENT,
                subsequent_indent=STACK_INDENT,
                break_long_words=False,
                break_on_hyphens=False,
            )
    return stacked


STACK_INDENT = "    "
"""Where a stacked trial's host/slot, parameters and note start, under its row."""


def aligned(rows: Sequence[Sequence[str]], numeric: set[int]) -> list[str]:
    """``rows`` as lines, columns padded to their widest cell (numbers right-aligned), the last cell unpadded,
    no trailing blanks."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells[:-1]) + ("  " + cells[-1] if row[-1] else ""))
    return [line.rstrip() for line in lines]


def status_trials(opened: OpenStudy) -> list[StatusTrial]:
    """Every stored trial of ``opened`` in number order, with its front flag and host/slot."""
    from tuner.pareto import front_trials

    trials = opened.study.get_trials(deepcopy=False)
    front = {t.number for t in front_trials(trials, [o.direction for o in opened.spec.objectives])}
    shown = []
    for trial in trials:
        record = TrialRecord.from_trial(trial)
        where = "/".join(str(part) for part in (record.host, record.slot) if part)
        shown.append(StatusTrial(record, record.number in front, where))
    return shown


def status_document(
    opened: OpenStudy, trials: Sequence[StatusTrial], all_trials: Sequence[StatusTrial]
) -> dict[str, Any]:
    """``--json``: the study's summary and ``trials`` (filtered and sorted as asked), every field whole.

    ``cost``: the study's :meth:`tuner.storage.cost.StudyCost.as_dict` (every trial, whatever the filter),
    with its ``unit`` (GPU-h / CPU-h) and ``budget_device_hours``."""
    records = [t.record for t in all_trials]
    names = opened.spec.objective_names
    units = objective_units(names, (r.metrics for r in records))
    stored = StudyRecord.of(opened.study)
    return {
        "study": opened.study.study_name,
        "spec": stored.spec_name,
        "device": stored.device,
        "sampler": stored.sampler,
        "proposals": opened.spec.sampler.summary(_sampler_name(stored.sampler)),
        "objectives": [
            {"metric": o.metric, "direction": o.direction, "unit": units[o.metric]} for o in opened.spec.objectives
        ],
        "budget_trials": stored.budget_trials,
        "measured": sum(1 for t in all_trials if t.record.measured),
        "recorded": len(all_trials),
        "front": [t.record.number for t in all_trials if t.on_front],
        "warm_start": dict(stored.warm_start) if stored.warm_start is not None else None,
        "cost": {
            **cost_of_records(records).as_dict(),
            "unit": device_unit(stored.device),
            "budget_device_hours": budget_hours(stored.budget_device_hours),
        },
        "trials": [trial_document(t.record, names, units, t.on_front) for t in trials],
    }


def render_status(
    opened: OpenStudy, sort: str | None, outcomes: Sequence[str] | None, as_json: bool, width: int | None = None
) -> list[str]:
    """The lines ``tuner status STUDY`` prints (JSON: one document), at most ``width`` columns where a line can be
    broken (:func:`status_lines`; None: one line a trial, however wide). Raises ``ValueError`` for a bad
    ``--sort`` column or ``--outcome`` name (the command turns it into one line, exit 2)."""
    wanted = parse_outcomes(outcomes)
    every = status_trials(opened)
    chosen = [t for t in every if not wanted or t.record.outcome in wanted]
    if sort:
        chosen = sort_trials(chosen, sort, opened)
    if as_json:
        return [json.dumps(status_document(opened, chosen, every), indent=2, default=str)]
    names = opened.spec.objective_names
    stored = StudyRecord.of(opened.study)
    lines = [
        f"study {opened.study.study_name} (spec {stored.spec_name}, device {stored.device}, sampler {stored.sampler})",
        f"proposals: {opened.spec.sampler.summary(_sampler_name(stored.sampler))}",
    ]
    lines += status_lines(chosen, names, objective_units(names, (t.record.metrics for t in every)), width)
    lines += _summary(opened, every, len(chosen), wanted)
    if width is None:
        return lines
    return [
        part
        for line in lines
        for part in (
            textwrap.wrap(line, width, subsequent_indent=STACK_INDENT, break_long_words=False, break_on_hyphens=False)
            if len(line) > width
            else [line]
        )
    ]


def _sampler_name(stored: str | None) -> SamplerName | None:
    """The sampler name a study recorded at its start (``--sampler`` or the spec's); None: unknown, the spec's."""
    return next((name for name in get_args(SamplerName) if name == stored), None)


def _summary(opened: OpenStudy, every: Sequence[StatusTrial], shown: int, wanted: set[str]) -> list[str]:
    stored = StudyRecord.of(opened.study)
    measured = sum(1 for t in every if t.record.measured)
    skipped = sum(1 for t in every if t.record.outcome == Outcome.SKIPPED_PREDICTED_OOM.value)
    front = sum(1 for t in every if t.on_front)
    lines = [
        f"{measured} measured of budget {stored.budget_trials}, {len(every)} recorded, {front} on the front"
        + (f", {skipped} skipped as predicted OOM (never run)" if skipped else "")
    ]
    skips = skip_summary(opened.study.get_trials(deepcopy=False), [o.direction for o in opened.spec.objectives])
    lines += [skips] if skips else []
    cost = cost_of_records([t.record for t in every])
    lines += cost_lines(cost, stored.device, budget_hours(stored.budget_device_hours))
    shares = phase_shares_line(cost)
    if shares is not None:
        lines.append(shares)
    scored = scored_off_device_line([t.record for t in every])
    lines += [scored] if scored else []
    if wanted:
        lines.append(f"showing {shown} of {len(every)} trials (outcome {', '.join(sorted(wanted))})")
    warm = stored.warm_start
    if warm is not None:
        lines.append(
            f"warm start from {warm.get('study')} ({warm.get('storage')}): {warm.get('front_enqueued')} front "
            f"setting(s) queued, {warm.get('dropped')} dropped, {warm.get('observations')} memory observations"
        )
    lines.append(f"one whole trial: tuner show {opened.study.study_name} NUMBER")
    return lines


def study_list_entries(url: str) -> list[dict[str, Any]]:
    """``tuner status`` without a study: every study of the storage at ``url`` (in the storage's order) as
    ``{"study", "trials", "used_device_h", "wasted_device_h", "unit"}`` (device-hours its runs used / wasted,
    :func:`tuner.storage.cost.study_cost`; ``unit``: GPU-h or CPU-h); none when its SQLite file is missing."""
    from tuner.storage.opening import missing_sqlite_file, open_storage
    from tuner.storage.store import trials_of

    if missing_sqlite_file(url) is not None:
        return []
    storage = open_storage(url, create=False, read_only=True)
    entries = []
    for frozen in storage.get_all_studies():
        trials = trials_of(storage, frozen)
        cost = cost_of_records([TrialRecord.from_trial(t) for t in trials])
        entries.append(
            {
                "study": frozen.study_name,
                "trials": len(trials),
                "used_device_h": round(cost.used_s / SECONDS_PER_HOUR, 6),
                "wasted_device_h": round(cost.wasted_s / SECONDS_PER_HOUR, 6),
                "unit": device_unit(StudyRecord.of(frozen).device),
            }
        )
    return entries
