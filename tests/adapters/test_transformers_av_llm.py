"""``make_av_llm`` (a transformers processor + multimodal LM from a local directory) on real transformers classes.

The checkpoint is tiny and built offline (:mod:`tiny_av_llm`: the real ``Qwen2_5OmniProcessor`` and
``Qwen2_5OmniThinkerForConditionalGeneration``, random weights), loaded back through ``AutoProcessor`` and
``AutoModelForMultimodalLM`` as a user's checkpoint would be. No network: the hub's offline variables are set
before transformers is imported. Then ``search_spaces/av_llm.yaml`` itself runs (``tuner run``, two trials)
against it on the CPU. About 30 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / huggingface_hub read it
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import optuna  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

pytest.importorskip("transformers")

import torch  # noqa: E402
from adapter_helpers import ROOT, write_wav  # noqa: E402
from tiny_av_llm import TinyAVLLM, save_tiny_av_llm  # noqa: E402
from transformers import Qwen2_5OmniThinkerForConditionalGeneration  # noqa: E402

from tuner.adapters.factories.av_llm import TransformersAVModel, make_av_llm  # noqa: E402
from tuner.workloads.base import InvalidSetting  # noqa: E402

pytestmark = pytest.mark.slow  # transformers' import, a tiny checkpoint and one short study

FACTORY = "tuner.adapters.factories.av_llm:make_av_llm"
QUESTIONS = ["What?", "What is the person holding in the hand?", "Who?"]
PARAMS: dict[str, Any] = {
    "video_fps": 2.0,
    "max_frames": 8,
    "audio_sample_rate": 16000,
    "max_audio_seconds": 2.0,
    "max_new_tokens": 8,
    "num_beams": 1,
    "do_sample": False,
    "use_cache": True,
    "batch_size": 3,
}


class RecordingThinker(Qwen2_5OmniThinkerForConditionalGeneration):
    """The real thinker class, recording the keyword arguments ``from_pretrained`` is given."""

    calls: list[dict[str, Any]] = []

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        cls.calls.append(dict(kwargs))
        return super().from_pretrained(*args, **kwargs)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyAVLLM:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return save_tiny_av_llm(tmp_path_factory.mktemp("tiny_av_llm") / "checkpoint")
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The spec's inputs: a 2 s clip (25 fps, 56 x 84, .npy), 2 s of 16 kHz audio, three questions."""
    folder = tmp_path_factory.mktemp("av_llm_media")
    video = folder / "clip.npy"
    np.save(video, np.random.default_rng(0).integers(0, 256, (50, 56, 84, 3), dtype=np.uint8))
    return {"video": str(video), "audio": str(write_wav(folder / "clip.wav", 2.0)), "questions": list(QUESTIONS)}


@pytest.fixture(scope="module")
def loaded(tiny: TinyAVLLM) -> TransformersAVModel:
    model = make_av_llm(model_path=str(tiny.path), device="cpu", source_fps=25.0)
    model.load({"precision": "fp32"})
    return model


def _answer_ends(rows: list[list[int]], stops: set[int]) -> list[int]:
    """Per row, the position of its first end-of-answer or pad id (the row's length when it has none)."""
    return [next((i for i, token in enumerate(row) if token in stops), len(row)) for row in rows]


def test_loads_with_the_transformers_5_arguments(tiny: TinyAVLLM, media: dict[str, Any]) -> None:
    """``dtype=`` (not the deprecated ``torch_dtype=``), local files only; left padding for a decoder-only batch."""
    RecordingThinker.calls.clear()
    model = make_av_llm(model_path=str(tiny.path), model_class=f"{__name__}:RecordingThinker", device="cpu")
    model.load({"precision": "bf16"})
    (kwargs,) = RecordingThinker.calls
    assert kwargs.get("dtype") is torch.bfloat16 and "torch_dtype" not in kwargs, kwargs
    assert kwargs.get("local_files_only") is True
    assert next(model.model.parameters()).dtype == torch.bfloat16
    assert model.processor.tokenizer.padding_side == "left"
    output = model.run({**PARAMS, "max_new_tokens": 2}, media)  # bf16 features reach the bf16 encoders
    assert output.items == len(QUESTIONS) and output.counters["new_tokens"] <= 2 * len(QUESTIONS)


def _ending_early(rows: list[list[int]], stops: set[int]) -> int:
    """A plain id that, as an extra end-of-answer id, ends one row after a few tokens and not another row."""
    for row in rows:
        for position in range(1, 5):
            token = row[position]
            if token not in stops and token not in row[:position] and any(token not in other for other in rows):
                return token
    raise AssertionError(f"no id ends one answer early and leaves another: {rows}")


def test_new_tokens_count_each_answer_up_to_its_end_never_the_padding(
    loaded: TransformersAVModel, tiny: TinyAVLLM, media: dict[str, Any], tmp_path: Path
) -> None:
    """One batch of three questions where one answer ends early: its EOS and the padding ``generate`` puts
    after it are not new tokens; the answers are decoded up to their ends.

    So that some answer surely ends early on any host, the checkpoint is copied with a second end-of-answer
    id in its generation config: an id that this host's greedy answers show early in one row and not in
    another."""
    batch = loaded.prepare(QUESTIONS, PARAMS, media)
    grids = batch["video_grid_thw"].prod(-1) // 4
    assert (batch["input_ids"] == tiny.video).sum(-1).tolist() == grids.tolist(), "each prompt holds its video"
    assert bool(((batch["input_ids"] == tiny.audio).sum(-1) > 0).all()), "and its audio"
    with torch.inference_mode():
        raw = loaded.model.generate(**batch, max_new_tokens=PARAMS["max_new_tokens"], do_sample=False)
    extra = _ending_early(raw[:, batch["input_ids"].shape[1] :].tolist(), {tiny.end_of_answer, tiny.pad})
    variant = tmp_path / "checkpoint"
    variant.mkdir()
    for file in tiny.path.iterdir():
        if file.name != "generation_config.json":
            (variant / file.name).symlink_to(file)
    generation = json.loads((tiny.path / "generation_config.json").read_text())
    (variant / "generation_config.json").write_text(
        json.dumps({**generation, "eos_token_id": [tiny.end_of_answer, extra]})
    )
    model = make_av_llm(model_path=str(variant), device="cpu", source_fps=25.0)
    model.load({"precision": "fp32"})

    batch = model.prepare(QUESTIONS, PARAMS, media)
    with torch.inference_mode():
        raw = model.model.generate(**batch, max_new_tokens=PARAMS["max_new_tokens"], do_sample=False)
    rows = raw[:, batch["input_ids"].shape[1] :].tolist()
    ends = _answer_ends(rows, {tiny.end_of_answer, tiny.pad, extra})
    early = ends.index(min(ends))
    assert ends[early] < len(rows[early]) - 1 and rows[early][ends[early]] == extra, (rows, ends)
    assert set(rows[early][ends[early] + 1 :]) == {tiny.pad}, "the batch holds padding after the early answer"
    assert max(ends) > ends[early], (rows, ends)

    output = model.run(PARAMS, media)
    assert output.counters["new_tokens"] == sum(ends) < sum(len(row) for row in rows)
    assert output.counters["max_new_tokens_hit"] == ends.count(PARAMS["max_new_tokens"])
    decoded = model.processor.tokenizer.batch_decode(
        [row[:end] for row, end in zip(rows, ends)], skip_special_tokens=True
    )
    assert output.text == [text.strip() for text in decoded] and output.items == len(QUESTIONS)


@pytest.mark.parametrize(
    "params, inputs, message",
    [
        ({"audio_sample_rate": 8000}, {}, "16000 Hz"),
        ({}, {"questions": []}, "non-empty list"),
        ({"max_new_tokens": 0}, {}, "max_new_tokens"),
        ({"batch_size": 0}, {}, "batch_size"),
    ],
)
def test_settings_the_processor_or_generate_refuse_are_invalid(
    loaded: TransformersAVModel, media: dict[str, Any], params: dict[str, Any], inputs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidSetting, match=message):
        loaded.run({**PARAMS, **params}, {**media, **inputs})


def test_the_av_llm_spec_runs_against_the_tiny_checkpoint(
    tiny: TinyAVLLM, media: dict[str, Any], tmp_path: Path
) -> None:
    """``search_spaces/av_llm.yaml`` as shipped (space, reference, baseline, rules, objectives), its weights,
    media and device pointed here and one measured repeat: the reference and the baseline run end to end
    through ``tuner run``."""
    spec = yaml.safe_load((ROOT / "search_spaces" / "av_llm.yaml").read_text())
    assert spec["workload"]["python"]["factory"] == FACTORY
    spec["workload"].update(device="cpu", timeout_s=300)
    spec["workload"]["python"]["kwargs"].update(model_path=str(tiny.path), device="cpu")
    spec["inputs"].update(video=media["video"], audio=media["audio"])
    spec["measurement"] = {"warmup": 0, "min_repeats": 1, "max_repeats": 1}
    path = tmp_path / "av_llm_tiny.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": "", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "run",
            str(path),
            "--study-name",
            "s",
            "--trials",
            "2",
            "--wall-time",
            "0",
            "--no-mlflow",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    measured = [t for t in study.trials if t.user_attrs.get("measured")]
    assert {t.user_attrs["role"] for t in measured} == {"reference", "baseline"}
    assert [(t.user_attrs["outcome"], t.user_attrs.get("reason")) for t in measured] == [("OK", None)] * 2
    for trial in measured:
        metrics = trial.user_attrs["metrics"]
        assert 0 < metrics["count_new_tokens"]["value"] <= len(QUESTIONS) * trial.params["max_new_tokens"]
        assert 0.0 <= metrics["text_gt_exact_match"]["value"] <= 1.0
