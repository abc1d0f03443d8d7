"""Cost per output (issue 40, item 3): a declared device-hour price and the measured throughput give the
cost of one output, tested with numbers; a missing price is a reason, never a guess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tuner.spec.loading import parse_spec
from tuner.spec.measure.price import device_hour_price, price_metrics
from tuner.spec.models import SpecError

TABLE = {"gpu_hour_usd": {"H200": 3.79, "H100": 2.49, "H100 NVL": 2.99}, "cpu_hour_usd": 0.2}


def test_the_price_follows_the_device_and_the_gpu_type() -> None:
    assert device_hour_price(TABLE, "cuda", "NVIDIA H200", {}) == (3.79, None)
    assert device_hour_price(TABLE, "cuda", "NVIDIA H100 NVL", {}) == (2.99, None)  # the longest match wins
    assert device_hour_price(TABLE, "cpu", None, {}) == (0.2, None)
    price, why = device_hour_price(TABLE, "cuda", "NVIDIA A100-SXM4-80GB", {})
    assert price is None and "no price for GPU 'NVIDIA A100-SXM4-80GB'" in str(why) and "H200" in str(why)
    assert device_hour_price({"gpu_hour_usd": 2.0}, "cuda", "anything", {"TUNER_GPU_HOUR_USD": "4.5"}) == (4.5, None)
    price, why = device_hour_price({}, "cuda", "NVIDIA H200", {"TUNER_GPU_HOUR_USD": "free"})
    assert price is None and "TUNER_GPU_HOUR_USD='free'" in str(why)
    price, why = device_hour_price({"gpu_hour_usd": 2.0}, "cpu", None, {})
    assert price is None and "cost.cpu_hour_usd" in str(why)


def test_cost_per_output_from_throughput_devices_and_price() -> None:
    # 0.5 videos/s on a 2-GPU slot at 3.60 USD per GPU-hour: 900 videos per device-hour, 0.004 USD each
    metrics = {m.name: m for m in price_metrics(0.5, 3.6, None, devices=2)}
    assert metrics["outputs_per_device_hour"].value == pytest.approx(900.0)
    assert metrics["cost_per_output_usd"].value == pytest.approx(0.004)
    assert metrics["cost_per_1k_outputs_usd"].value == pytest.approx(4.0)
    unpriced = {m.name: m for m in price_metrics(0.5, None, "no price for a cuda trial", devices=1)}
    assert unpriced["outputs_per_device_hour"].value == pytest.approx(1800.0)
    assert (
        unpriced["cost_per_output_usd"].value is None
        and unpriced["cost_per_output_usd"].reason == "no price for a cuda trial"
    )
    assert all(m.value is None for m in price_metrics(None, 3.6, None, devices=1))


SPEC = """
name: priced
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 30}
parameters:
  sleep_s: {type: categorical, choices: [0.01, 0.04]}
objectives:
  - {metric: cost_per_output_usd, direction: minimize}
report: [outputs_per_device_hour, cost_per_1k_outputs_usd]
COST
sampler: {name: grid}
measurement: {warmup: 0, min_repeats: 2, max_repeats: 2}
budget: {trials: 2}
"""


def test_a_cost_objective_needs_a_price_and_a_price_must_be_positive() -> None:
    with pytest.raises(SpecError, match=r"cost: the spec names cost_per_output_usd but gives no price"):
        parse_spec(SPEC.replace("COST", ""))
    with pytest.raises(SpecError, match=r"cost.gpu_hour_usd.H200: a price is a positive number of USD"):
        parse_spec(SPEC.replace("COST", "cost: {gpu_hour_usd: {H200: -1}}"))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("flag, price", [([], 0.36), (["--cpu-hour-usd", "0.72"], 0.72)])
def test_a_study_records_the_cost_of_each_output(tmp_path: Path, flag: list[str], price: float) -> None:
    """The spec's price, or the command line's in its place."""
    spec = tmp_path / "priced.yaml"
    spec.write_text(SPEC.replace("COST", "cost: {cpu_hour_usd: 0.36}"))
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(spec), "--study-name", "p", "--no-mlflow", *flag],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    study = optuna.load_study(study_name="p", storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    measured = [t for t in study.trials if t.user_attrs.get("measured")]
    assert len(measured) == 2
    for trial in measured:
        metrics = {name: entry["value"] for name, entry in trial.user_attrs["metrics"].items()}
        per_hour = metrics["throughput_items_per_s"] * 3600  # one CPU slot: one device
        assert metrics["outputs_per_device_hour"] == pytest.approx(per_hour)
        assert metrics["cost_per_output_usd"] == pytest.approx(price / per_hour)
        assert metrics["cost_per_1k_outputs_usd"] == pytest.approx(1000 * price / per_hour)
        assert trial.values[0] == pytest.approx(metrics["cost_per_output_usd"])
    cheap = min(measured, key=lambda t: t.values[0])
    assert cheap.params["sleep_s"] == 0.01, "the faster setting makes the cheaper output"
