"""Running a study on this host, with no terminal output: what ``tuner run`` / ``resume`` / ``worker`` and
``tuner.run_study`` share.

:func:`~tuner.session.run.run_session` opens a run (the study's lock on this host's devices,
the run or resume recorded with its overrides), wires it (host facts, constraint plan, slots,
runner, MLflow tracker, reference store, memory model: :mod:`.wiring`), runs the coordinator
(Ctrl-C / SIGTERM stop it: :mod:`.signals`) and finishes it (tracker closed, summary and front,
best setting exported, dashboard view refreshed: :mod:`.finish`). Everything it has to say goes to
a :class:`~tuner.session.events.SessionListener` as :class:`~tuner.session.events.Notice` lines
(:mod:`.events`); the CLI renders them with rich, :mod:`.text` as plain lines.

Layer: above study, tracking and ship (it wires them), below fleet (the fleet worker's loop runs
sessions) and the CLI. Imports nothing itself.
"""
