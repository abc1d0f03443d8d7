"""An exported config runs from the YAML alone, and says what its trial ran with (issue 15).

Two real studies run through ``tuner run``: the avatar demo (``class:`` workload; its spec
with a cheaper reference, a shorter clip and one repeat, so the study takes about a minute on
2 cores) and a python-adapter study of a tiny deterministic model written here. Each chosen
trial is exported with ``tuner export`` and run by ``docs/examples/run_exported.py``, which
reads only the YAML; its output must equal what the trial kept of its own. Both workloads are
deterministic for a seed (the Workload contract) and the script runs in a fresh process like the
worker, so the comparison is exact. A study keeps one trial's whole output, the reference's
(``reference_output.npz``): for the reference trial of each study every array is compared (every
frame of every item, the audio, the item count). Any other trial keeps only samples, and its
contact sheet is the lossless one (the GIF is quantized): the frames on it are compared -- up to
8 evenly spaced frames of the first item; for the python-adapter study, whose videos have 6
frames and one item, that is every frame. The script gets the ``OMP_NUM_THREADS`` the export's
``env`` recorded, as production would: float reductions may depend on the thread count.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml
from PIL import Image

from tuner.runner.measure.samples import SHEET_FRAMES, contact_sheet, evenly_spaced, first_item_frames
from tuner.secrets import MASK
from tuner.ship.config_schema import load_config
from tuner.ship.export import build_config
from tuner.storage.records import TrialRecord

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "examples" / "run_exported.py"
AVATAR_WEIGHTS = ROOT / "tuner" / "workloads" / "avatar_dit" / "weights" / "avatar_dit.pt"
SECRET = "hunter2-token-value"
STUDY_ENV = {
    "MY_API_TOKEN": SECRET,
    "MY_MODEL_HOME": "/models/cache",
    "OMP_NUM_THREADS": "1",
    "MLFLOW_TRACKING_URI": "",
    "TUNER_STORAGE": "",
}

TINY_MODEL = '''
"""A tiny deterministic model for the python adapter: frames from its weights file, the seed and the steps."""
from pathlib import Path

import numpy as np


class TinyModel:
    def __init__(self, weights, seed=0):
        self.weights, self.seed, self.image = Path(weights), seed, None

    def load(self, static_params):
        raw = np.frombuffer(self.weights.read_bytes(), dtype=np.uint8)[: 16 * 16 * 3]
        self.image = raw.reshape(16, 16, 3).astype(np.float64) * static_params["gain"]

    def run(self, params, inputs):
        rng = np.random.default_rng([self.seed, params["steps"]])
        noise = rng.normal(0.0, 48.0 / params["steps"], (inputs["frames"], 16, 16, 3))
        return {"video": np.clip(self.image + noise, 0, 255).astype(np.uint8), "counters": {"steps": params["steps"]}}

    def declared_weights(self, inputs):
        return {"tiny": self.weights}


def make_tiny_model(**kwargs):
    return TinyModel(**kwargs)
'''


def tuner(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def study_env(**extra: str) -> dict[str, str]:
    return {**os.environ, **STUDY_ENV, **extra}


def run_study(spec: dict[str, Any], home: Path, env: dict[str, str]) -> optuna.Study:
    spec = {**spec, "record_env": ["MY_*"]}  # STUDY_ENV's own variables, beside the built-in allow-list
    path = home / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    tuner("run", str(path), "--study-name", "s", "--wall-time", "0", "--no-mlflow", cwd=home, env=env)
    return optuna.load_study(study_name="s", storage=f"sqlite:///{home / 'studies' / 'studies.db'}")


def export_and_run(home: Path, env: dict[str, str], *choice: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``tuner export`` (with ``choice``), then the example script on the YAML: (document, every array it saved)."""
    config = home / f"export{'_'.join(choice)}.yaml"
    tuner("export", "s", *choice, "-o", str(config), cwd=home, env=env)
    document = yaml.safe_load(config.read_text())
    output = home / f"{config.stem}.npz"
    threads = document["env"]["OMP_NUM_THREADS"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(config), str(output)],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "OMP_NUM_THREADS": threads},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return document, saved_arrays(output)


def saved_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of a saved output (``WorkloadOutput.save``: video, audio, audio_rate, text, items)."""
    with np.load(path, allow_pickle=True) as saved:
        return {key: saved[key] for key in saved.files}


def trial_of(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def assert_output_is_the_trials(study: optuna.Study, home: Path, number: int, output: dict[str, np.ndarray]) -> bool:
    """The script's ``output`` equals what trial ``number`` kept of its own: for the reference trial its whole
    saved output (every array), for any other trial the frames of its contact sheet. True: the whole output was
    compared (the reference trial)."""
    trial = trial_of(study, number)
    sheet = np.asarray(Image.open(trial.user_attrs["samples"]["contact_sheet.png"]).convert("RGB"))
    assert np.array_equal(contact_sheet(first_item_frames(output["video"])), sheet), "the frames of the sample"
    if trial.user_attrs["role"] != "reference":
        return False
    kept = saved_arrays(home / "studies" / "s" / "reference_output.npz")
    assert sorted(output) == sorted(kept), "the same arrays as the reference trial's saved output"
    for key, array in kept.items():
        assert output[key].dtype == array.dtype and np.array_equal(output[key], array), f"{key} differs"
    return True


def assert_every_frame_is_on_the_sheet(video: np.ndarray) -> None:
    """The contact sheet holds every frame of ``video``, unchanged: one item, at most 8 frames, uint8 (the
    sheet's nearest-neighbour enlargement is one-to-one, so equal sheets mean equal frames)."""
    assert video.ndim == 4 and video.dtype == np.uint8, (video.shape, video.dtype)
    assert len(video) <= SHEET_FRAMES and len(evenly_spaced(len(video), SHEET_FRAMES)) == len(video)


def git_facts(directory: Path) -> tuple[str | None, bool | None]:
    """(HEAD, tracked files changed) of the checkout holding ``directory``, or (None, None)."""
    head = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return None, None
    status = subprocess.run(
        ["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=True,
    )
    return head.stdout.strip(), bool(status.stdout.strip())


def assert_runtime_and_env(document: dict[str, Any], uses_torch: bool) -> None:
    """What every trial-sourced export carries on this host: packages, runtime facts or their reasons, env.
    ``uses_torch``: the workload imports torch in the worker (else its torch facts are unavailable, with why)."""
    import importlib.metadata

    import torch

    provenance = document["provenance"]
    assert provenance["source"] == "trial"
    for name in ("torch", "optuna", "tuner"):
        assert provenance["packages"][name] == importlib.metadata.version(name), name
    runtime = provenance["runtime"]
    assert runtime["python"] == ".".join(map(str, sys.version_info[:3]))
    if uses_torch:
        assert runtime["torch"] == torch.__version__
        assert runtime["torch_threads"] == int(document["env"]["OMP_NUM_THREADS"]), "the slot's thread count"
        assert runtime["torch_cuda"] == torch.version.cuda, "the CUDA runtime torch was built with (None: CPU build)"
        assert (runtime["torch_cuda"] is None) == ("torch.cuda" in runtime["unavailable"])
        assert runtime["cuda_available"] == torch.cuda.is_available()
    else:
        assert (runtime["torch"], runtime["torch_cuda"], runtime["cudnn"], runtime["torch_threads"]) == (None,) * 4
        assert "did not import torch" in runtime["unavailable"]["torch"]
    assert (runtime["driver"] is None) == ("driver" in runtime["unavailable"])
    if not torch.cuda.is_available():
        assert runtime["driver"] is None and runtime["unavailable"]["driver"].startswith("NVML")
    env = document["env"]
    assert env["MY_API_TOKEN"] == MASK and env["MY_MODEL_HOME"] == "/models/cache", "the spec's record_env"
    assert "PATH" not in env and "HOME" not in env, "nothing outside the allow-list and record_env"
    assert env["OMP_NUM_THREADS"].isdigit(), "the thread count the worker ran with (its slot's)"
    assert SECRET not in yaml.safe_dump(document)


@pytest.fixture(scope="module")
def avatar(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, Path, dict[str, str]]:
    """The avatar demo, cheaper: on the CPU, 1 s of audio, reference 12 frames / 2 steps / 32 px, one repeat,
    3 trials."""
    home = tmp_path_factory.mktemp("avatar_export")
    spec = yaml.safe_load((ROOT / "search_spaces" / "avatar_demo.yaml").read_text())
    spec["workload"]["device"] = "cpu"  # exact equality is claimed for CPU runs (GPU kernels may not be deterministic)
    spec["inputs"]["audio_seconds"] = 1.0
    spec["reference"] = {**spec["reference"], "infer_frames": 12, "sample_steps": 2, "resolution": 32}
    spec["baseline"] = {**spec["baseline"], "infer_frames": 6, "sample_steps": 1, "resolution": 32}
    spec["measurement"] = {"warmup": 0, "min_repeats": 1, "max_repeats": 1}
    spec["budget"] = {"trials": 3}
    env = study_env()
    return run_study(spec, home, env), home, env


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, Path, dict[str, str]]:
    """A python-adapter study of :data:`TINY_MODEL` (module and weights outside any git checkout)."""
    home = tmp_path_factory.mktemp("tiny_export")
    models = home / "models"
    models.mkdir()
    (models / "tiny_model.py").write_text(TINY_MODEL)
    weights = home / "tiny_weights.bin"
    weights.write_bytes(np.random.default_rng(7).integers(0, 128, 16 * 16 * 3, dtype=np.uint8).tobytes())
    spec = {
        "name": "tiny_python",
        "workload": {
            "timeout_s": 120,
            "device": "cpu",
            "python": {
                "factory": "tiny_model:make_tiny_model",
                "kwargs": {"weights": str(weights), "seed": 3},
                "reload_on": ["gain"],
            },
        },
        "inputs": {"frames": 6},
        "parameters": {
            "steps": {"type": "int", "low": 1, "high": 4},
            "gain": {"type": "categorical", "choices": [1, 2]},
        },
        "objectives": [
            {"metric": "latency_p50_s", "direction": "minimize"},
            {"metric": "psnr_db", "direction": "maximize"},
        ],
        "reference": {"steps": 4, "gain": 1},
        "baseline": {"steps": 2, "gain": 1},
        "measurement": {"warmup": 0, "min_repeats": 1, "max_repeats": 2},
        "budget": {"trials": 4},
        "sampler": {"name": "random"},
        "seed": 0,
    }
    path = [str(models), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = study_env(PYTHONPATH=os.pathsep.join(path), GIT_CEILING_DIRECTORIES=str(home.parent))
    return run_study(spec, home, env), home, env


@pytest.mark.slow
def test_the_avatar_demos_export_runs_from_the_yaml_alone(avatar: tuple[optuna.Study, Path, dict[str, str]]) -> None:
    study, home, env = avatar
    document, output = export_and_run(home, env)  # the default choice: the spec's export rule
    assert document["invocation"]["interface"] == "workload"
    assert document["invocation"]["kwargs"] == {**document["params"], **document["derived"]}
    assert document["invocation"]["device"] == study.user_attrs["device"] == "cpu"
    assert_output_is_the_trials(study, home, document["provenance"]["trial"], output)

    reference = next(t for t in study.trials if t.user_attrs.get("role") == "reference")
    _, reference_output = export_and_run(home, env, "--trial", str(reference.number))
    assert reference_output["video"].shape[:2] == (1, 12), "one item, 12 frames (1 s at 12 fps)"
    assert "audio" in reference_output, "the audio track is part of the compared output"
    assert assert_output_is_the_trials(study, home, reference.number, reference_output), "the whole output"


@pytest.mark.slow
def test_the_avatar_demos_export_names_commit_packages_runtime_weights_and_env(
    avatar: tuple[optuna.Study, Path, dict[str, str]],
) -> None:
    study, home, env = avatar
    config = home / "provenance.yaml"
    tuner("export", "s", "-o", str(config), cwd=home, env=env)
    document = load_config(config).to_document()
    assert_runtime_and_env(document, uses_torch=True)
    provenance = document["provenance"]
    commit, dirty = git_facts(ROOT)
    if commit is not None:  # a checkout of the project (CI: a clean clone)
        assert provenance["git"] == {"repository": str(ROOT), "commit": commit, "dirty": dirty, "reason": None}
    else:
        assert provenance["git"]["commit"] is None and provenance["git"]["reason"]
    weights = provenance["weights"]["avatar_dit"]
    assert weights["path"] == str(AVATAR_WEIGHTS.resolve()) and weights["bytes"] == AVATAR_WEIGHTS.stat().st_size
    assert weights["sha256"] == hashlib.sha256(AVATAR_WEIGHTS.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_python_adapter_export_runs_from_the_yaml_alone(tiny: tuple[optuna.Study, Path, dict[str, str]]) -> None:
    study, home, env = tiny
    reference = next(t for t in study.trials if t.user_attrs.get("role") == "reference")
    for choice in ((), ("--objective", "psnr_db"), ("--trial", str(reference.number))):
        document, output = export_and_run(home, env, *choice)
        video = output["video"]
        invocation = document["invocation"]
        assert invocation["interface"] == "factory" and invocation["target"] == "tiny_model:make_tiny_model"
        assert invocation["load_params"] == {"gain": document["params"]["gain"]}
        assert invocation["kwargs"] == document["params"] and invocation["inputs"] == {"frames": 6}
        assert invocation["seed"] == 0 and invocation["device"] == "cpu"
        trial = trial_of(study, document["provenance"]["trial"])
        assert invocation == trial.user_attrs["invocation"], "what the worker ran"
        assert video.shape == (6, 16, 16, 3)
        assert_every_frame_is_on_the_sheet(video)  # so every frame is compared, whichever the trial
        whole = assert_output_is_the_trials(study, home, trial.number, output)
        assert whole == (trial.number == reference.number)


@pytest.mark.slow
def test_a_python_adapter_export_names_weights_and_a_missing_commit(
    tiny: tuple[optuna.Study, Path, dict[str, str]],
) -> None:
    study, home, env = tiny
    config = home / "provenance.yaml"
    tuner("export", "s", "-o", str(config), cwd=home, env=env)
    document = load_config(config).to_document()
    assert_runtime_and_env(document, uses_torch=False)
    provenance = document["provenance"]
    git = provenance["git"]
    assert git["commit"] is None and git["reason"].startswith(f"no git commit for {home / 'models'}")
    assert provenance["runtime"]["unavailable"]["git"] == git["reason"]
    assert "tiny_model" not in provenance["packages"], "a module no distribution provides has no version"
    weights = home / "tiny_weights.bin"
    assert provenance["weights"] == {
        "tiny": {
            "path": str(weights.resolve()),
            "bytes": weights.stat().st_size,
            "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        }
    }


def _copy_without(study: optuna.Study, study_keys: tuple[str, ...], trial_keys: tuple[str, ...]) -> optuna.Study:
    """An in-memory copy of ``study`` recorded as an older tuner did: without those user attributes."""
    old = optuna.create_study(directions=study.directions)
    for key, value in study.user_attrs.items():
        if key not in study_keys:
            old.set_user_attr(key, value)
    for trial in study.get_trials(deepcopy=True):
        old.add_trial(
            optuna.trial.create_trial(
                state=trial.state,
                values=trial.values,
                params=trial.params,
                distributions=trial.distributions,
                user_attrs={k: v for k, v in trial.user_attrs.items() if k not in trial_keys},
                system_attrs=trial.system_attrs,
            )
        )
    return old


@pytest.mark.slow
def test_older_studies_export_with_what_they_recorded(tiny: tuple[optuna.Study, Path, dict[str, str]]) -> None:
    study, _, _ = tiny
    record = TrialRecord.from_trial(next(t for t in study.trials if t.user_attrs.get("role") == "baseline"))

    no_trial_runtime = _copy_without(study, (), ("env", "runtime"))
    document = build_config(no_trial_runtime, record, "sqlite:///old.db")
    provenance = document["provenance"]
    assert provenance["source"] == "study" and document["env"] is None
    assert provenance["git"] == study.user_attrs["provenance"]["git"]
    assert provenance["packages"] == study.user_attrs["provenance"]["packages"]
    assert provenance["runtime"] is None and provenance["weights"] == {}

    nothing = _copy_without(study, ("provenance",), ("env", "runtime", "invocation"))
    document = build_config(nothing, record, "sqlite:///old.db")
    provenance = document["provenance"]
    assert (
        provenance["source"],
        provenance["git"],
        provenance["packages"],
        provenance["runtime"],
        provenance["weights"],
        document["env"],
    ) == (None, None, {}, None, {}, None)
    assert document["invocation"]["device"] == study.user_attrs["device"], "the study's device when none recorded"
