"""Training helpers shared by the built-in models' training scripts.

Both scripts promise weights that a re-run reproduces bit for bit on one
machine; these helpers hold the two pieces that promise rests on besides seeds:
the learning-rate schedule and torch's deterministic, fixed-thread mode.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch


def warmup_cosine_lr(step: int, peak: float, warmup_steps: int, total_steps: int) -> float:
    """Learning rate of ``step`` (0-based): linear warm-up to ``peak`` over ``warmup_steps``,
    then cosine decay to 5 % of ``peak`` at ``total_steps``."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak * (0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * progress)))


@contextlib.contextmanager
def deterministic_torch(threads: int, skip_memory_fill: bool = False) -> Iterator[None]:
    """Run the block with ``threads`` torch threads and deterministic algorithms, restoring both.

    ``skip_memory_fill``: also turn off the deterministic mode's filling of
    uninitialised memory (a cost with no effect on results when every tensor is
    written before it is read), restored afterwards.
    """
    previous_threads = torch.get_num_threads()
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    previous_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    if skip_memory_fill:
        torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = previous_fill
        torch.use_deterministic_algorithms(previous_deterministic)
        torch.set_num_threads(previous_threads)
