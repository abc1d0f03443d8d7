"""The environment a trial records: the allow-list, the spec's ``record_env``, the masks, and the read-time filter
of a trial an older tuner recorded with the whole environment (tuner.runner.recorded_env, issue 36)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.errors import SpecError
from tuner.runner.recorded_env import is_recorded, recorded_environment, recorded_only
from tuner.secrets import MASK
from tuner.ship.provenance_block import recorded_env
from tuner.spec.loading import parse_spec
from tuner.storage import attributes as names
from tuner.storage import store, store_rows
from tuner.storage.records import TrialRecord, full_record, study_record_env, trial_records

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPEC_TEXT = (Path(__file__).parents[1] / "specs" / "fake_ok.yaml").read_text()
WHOLE = {  # what an older worker recorded: everything, masked by name only
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/ci",
    "SSL_CERT_FILE": "/etc/ssl/ca.pem",
    "HOSTNAME": "runner-7",
    "GH_PAT": "ghp_oldLeak0000000000000000000000000001",
    "SENTRY_DSN": "https://pubKey0042@o1.ingest.sentry.io/2",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T1/B2/hookSecret9",
    "NETRC": "machine x password p4ss",
    "GITHUB_TOKEN": MASK,
    "DATABASE_URL": f"postgresql://u:{MASK}@db/app",
    "OMP_NUM_THREADS": "2",
    "CUDA_VISIBLE_DEVICES": "0",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "TUNER_STORAGE": "postgresql://tuner:st0rageSecret@db.example/studies",
    "MYAPP_MODE": "fast",
}
KEPT = {
    "CUDA_VISIBLE_DEVICES": "0",
    "OMP_NUM_THREADS": "2",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "TUNER_STORAGE": f"postgresql://tuner:{MASK}@db.example/studies",
}


def test_only_allow_listed_names_are_recorded_and_their_values_masked() -> None:
    environ = {
        "OMP_NUM_THREADS": "4",
        "MKL_NUM_THREADS": "4",
        "OPENBLAS_NUM_THREADS": "1",
        "NCCL_DEBUG": "WARN",
        "CUDA_LAUNCH_BLOCKING": "1",
        "TORCH_CUDNN_V8_API_ENABLED": "1",
        "NVIDIA_TF32_OVERRIDE": "0",
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TUNER_HOME": "/srv/studies",
        "TUNER_STORAGE": "postgresql+psycopg://tuner:s3cretPW@db.example:5432/studies",
        "TUNER_TOKEN": "bearer-token-0123456789",
        "NVIDIA_API_KEY": "nvapi-abc",
        "TUNER_EMPTY_TOKEN": "",
        "TUNER_NOTE": "reached db with password=s3cretPW",
        "GH_PAT": "ghp_x",
        "SENTRY_DSN": "https://k@o.ingest.sentry.io/1",
        "DOCKER_AUTH_CONFIG": "{}",
        "SESSION_COOKIE": "c",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.com/x",
        "CI_JOB_JWT": "e.y.j",
        "NETRC": "machine m",
        "PATH": "/usr/bin",
        "omp_num_threads": "3",
    }
    assert recorded_environment(environ) == {
        "CUDA_LAUNCH_BLOCKING": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "MKL_NUM_THREADS": "4",
        "NCCL_DEBUG": "WARN",
        "NVIDIA_API_KEY": MASK,
        "NVIDIA_TF32_OVERRIDE": "0",
        "OMP_NUM_THREADS": "4",
        "OPENBLAS_NUM_THREADS": "1",
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1",
        "TORCH_CUDNN_V8_API_ENABLED": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TUNER_EMPTY_TOKEN": "",
        "TUNER_HOME": "/srv/studies",
        "TUNER_NOTE": f"reached db with password={MASK}",
        "TUNER_STORAGE": f"postgresql+psycopg://tuner:{MASK}@db.example:5432/studies",
        "TUNER_TOKEN": MASK,
    }, "names matched case-sensitively; secret names masked, URL passwords redacted, the rest left out"


def test_a_specs_record_env_adds_names_and_globs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYAPP_MODE", "fast")
    monkeypatch.setenv("MYAPP_API_TOKEN", "myapp-secret-1")
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libtcmalloc.so")
    monkeypatch.setenv("OTHERAPP_MODE", "slow")
    shown = recorded_environment(extra=["MYAPP_*", "LD_PRELOAD"])  # the process environment by default
    assert shown["MYAPP_MODE"] == "fast" and shown["LD_PRELOAD"] == "/usr/lib/libtcmalloc.so"
    assert shown["MYAPP_API_TOKEN"] == MASK, "a record_env name still passes the masks"
    assert "OTHERAPP_MODE" not in shown and "OTHERAPP_MODE" not in recorded_environment()
    assert is_recorded("MYAPP_X", ["MYAPP_?"]) and not is_recorded("MYAPP_XY", ["MYAPP_?"])


def test_record_env_in_a_spec_is_names_or_simple_globs() -> None:
    assert parse_spec(SPEC_TEXT + "record_env: [LD_PRELOAD, MYAPP_*, 'X?_MODE']\n").record_env == [
        "LD_PRELOAD",
        "MYAPP_*",
        "X?_MODE",
    ]
    assert parse_spec(SPEC_TEXT).record_env == []
    for entry in ("'*'", "'A-B'", "'[A]*'", "'1X'"):
        with pytest.raises(SpecError, match=r":\d+: record_env\.0: .* is not an environment variable name"):
            parse_spec(SPEC_TEXT + f"record_env: [{entry}]\n")


def test_a_stored_environment_is_filtered_like_a_recorded_one() -> None:
    assert recorded_only(WHOLE) == KEPT
    assert recorded_only(WHOLE, ["MYAPP_*"]) == {**KEPT, "MYAPP_MODE": "fast"}
    assert recorded_only(recorded_environment(WHOLE)) == recorded_environment(WHOLE), "filtering twice changes nothing"
    assert recorded_only(None) is None and recorded_only("not a mapping") is None


def _study_with_an_older_trial(url: str | None) -> optuna.Study:
    """A study whose stored spec says ``record_env: [MYAPP_*]`` and whose one trial carries :data:`WHOLE` as a user
    attribute, as an older tuner wrote it."""
    study = optuna.create_study(storage=url, directions=["minimize", "maximize"])
    store.set_study_attribute(study, names.SPEC_YAML, SPEC_TEXT + "record_env: [MYAPP_*]\n")
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE,
            values=[0.1, 30.0],
            user_attrs={names.ENV: WHOLE, names.RUNTIME: {"python": "3.11"}},
        )
    )
    return study


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_an_older_trial_recorded_with_the_whole_environment_is_filtered_on_read(where: str, tmp_path: Path) -> None:
    study = _study_with_an_older_trial(None if where == "memory" else f"sqlite:///{tmp_path / 'old.db'}")
    [trial] = study.get_trials(deepcopy=False)
    assert trial.user_attrs[names.ENV] == WHOLE, "stored as the older tuner wrote it"
    assert study_record_env(study) == ("MYAPP_*",)
    read = trial_records(study, [trial])[trial.number]
    assert read[names.ENV] == {**KEPT, "MYAPP_MODE": "fast"} and read[names.RUNTIME] == {"python": "3.11"}
    assert full_record(study, trial).env == read[names.ENV], "tuner show's reader"
    assert recorded_env(read) == read[names.ENV], "the export's"
    assert TrialRecord.from_trial(trial).env == KEPT, "without the study: the built-in allow-list alone"


def test_a_side_record_holding_the_whole_environment_is_filtered_on_read(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'side.db'}")
    trial = study.ask()
    store.set_trial_attributes(trial, {names.MEASURED: True}, side={names.ENV: WHOLE})
    frozen = study.get_trials(deepcopy=False)[-1]
    assert store_rows.stored_records(study)[frozen.number][names.ENV] == WHOLE, "the side table holds what was written"
    assert trial_records(study, [frozen])[frozen.number][names.ENV] == KEPT, "no spec stored: the allow-list alone"
