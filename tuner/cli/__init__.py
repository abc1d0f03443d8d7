"""The ``tuner`` command line: the only layer that talks to the user's terminal.

* :mod:`.app` -- the Typer app, consoles, shared options, :func:`~.app.fail`;
* :mod:`.study_commands` -- validate, run, resume, status, schema;
* :mod:`.view_commands` -- front, export, check, ui, sync-mlflow;
* :mod:`.session` -- the wiring of one run / resume (runner, coordinator, tracker, export);
* :mod:`.progress` -- the live display;
* :mod:`.main` -- the entry point (``tuner`` / ``python -m tuner``).

May import every other package; nothing imports it but :mod:`tuner.api` and
``python -m tuner``.
"""
