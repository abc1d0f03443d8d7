"""Which runner a spec's trials use: fresh worker processes or warm ones.

``workload.worker``: ``fresh`` gives :class:`~tuner.runner.subprocess.SubprocessRunner`
(a new process per trial, forked from a fork server that preloaded the workload's
module); ``warm`` gives :class:`~tuner.runner.warm.WarmRunner` (one long-lived
process per slot, the model kept between trials); ``auto`` is warm for the
``python`` adapter and fresh otherwise. Either cleans a trial directory left over
``workload.max_trial_dir_gb`` unless ``workload.trial_scratch`` is ``keep``
(:class:`~tuner.runner.base.ScratchPolicy`).

A ``tuner worker`` that runs study after study keeps its runner between them (:class:`KeptRunner`): the next
study of the same workload on the same slots finds its warm workers running, the model loaded and the shapes
it ran already warm, so it pays no process start, imports or load again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from tuner.runner.base import Runner, ScratchPolicy, Slot
from tuner.spec.models import StudySpec


def make_runner(spec: StudySpec, preload: list[str]) -> Runner:
    """The runner for ``spec``; ``preload``: extra modules a fork server imports once (evaluator warm-ups)."""
    scratch = ScratchPolicy(spec.workload.max_trial_dir_gb, spec.workload.trial_scratch == "clean")
    if spec.workload.warm:
        from tuner.runner.warm import WarmRunner

        return WarmRunner(scratch=scratch)
    from tuner.runner.subprocess import SubprocessRunner

    return SubprocessRunner(preload=[spec.workload.target, *preload], scratch=scratch)  # module:Class, resolved


class KeptRunner:
    """The runner a ``tuner worker`` keeps from one study to the next (see the module docstring): reused when
    the next study's workload block, evaluator preloads and slots are the same, else closed and a new one made.
    Only the thread that runs the studies calls it."""

    def __init__(self) -> None:
        self._key: str | None = None
        self._runner: Runner | None = None

    def runner_for(self, spec: StudySpec, preload: list[str], slots: Sequence[Slot]) -> Runner:
        """The kept runner when it serves ``spec``'s workload on ``slots``; else a new one (the old closed)."""
        key = json.dumps(
            [spec.workload.model_dump(mode="json"), sorted(preload), [asdict(slot) for slot in slots]],
            sort_keys=True,
            default=str,
        )
        if self._runner is not None and key == self._key:
            return self._runner
        self.close()
        self._runner, self._key = make_runner(spec, preload), key
        return self._runner

    @property
    def kept(self) -> bool:
        """Whether a runner is kept now."""
        return self._runner is not None

    def close(self) -> None:
        """Close the kept runner (its workers and their loaded models end), if any."""
        runner, self._runner, self._key = self._runner, None, None
        if runner is not None:
            runner.close()
