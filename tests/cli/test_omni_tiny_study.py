"""A real ``tuner run`` of the tiny Qwen2.5-Omni thinker spec, its export, and the export run from the YAML alone.

The spec is ``search_spaces/av_omni_tiny_cpu.yaml`` with a space made for measuring one thing:
every media and decoding knob fixed except ``max_new_tokens`` (5 values) and ``precision`` (fp32 /
bf16, a ``reload_on`` knob), walked by the grid sampler in one warm worker. The model is the
real ``Qwen2_5OmniThinkerForConditionalGeneration`` with seeded random weights, generating
exactly ``max_new_tokens`` tokens, so:

* every trial generates exactly ``max_new_tokens`` new tokens (counted, not timed: how latency follows
  them is ``bench/models_cpu.py``'s question);
* the greedy fp32 answers are prefixes of the reference's (fp32, 128 tokens), hence their token
  F1 with it is exactly ``2n / (n + 128)``;
* the warm worker loads the model again whenever precision changes (``count_adapter_loads``);
* ``tuner export --trial N`` + ``docs/examples/run_exported.py`` give that trial's answer.

About a minute on an idle 2-core machine, two with a CI run beside it. Nothing downloads (hub offline variables set).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml
from offline_model_study import run_exported, run_tuner

from tuner.storage.records import trial_records

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "search_spaces" / "av_omni_tiny_cpu.yaml"
TOKENS = [2, 8, 24, 64, 128]  # adjacent latencies about 2x apart: beyond a busy host's noise
LONGEST = TOKENS[-1]
FIXED = {
    "video_fps": 2.0,
    "max_frames": 8,
    "max_pixels": 12544,
    "audio_seconds": 2.0,
    "num_beams": 1,
    "use_cache": True,
    "batch_size": 1,
    "attn_implementation": "sdpa",
}


def metric(trial: optuna.trial.FrozenTrial, name: str) -> float:
    return float(trial.user_attrs["metrics"][name]["value"])


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, Path]:
    home = tmp_path_factory.mktemp("omni_tiny")
    spec = yaml.safe_load(SPEC.read_text())
    spec["parameters"] = {
        **{name: {"type": "categorical", "choices": [value]} for name, value in FIXED.items()},
        "max_new_tokens": {"type": "categorical", "choices": TOKENS},
        "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
    }
    spec["reference"] = {**FIXED, "max_new_tokens": LONGEST, "precision": "fp32"}
    spec["baseline"] = {**FIXED, "max_new_tokens": 24, "precision": "bf16"}
    spec["sampler"] = {"name": "grid"}
    spec["budget"] = {"trials": 10}
    spec["measurement"] = {"warmup": 1, "min_repeats": 3, "max_repeats": 3}
    path = home / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    run_tuner("run", str(path), "--study-name", "s", "--wall-time", "0", "--no-mlflow", cwd=home)
    return optuna.load_study(study_name="s", storage=f"sqlite:///{home / 'studies' / 'studies.db'}"), home


def measured(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.trials if t.user_attrs.get("measured")]


@pytest.mark.slow
@pytest.mark.timeout(900)  # about a minute idle; generous for a loaded CI machine
def test_every_trial_ran_in_one_warm_worker_with_reloads(study: tuple[optuna.Study, Path]) -> None:
    trials = measured(study[0])
    assert len(trials) >= 6
    outcomes = {t.number: (t.user_attrs["outcome"], t.user_attrs.get("reason")) for t in trials}
    assert all(outcome == "OK" for outcome, _ in outcomes.values()), outcomes
    side = trial_records(study[0], trials)  # worker_info and runtime are side records (issue 27)
    assert len({side[t.number]["worker_info"]["warm_worker_pid"] for t in trials}) == 1, "one warm worker"
    ran = sorted(trials, key=lambda t: t.datetime_complete)  # run order: a proposal may wait for its precision
    loads = [metric(t, "count_adapter_loads") for t in ran]
    assert loads == sorted(loads) and loads[-1] >= 2, f"precision changes reload the model: {loads}"
    switches = sum(a.params["precision"] != b.params["precision"] for a, b in zip(ran, ran[1:]))
    assert loads[-1] <= switches + 1, "only a static knob reloads"
    for trial in trials:
        assert side[trial.number]["runtime"]["weights_identity"] == "random:tiny:0"
        assert metric(trial, "count_new_tokens") == trial.params["max_new_tokens"]
        assert metric(trial, "count_video_tokens") == 48 and metric(trial, "count_audio_tokens") == 50


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_text_metrics_are_agreement_with_the_reference_answer(study: tuple[optuna.Study, Path]) -> None:
    trials = measured(study[0])
    reference = next(t for t in trials if t.user_attrs["role"] == "reference")
    assert metric(reference, "text_exact_match") == 1.0 and metric(reference, "text_f1") == 1.0
    for trial in trials:
        tokens = trial.params["max_new_tokens"]
        f1 = metric(trial, "text_f1")
        assert 0.0 <= f1 <= 1.0
        if trial.params["precision"] == "fp32":  # greedy, same weights: a prefix of the reference answer
            assert f1 == pytest.approx(2 * tokens / (tokens + LONGEST)), (trial.number, tokens, f1)
            assert metric(trial, "text_exact_match") == float(tokens == LONGEST)


def export_and_run(home: Path, number: int) -> tuple[dict[str, Any], list[str]]:
    """``tuner export --trial number``, then the example script on the YAML: (document, its answers)."""
    config = home / f"trial_{number}.yaml"
    run_tuner("export", "s", "--trial", str(number), "-o", str(config), cwd=home)
    document = yaml.safe_load(config.read_text())
    output = home / f"trial_{number}.npz"
    run_exported(config, output, home, document["env"]["OMP_NUM_THREADS"])
    with np.load(output, allow_pickle=True) as saved:
        return document, [str(text) for text in saved["text"]]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_export_runs_from_the_yaml_alone_and_gives_the_trials_answer(study: tuple[optuna.Study, Path]) -> None:
    optuna_study, home = study
    trials = measured(optuna_study)
    reference = next(t for t in trials if t.user_attrs["role"] == "reference")
    reference_answer = Path(reference.user_attrs["samples"]["answer.txt"]).read_text().strip()
    chosen = [
        next(t for t in trials if t.user_attrs["role"] == "baseline"),  # bf16, 24 tokens
        next(t for t in trials if t.params == {**FIXED, "max_new_tokens": 8, "precision": "fp32"}),
    ]
    for trial in chosen:
        document, answers = export_and_run(home, trial.number)
        invocation = document["invocation"]
        assert invocation["interface"] == "factory"
        assert invocation["target"] == "tuner.adapters.factories.transformers_av:make_omni_thinker"
        assert invocation["load_params"] == {"precision": trial.params["precision"], "attn_implementation": "sdpa"}
        assert answers == [Path(trial.user_attrs["samples"]["answer.txt"]).read_text().strip()]
        assert len(answers[0].split()) == trial.params["max_new_tokens"]
        if trial.params["precision"] == "fp32":
            assert reference_answer.startswith(answers[0])
