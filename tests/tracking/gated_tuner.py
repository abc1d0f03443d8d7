"""Run ``python -m tuner ARGS`` with a gate inside MLflow logging (a test helper, not a test).

Usage: ``python gated_tuner.py GATE_DIR POINT FIRST_TRIAL ARGS...``. The first trial run whose
trial number is at least ``FIRST_TRIAL`` stops at ``POINT`` of its logging:

* ``terminate``: its params, metrics and samples are logged, its status is still RUNNING
  (just before ``MlflowClient.set_terminated``);
* ``tag``: it is terminated, but the last write — the ``tuner.logged`` tag — has not happened.

There it creates ``GATE_DIR/arrived`` (holding the trial number) and waits until
``GATE_DIR/open`` exists: the test kills the process while it waits, so the coordinator dies
while it logs a trial, by construction rather than by a race with the clock. The gate wraps
the MLflow client (the external boundary); the tuner's own code runs unchanged.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

POLL_S = 0.01


def main() -> None:
    gate, point, first = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    from mlflow.tracking import MlflowClient

    stopped: list[int] = []

    def wait_if_gated(client: Any, run_id: str) -> None:
        number = client.get_run(run_id).data.tags.get("tuner.trial_number")
        if stopped or number is None or int(number) < first:
            return
        stopped.append(int(number))
        (gate / "arrived.tmp").write_text(number)
        (gate / "arrived.tmp").replace(gate / "arrived")  # whole when it appears: the test reads it at once
        while not (gate / "open").exists():
            time.sleep(POLL_S)

    set_terminated, log_batch = MlflowClient.set_terminated, MlflowClient.log_batch

    def gated_set_terminated(self: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
        if point == "terminate":
            wait_if_gated(self, run_id)
        return set_terminated(self, run_id, *args, **kwargs)

    def gated_log_batch(self: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
        if point == "tag" and any(tag.key == "tuner.logged" for tag in kwargs.get("tags") or ()):
            wait_if_gated(self, run_id)
        return log_batch(self, run_id, *args, **kwargs)

    MlflowClient.set_terminated = gated_set_terminated  # type: ignore[method-assign]
    MlflowClient.log_batch = gated_log_batch  # type: ignore[method-assign]
    from tuner.cli.main import main as tuner_main

    tuner_main(sys.argv[4:])


if __name__ == "__main__":
    main()
