"""The scripting API behind ``import tuner``: load a spec, create or load a study,
run it, export the chosen setting — the four moments of the command line,
as functions.

Same defaults as the CLI: the tuner home is ``--home`` / ``$TUNER_HOME`` /
``./studies``, the storage ``$TUNER_STORAGE`` or SQLite under the home, MLflow
``$MLFLOW_TRACKING_URI`` or ``sqlite:///mlflow/mlflow.db``. Errors are the
package's own: :class:`~tuner.spec.models.SpecError`,
:class:`~tuner.errors.StudyError`, :class:`~tuner.ship.export.ExportError`
(and :class:`ValueError` for ``device: cuda`` on a host without a GPU).
"""

from __future__ import annotations

from pathlib import Path

from tuner.spec.loading import load_spec
from tuner.spec.models import SamplerName, StudySpec
from tuner.storage.opening import storage_url, tuner_home
from tuner.study.listeners import Summary
from tuner.study.studies import OpenStudy


def create_study(
    spec: str | Path,
    *,
    study_name: str | None = None,
    storage: str | None = None,
    home: str | Path | None = None,
    sampler: SamplerName | None = None,
    trials: int | None = None,
    warm_start: str | None = None,
    warm_start_storage: str | None = None,
    device_hours: float | None = None,
) -> OpenStudy:
    """A new study from the spec file ``spec`` (reference and baseline enqueued first).

    ``study_name`` defaults to ``<spec>-<gpu type>-<UTC time>``; ``trials`` and
    ``device_hours`` override the spec's budget. ``warm_start`` names a finished study of the same spec
    on other hardware (in ``warm_start_storage``, default ``storage``): its front is queued
    after the reference and baseline, its memory evidence informs the memory model
    (:mod:`tuner.search.warm_start`). Raises ``SpecError`` for a spec a run could not start
    on this host (the same checks as ``tuner validate``) and ``StudyError`` when the name exists
    or the warm-start study is missing, measured nothing or has other parameters.
    """
    from tuner.gpu import gpu_type
    from tuner.search.warm_start import enqueue_front, open_source
    from tuner.study import studies
    from tuner.study.preflight import check_runnable

    path = Path(spec)
    loaded: StudySpec = load_spec(path)
    text = path.read_text()
    device = check_runnable(loaded, text, str(path), sampler)
    kind = gpu_type() if device == "cuda" else "cpu"
    url = storage_url(storage, tuner_home(home))
    name = study_name or studies.default_study_name(loaded, kind)
    source = None
    if warm_start is not None:
        source = open_source(
            storage_url(warm_start_storage, tuner_home(home)) if warm_start_storage else url, warm_start, loaded
        )
    opened = studies.create_study(
        loaded,
        text,
        url,
        name,
        sampler or loaded.sampler.name,
        trials,
        studies.study_attributes(loaded, text, device, kind),
        device_hours=device_hours,
    )
    if source is not None:
        enqueue_front(opened.study, opened.spec, opened.storage_url, source)
    return opened


def load_study(
    study_name: str, *, storage: str | None = None, home: str | Path | None = None, sampler: SamplerName | None = None
) -> OpenStudy:
    """An existing study, with its spec rebuilt from the storage."""
    from tuner.study import studies

    return studies.load_study(storage_url(storage, tuner_home(home)), study_name, sampler)


def run_study(
    opened: OpenStudy,
    *,
    home: str | Path | None = None,
    workers: int = 1,
    mlflow_uri: str | None = None,
    use_mlflow: bool = True,
    verbose: bool = False,
    memory_model: bool = True,
    warm_start_storage: str | None = None,
) -> Summary:
    """Run ``opened`` to its budget (as ``tuner run`` / ``tuner resume`` do) and return the summary.

    Trial files go under the tuner home; the best setting on the first
    objective is exported to ``<home>/<study>/best.yaml``. ``verbose`` prints
    progress and the session's messages as plain lines on stdout / stderr
    (:mod:`tuner.session.text`). ``memory_model=False`` runs every
    setting, even one predicted to run out of memory (``--no-memory-model``);
    ``warm_start_storage`` is where a warm start's source is, when its recorded URL
    lost its credentials.
    """
    from tuner.gpu import resolve_device
    from tuner.session.run import RunOptions, run_session
    from tuner.session.text import TextSession
    from tuner.storage.records import StudyRecord

    device = StudyRecord.of(opened.study).device or resolve_device(opened.spec.workload.device)
    options = RunOptions(
        tuner_home(home),
        device,
        workers,
        mlflow_uri,
        use_mlflow,
        memory_model=memory_model,
        warm_start_storage=warm_start_storage,
    )
    return run_session(opened, options, TextSession() if verbose else None)


def export_config(
    opened: OpenStudy,
    output: str | Path,
    *,
    policy: str | None = None,
    profile: str | None = None,
    objective: str | None = None,
    trial: int | None = None,
) -> Path:
    """Write the chosen trial as ``tuner.config/v1`` YAML to ``output``; returns the path.

    At most one of ``policy`` (e.g. ``"minimize latency_p50_s subject to
    stlpips_alex <= 0.05"``, ``"knee"``), ``profile`` (fast | balanced |
    quality), ``objective`` or ``trial``; none applies the study spec's ``export``
    rule, or the knee of the front when it has none (``selection.rule`` says which). A noisy pick is replaced by a stable trial within its spread, and
    the document's ``warnings`` say when a noisy trial or baseline is shipped.
    Raises ``ExportError`` when nothing feasible can be chosen.
    """
    from tuner.ship.export import build_config, choose, write_config

    chosen = choose(opened.study, policy=policy, profile=profile, objective=objective, trial_number=trial)
    document = build_config(
        opened.study,
        chosen.record,
        opened.storage_url,
        chosen.policy,
        chosen.profile,
        replaced_noisy=chosen.replaced.number if chosen.replaced else None,
        rule=chosen.rule,
    )
    return write_config(document, Path(output))
