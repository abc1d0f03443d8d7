"""The study loop: a study created or loaded, and its trials asked, run and told.

* :mod:`.studies` -- create / load a study with its spec, sampler, budget and reference/baseline;
* :mod:`.preflight` -- what ``validate`` and ``run`` check on this host before a trial runs;
* :mod:`.coordinator` -- the ask -> run -> tell loop over the runner's slots, one step per method;
  :mod:`.coordinator_state` -- its state and summary; :mod:`.wakeup` -- its one blocking wait;
* :mod:`.trial_recording` -- how a finished trial is told; :mod:`.reference` -- the reference output
  handed to every later trial; :mod:`.snapshot` -- what the loop keeps of finished trials;
  :mod:`.shared` -- what a coordinator sees of others (budget, exclusive roles, copies to settle);
* :mod:`.listeners` -- what the loop's listeners hear.

May import: :mod:`tuner.search`, :mod:`tuner.storage`, :mod:`tuner.runner`, :mod:`tuner.workloads`,
:mod:`tuner.adapters`, :mod:`tuner.evaluators`, :mod:`tuner.spec` and the foundation modules. Never
the views above it (replay, front, tracking, ship, session, cli).
"""
