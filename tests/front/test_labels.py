"""Metric names as people read them: one function, units spelled out, machine keys untouched."""

from __future__ import annotations

from tuner.front.labels import format_number, metric_label, metric_unit, metric_value_text
from tuner.front.report import objective_labels
from tuner.storage.records import TrialRecord


def test_labels_spell_out_units_and_never_look_like_minutes() -> None:
    assert metric_label("latency_p50_s") == "latency p50 [s]"
    assert metric_label("peak_rss_gb") == "peak RSS [GB]"
    assert metric_label("peak_vram_gb") == "peak VRAM [GB]"
    assert metric_label("psnr_db") == "PSNR [dB]"
    assert metric_label("throughput_items_per_s") == "throughput [items/s]"
    assert metric_label("stlpips_alex") == "ST-LPIPS", "dimensionless: no unit shown"
    assert metric_label("latency_cv") == "latency CV"
    assert metric_label("lipsync_lag_frames") == "lipsync lag [frames]"
    assert metric_label("latency_p50_s", direction="minimize") == "latency p50 [s] (lower is better)"
    assert metric_label("psnr_db", direction="maximize") == "PSNR [dB] (higher is better)"
    for name in ("latency_p50_s", "psnr_db", "peak_rss_gb"):
        assert "(min)" not in metric_label(name, direction="minimize")


def test_units_come_from_the_caller_then_the_catalogue_then_the_suffix() -> None:
    assert metric_unit("answer_tokens", "tokens") == "tokens"
    assert metric_label("answer_tokens", "tokens") == "answer tokens [tokens]", "an adapter's declared unit"
    assert metric_unit("latency_p95_s") == "s" and metric_unit("ssim") == "1"
    assert metric_unit("my_wait_s") == "s" and metric_label("my_wait_s") == "my wait [s]"
    assert metric_unit("mystery") == "" and metric_label("mystery") == "mystery"


def test_values_read_with_three_significant_digits_and_their_unit() -> None:
    assert format_number(1.3249) == "1.32" and format_number(0.01304) == "0.013" and format_number(12345.6) == "12,346"
    assert metric_value_text("latency_p50_s", 1.3249) == "latency p50 1.32 s"
    assert metric_value_text("latency_p50_s", 1.3249, with_name=False) == "1.32 s"
    assert metric_value_text("stlpips_alex", 0.01304, with_name=False) == "ST-LPIPS 0.013", (
        "a bare number needs its name"
    )
    assert metric_value_text("psnr_db", 31.24) == "PSNR 31.2 dB"


def test_objective_labels_use_the_units_stored_with_the_trials() -> None:
    record = TrialRecord(
        number=0,
        state="COMPLETE",
        role="search",
        outcome="OK",
        reason=None,
        params={},
        derived={},
        values=(3.0,),
        constraints={},
        metrics={"answer_tokens": {"value": 3.0, "unit": "tokens"}},
        placeholder=False,
        duplicate_of=None,
        slot=None,
        wall_time_s=None,
        eval_time_s=None,
        datetime_start=None,
        datetime_complete=None,
    )
    assert objective_labels([record], ["answer_tokens"], ["minimize"]) == ["answer tokens [tokens] (lower is better)"]
