"""Run an exported setting (``tuner.config/v1``) as production does, from the YAML alone.

    python docs/examples/run_exported.py best.yaml output.npz

``invocation.interface`` says how: ``workload`` (a ``class:`` workload, built with no
arguments) or ``factory`` (the python adapter's ``load`` / ``run`` model). The output is
saved as the tuner saves a trial's (``.npz``); a ``command`` / ``http`` export is run
from its ``argv`` / ``url`` instead.
"""

import importlib
import sys
from pathlib import Path

import yaml

from tuner.workloads.base import RunContext, WorkloadOutput

config, output_path = Path(sys.argv[1]), Path(sys.argv[2])
call = yaml.safe_load(config.read_text())["invocation"]
module, _, name = call["target"].partition(":")
target = getattr(importlib.import_module(module), name)
if call["interface"] == "workload":
    context = RunContext(device=call["device"], seed=call["seed"], inputs=call["inputs"], workdir=output_path.parent)
    workload = target()
    workload.setup(call["kwargs"], context)
    output = workload.run(call["kwargs"], context)
else:
    model = target(**call["factory_kwargs"])
    model.load(call["load_params"])
    output = model.run(call["kwargs"], call["inputs"])
output = output if isinstance(output, WorkloadOutput) else WorkloadOutput(**output)  # run() may return a mapping
output.save(output_path)
