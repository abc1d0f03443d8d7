"""A SIMULATED python-adapter model whose ``load`` is logged: for tests of what reloads a study causes.

:class:`SimulatedReloadingModel` has the python adapter's factory contract (``load(static_params)``,
``run(params, inputs)``; :mod:`tuner.adapters.python`) around :class:`tuner.workloads.fake.FakeWorkload`: ``run``
sleeps the setting's ``sleep_s`` and returns the fake's seeded video. Nothing is loaded: ``load`` only appends
one line, ``<pid> <static params as JSON>``, to ``load_log`` (when given), so a test counts from outside the warm
worker how often the study made it reload (:mod:`tuner.study.load_order`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.workloads.base import RunContext, WorkloadOutput
from tuner.workloads.fake import FakeWorkload


class SimulatedReloadingModel:
    """A stand-in model: a logged ``load``, a :class:`FakeWorkload` ``run`` (see the module docstring)."""

    def __init__(self, load_log: str | None = None, seed: int = 0) -> None:
        self.load_log = load_log
        self.seed = seed
        self.static: dict[str, Any] = {}
        self.fake = FakeWorkload()

    def load(self, static_params: Mapping[str, Any]) -> None:
        """Remember ``static_params``; log the load."""
        self.static = dict(static_params)
        if self.load_log:
            with open(self.load_log, "a") as log:
                log.write(f"{os.getpid()} {json.dumps(self.static, sort_keys=True)}\n")

    def run(self, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> WorkloadOutput:
        """The fake's output for ``params`` (its ``sleep_s``, ``noise``...)."""
        context = RunContext(device="cpu", seed=self.seed, inputs=dict(inputs), workdir=Path("."))
        return self.fake.run({**params, **self.static}, context)


def make_simulated_model(load_log: str | None = None, seed: int = 0) -> SimulatedReloadingModel:
    """The python adapter's factory for :class:`SimulatedReloadingModel`."""
    return SimulatedReloadingModel(load_log, seed)


def loads_logged(load_log: Path) -> list[dict[str, Any]]:
    """The static params of every load in ``load_log``, in order (none when the file is missing)."""
    if not load_log.exists():
        return []
    return [json.loads(line.split(" ", 1)[1]) for line in load_log.read_text().splitlines() if line.strip()]
