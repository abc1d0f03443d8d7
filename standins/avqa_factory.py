"""A python-adapter factory around the project's REAL built-in audio-visual QA model (tuner.workloads.avqa).

Not simulated: ``load`` reads the committed avqa weights and renders the question
clips, ``run`` answers them with the real model (greedy or beam search, KV cache,
frames / fps / audio length / batch as parameters). It exists to exercise the
``python`` adapter and its warm worker with a real model on a CPU, in the shape a
transformers ``generate()``-based audio-visual LLM takes in ``av_llm.yaml``
(``load(static_params)``, ``run(params, inputs)``).

``load_log`` (a file path, optional) gets one line per ``load`` call: ``<pid> <static params>``,
so tests can count loads from outside the worker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.workloads.base import RunContext, WorkloadOutput


class AVQAModel:
    """``load`` / ``run`` over :class:`tuner.workloads.avqa.AVQAWorkload` (see module docs)."""

    def __init__(
        self, device: str = "cpu", seed: int = 0, load_log: str | None = None, workdir: str | None = None
    ) -> None:
        from tuner.workloads.avqa import AVQAWorkload

        self.device = device
        self.seed = seed
        self.load_log = load_log
        self.workdir = Path(workdir or os.environ.get("TMPDIR", "/tmp"))
        self.workload = AVQAWorkload()
        self.static: dict[str, Any] = {}
        self.loaded = False

    def _context(self, inputs: Mapping[str, Any]) -> RunContext:
        return RunContext(device=self.device, seed=self.seed, inputs=dict(inputs), workdir=self.workdir)

    def load(self, static_params: Mapping[str, Any]) -> None:
        """Remember the static params; the weights load at the first ``run`` (they need the inputs)."""
        self.static = dict(static_params)
        self.loaded = False
        if self.load_log:
            with open(self.load_log, "a") as log:
                log.write(f"{os.getpid()} {json.dumps(self.static, sort_keys=True)}\n")

    def run(self, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> WorkloadOutput:
        context = self._context(inputs)
        merged = {**params, **self.static}
        if not self.loaded:
            self.workload.setup(merged, context)
            self.loaded = True
        return self.workload.run(merged, context)

    def unload(self) -> None:
        self.workload.teardown()
        self.loaded = False


def make_avqa_model(**kwargs: Any) -> AVQAModel:
    """The factory named in specs: ``standins.avqa_factory:make_avqa_model``."""
    return AVQAModel(**kwargs)
