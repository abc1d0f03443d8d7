"""Where a trial runs: in isolation, in a worker process on its slot.

* :mod:`.base` -- the :class:`~.base.Runner` interface, ``TrialRequest``, ``Slot``, slot planning;
* :mod:`.subprocess` (+ :mod:`.forkserver`, :mod:`.forkclient`) -- a fresh worker per trial;
* :mod:`.warm` (+ :mod:`.warm_worker`) -- one long-lived worker per slot that keeps the model;
* :mod:`.choice` -- fresh or warm runner for a spec;
* :mod:`.worker` -- inside the worker: set up, measure, evaluate, classify the outcome;
* :mod:`.samples` -- output samples the worker writes (contact sheet, GIF, answer text);
* :mod:`.scratch` -- a trial directory over its limit: the excess deleted (or kept) and named;
* :mod:`.reaper` -- process tags and the reaper: a trial's whole process tree dies with the
  trial and with the coordinator, wherever its processes were re-parented.

May import: :mod:`tuner.workloads`, :mod:`tuner.adapters`, :mod:`evaluators`,
:mod:`tuner.spec` and the foundation modules. Only worker processes import torch.
"""
