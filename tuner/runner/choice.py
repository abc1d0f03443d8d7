"""Which runner a spec's trials use: fresh worker processes or warm ones.

``workload.worker``: ``fresh`` gives :class:`~tuner.runner.subprocess.SubprocessRunner`
(a new process per trial, forked from a fork server that preloaded the workload's
module); ``warm`` gives :class:`~tuner.runner.warm.WarmRunner` (one long-lived
process per slot, the model kept between trials); ``auto`` is warm for the
``python`` adapter and fresh otherwise. Either cleans a trial directory left over
``workload.max_trial_dir_gb`` unless ``workload.trial_scratch`` is ``keep``
(:class:`~tuner.runner.base.ScratchPolicy`).
"""

from __future__ import annotations

from tuner.runner.base import Runner, ScratchPolicy
from tuner.spec.models import StudySpec


def make_runner(spec: StudySpec, preload: list[str]) -> Runner:
    """The runner for ``spec``; ``preload``: extra modules a fork server imports once (evaluator warm-ups)."""
    scratch = ScratchPolicy(spec.workload.max_trial_dir_gb, spec.workload.trial_scratch == "clean")
    if spec.workload.warm:
        from tuner.runner.warm import WarmRunner

        return WarmRunner(scratch=scratch)
    from tuner.runner.subprocess import SubprocessRunner

    return SubprocessRunner(preload=[spec.workload.target, *preload], scratch=scratch)  # module:Class, resolved
