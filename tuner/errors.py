"""The tuner's exceptions: one tree, drawn here.

Every exception class the tuner defines derives from :class:`TunerError`: a failure the
tuner recognises and states in one line (``str(error)``). Each class keeps the builtin
base its callers catch it by (``ValueError``, ``RuntimeError``, ``MemoryError``,
``FileNotFoundError``, ``ModuleNotFoundError``), so ``except ValueError`` still works
where it did. The categories below live in this module; each leaf lives in the module
that raises it::

    TunerError                                   exit status 2 when it reaches the CLI
    ├── InputError (ValueError)                  what a person wrote cannot be used
    │   ├── SpecError                            a search-space spec (tuner.spec.models)
    │   ├── YamlProblem                          YAML over its limits / repeated keys (tuner.spec.yaml_guard)
    │   ├── ExpressionError                      a spec expression (tuner.spec.expressions)
    │   │   └── ExpressionLimitError             ... over its size / depth / cost limits
    │   ├── TemplateError                        a command / request template (tuner.adapters.template)
    │   ├── ConfigError                          an exported tuner.config/v1 file (tuner.ship.config_schema)
    │   ├── PolicyError                          an export policy (tuner.spec.export_rule)
    │   ├── TableError                           a replay table (tuner.replay.table)
    │   └── AuthError                            a service token or an unsafe bind (tuner.fleet.auth)
    ├── StudyError (RuntimeError)                a study or storage: unknown, taken, unreachable
    │   ├── StudyLocked                          another live coordinator holds it (tuner.storage.coordination.lock)
    │   ├── StorageUnavailable                   unreachable past the outage bound (tuner.storage.outage)
    │   └── StorageMisconfigured                 refused a login, a database, a permission: at once (tuner.storage.outage)
    ├── WorkloadError                            raised inside a trial; the worker turns it into an outcome
    │   ├── InvalidSetting (ValueError)          INVALID (tuner.workloads.base)
    │   ├── CommandOutOfMemory (MemoryError)     OOM (tuner.adapters.command)
    │   ├── CommandFailed (RuntimeError)         CRASH (tuner.adapters.command)
    │   ├── ServiceOutOfMemory (MemoryError)     OOM (tuner.adapters.http)
    │   ├── ServiceFailed (RuntimeError)         CRASH (tuner.adapters.http)
    │   ├── MediaError (ValueError)              an output file that cannot be read (tuner.adapters.media)
    │   ├── WeightsMissing (FileNotFoundError)   a built-in model's weights file (tuner.workloads.avatar_dit)
    │   ├── SimulatedDeviceOutOfMemoryError      SIMULATED CUDA OOM (tuner.workloads.fake)
    │   ├── OutOfMemoryError (MemoryError)       the simulated device's OOM (tuner.testing.simulated_cuda)
    │   └── SimulatedCudaError (RuntimeError)    the simulated device's CUDA error (tuner.testing.simulated_cuda)
    ├── HostError                                this host lacks what a command needs, or a server will not start
    │   ├── MissingExtra (ModuleNotFoundError)   a module of an extra (tuner.spec.extras)
    │   ├── NvmlUnavailable (RuntimeError)       NVML (tuner.gpu)
    │   ├── WeightsUnavailable (FileNotFoundError)  a perceptual network's weights (tuner.evaluators.perceptual)
    │   ├── PostgresNotInstalled (RuntimeError)  initdb / pg_ctl for tests (tuner.testing.postgres)
    │   ├── UiError (RuntimeError)               the MLflow UI (tuner.tracking.ui)
    │   └── DashboardError (RuntimeError)        optuna-dashboard (tuner.tracking.dashboard_server)
    ├── ExportError (RuntimeError)               no trial can be exported (tuner.ship.export)
    ├── CheckError (RuntimeError)                ``tuner check`` cannot run (tuner.ship.check)
    ├── ServiceError (RuntimeError)              ``tuner submit``: the service refused or is unreachable (tuner.fleet.client)
    └── Refused                                  ``tuner serve``: a submission refused, with its HTTP status (tuner.fleet.submission)

The CLI (:func:`tuner.cli.main.main`) answers a :class:`TunerError` that reaches it with
``error: <message>`` and its :attr:`~TunerError.exit_status` (2: the README's "bad input,
an unknown or locked study, a storage failure"); any other exception is a bug of the tuner
(``error: internal error: ...``, exit 1). Commands usually catch their errors first and say
the same line through ``tuner.cli.app.fail``.

Foundation layer: this module imports nothing.
"""

from __future__ import annotations

EXIT_USER_ERROR = 2
"""The CLI's exit status for a failure stated in one line (bad input, study, storage, host)."""
EXIT_INTERNAL_ERROR = 1
"""The CLI's exit status for an exception that is not a :class:`TunerError` (a bug)."""


class TunerError(Exception):
    """Every error the tuner raises on purpose; ``str(error)`` is the one line a person reads."""

    exit_status: int = EXIT_USER_ERROR
    """What the CLI exits with when this error reaches it."""


class InputError(TunerError, ValueError):
    """Something a person wrote (spec, YAML, expression, template, config, policy, table, token)
    cannot be used; the message says where and why."""


class SpecError(InputError):
    """A spec that cannot be used. ``str(error)`` is the one-line user message (``file:line: key: problem``)."""


class StudyError(TunerError, RuntimeError):
    """A study or storage that cannot be created, found, opened or reached; the message says why, in one line."""


class WorkloadError(TunerError):
    """Raised by a workload or adapter inside a trial; the worker turns it into the trial's outcome
    (:func:`tuner.runner.worker.classify_exception`: INVALID, OOM or CRASH by its builtin base)."""


class HostError(TunerError):
    """This host lacks something a command needs (an extra, NVML, weights, a program), or a server
    the command starts does not come up; the message says what to install or where to look."""
