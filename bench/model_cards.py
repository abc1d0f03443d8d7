"""The model cards' measured tables (docs/models/*.md), kept as raw results and printed from them.

Usage::

    python bench/model_cards.py avatar_dit [-- CARD ARGS]   # run the card, keep what it printed
    python bench/model_cards.py avqa [-- CARD ARGS]
    python bench/model_cards.py avatar_dit --report [--section TITLE]   # print it back, measure nothing
    python bench/model_cards.py avqa --checkpoint      # the committed weights' training record, parameters
    python bench/model_cards.py avatar_dit --noticeable   # bench/results/avatar_noticeable_stlpips.json

A card (``python -m tuner.workloads.<model>.card``) measures its model and prints markdown: a header line
with the date and machine, then ``### <title>`` sections, each a table (and a note). Measuring here runs the
card in a child process and saves everything it printed, with the command and the host's state
(:mod:`raw_results`), to ``bench/results/card_<model>.json``: that file is the card's raw result. ``--report``
prints it back unchanged (or the one section whose title starts with ``--section``, without its heading),
so ``bench/report.py --check`` holds a card's tables in the docs to a run that was kept.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import raw_results

CARDS = {"avatar_dit": "tuner.workloads.avatar_dit.card", "avqa": "tuner.workloads.avqa.card"}
CHECKPOINTS = {
    "avatar_dit": "tuner/workloads/avatar_dit/weights/avatar_dit.pt",
    "avqa": "tuner/workloads/avqa/weights/avqa.pt",
}
# The parts of a model's architecture table: part -> the state_dict prefixes (first key component) it counts.
PARTS = {
    "avqa": {
        "frame encoder": ("frames",),
        "audio encoder": ("audio",),
        "media encoder": ("media_layers", "sinks", "media_type", "time", "grid_cell", "media_norm"),
        "text decoder": ("layers", "position", "embed", "final_norm"),
    }
}
NOTICEABLE = raw_results.RESULTS / "avatar_noticeable_stlpips.json"


def results_path(model: str) -> Path:
    return raw_results.RESULTS / f"card_{model}.json"


def measure(model: str, card_args: Sequence[str]) -> dict[str, Any]:
    """Run ``model``'s card with ``card_args``; save and return what it printed (SystemExit when it fails)."""
    run = raw_results.Run("model_cards.py", [model, "--", *card_args])
    argv = [sys.executable, "-m", CARDS[model], *card_args]
    done = subprocess.run(argv, cwd=raw_results.RESULTS.parents[1], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    lines = done.stdout.rstrip().splitlines()
    return run.save(
        results_path(model),
        {
            "card": f"python -m {CARDS[model]} {' '.join(card_args)}".strip(),
            "printed": [line.rstrip() for line in lines],
        },
    )


def section(lines: Sequence[str], title: str) -> list[str]:
    """The lines under the ``### `` heading that starts with ``title`` (heading and edge blank lines dropped)."""
    starts = [i for i, line in enumerate(lines) if line.startswith("### ") and line[4:].startswith(title)]
    if len(starts) != 1:
        raise SystemExit(
            f"{len(starts)} sections start with {title!r}; titles: "
            f"{[line[4:] for line in lines if line.startswith('### ')]}"
        )
    end = next((i for i in range(starts[0] + 1, len(lines)) if lines[i].startswith("### ")), len(lines))
    body = list(lines[starts[0] + 1 : end])
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    return body


def report(result: dict[str, Any], title: str | None, header: bool = False) -> list[str]:
    """What the card printed, with where it was measured first; ``title``: one section of it only;
    ``header``: the provenance and what the card printed before its first section only."""
    printed = result["printed"]
    if title is not None:
        return section(printed, title)
    first = next((i for i, line in enumerate(printed) if line.startswith("### ")), len(printed))
    lines = [f"{raw_results.provenance(result)}", "", *(printed[:first] if header else printed)]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def checkpoint_lines(model: str) -> list[str]:
    """The committed checkpoint's training record and parameter counts (per part where :data:`PARTS` names them)."""
    import torch  # only here: the other reports need no torch

    saved = torch.load(raw_results.RESULTS.parents[1] / CHECKPOINTS[model], map_location="cpu", weights_only=True)
    training, state = saved["training"], saved["state_dict"]
    counts: dict[str, int] = {}
    for key, tensor in state.items():
        counts[key.split(".")[0]] = counts.get(key.split(".")[0], 0) + int(tensor.numel())
    total = sum(counts.values())
    lines = [
        f"`{CHECKPOINTS[model]}`: {training['steps']} steps, seed {training['seed']}, {training['threads']} "
        f"thread{'s' * (training['threads'] != 1)}, {training['wall_time_s']:.1f} s of wall time "
        f"({training['wall_time_s'] / 60:.1f} min), torch {training['torch']}"
        + (f"; mean loss of the first 50 steps {training['loss_first_50']:.2f}" if "loss_first_50" in training else "")
        + f"; final loss {training['final_loss']:.4f}"
        + (f" (mean of the last {training['final_loss_steps']} steps)" if "final_loss_steps" in training else "")
        + f"; {total:,} parameters (recorded: {training['parameters']:,})."
    ]
    if model in PARTS:
        parts = {part: sum(counts.get(prefix, 0) for prefix in prefixes) for part, prefixes in PARTS[model].items()}
        if sum(parts.values()) != total:
            raise SystemExit(f"PARTS[{model!r}] count {sum(parts.values())} of {total} parameters: a prefix is missing")
        lines.append("Parameters per part: " + ", ".join(f"{part} {count:,}" for part, count in parts.items()) + ".")
    return lines


def noticeable_lines(path: Path = NOTICEABLE) -> list[str]:
    """The noticeable-distance raw result: its table (mean and max per edit) and each group's per-pair extremes."""
    result = raw_results.load(path)
    edits, bound = result["edits"], result["bound"]
    lines = [
        f"`{result['command']}` — measured {result['date_utc']}, {result['machine']['torch_threads']} torch "
        f"threads, {result['wall_s']:.0f} s; held-out seeds {result['seeds'][0]}..{result['seeds'][-1]}",
        "",
        "| edit | group | ST-LPIPS mean | min (pair) | max (pair) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, edit in edits.items():
        per_seed = {int(seed): value for seed, value in edit["per_seed"].items()}
        low, high = min(per_seed, key=per_seed.__getitem__), max(per_seed, key=per_seed.__getitem__)
        lines.append(
            f"| {edit['description']} (`{name}`) | {edit['group']} | {edit['mean']:.4f} | "
            f"{per_seed[low]:.4f} ({low}) | {per_seed[high]:.4f} ({high}) |"
        )
    admitted, of = bound["invisible_within_conservative"]
    groups = {
        group: [v for edit in edits.values() if edit["group"] == group for v in edit["per_seed"].values()]
        for group in ("invisible", "visible")
    }
    visible = groups["visible"]
    lines += [
        "",
        f"largest invisible value {bound['largest_invisible']:.4f}, smallest visible "
        f"{bound['smallest_visible']:.4f} ({'separated' if bound['separated'] else 'overlapping'}, by "
        f"{abs(bound['smallest_visible'] - bound['largest_invisible']):.4f}); round bound between them: "
        f"{bound['bound']}; the largest candidate below every visible value: {bound['conservative_bound']}, "
        f"admitting {admitted} of {of} invisible values and 0 of {len(visible)} visible ones "
        f"(candidates {', '.join(f'{c:g}' for c in bound['candidates'])})",
        "per-pair values at or below each candidate: "
        + ", ".join(
            f"{c:g}: {sum(v <= c for v in groups['invisible'])}/{len(groups['invisible'])} invisible, "
            f"{sum(v <= c for v in visible)}/{len(visible)} visible"
            for c in bound["candidates"]
        ),
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    card_args = args_in[args_in.index("--") + 1 :] if "--" in args_in else []
    own = args_in[: args_in.index("--")] if "--" in args_in else args_in
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(CARDS))
    parser.add_argument("--report", action="store_true", help="print the kept result, measure nothing")
    parser.add_argument("--section", help="with --report: only the section whose title starts with this")
    parser.add_argument("--header", action="store_true", help="with --report: only where and how it was measured")
    parser.add_argument(
        "--checkpoint",
        action="store_true",
        help="print the committed checkpoint's training record and parameter counts, measure nothing",
    )
    parser.add_argument(
        "--noticeable",
        action="store_true",
        help="avatar_dit: print the noticeable-distance raw "
        "result (bench/results/avatar_noticeable_stlpips.json), measure nothing",
    )
    args = parser.parse_args(own)
    if args.checkpoint or args.noticeable:
        print("\n".join(checkpoint_lines(args.model) if args.checkpoint else noticeable_lines()))
        return 0
    result = raw_results.load(results_path(args.model)) if args.report else measure(args.model, card_args)
    print("\n".join(report(result, args.section, args.header)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
