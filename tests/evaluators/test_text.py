"""Text metrics: hand-computed scores, batch means, ground truth, truncation, honest unavailability."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tuner.evaluators.base import EvalContext
from tuner.evaluators.text import (
    TEXT_METRICS,
    bleu,
    chrf,
    exact_match,
    lcs_length,
    normalize,
    rouge_l,
    text_metrics,
    token_f1,
    truncated_fraction,
)
from tuner.results import Metric
from tuner.workloads.base import WorkloadOutput

REFERENCE_NAMES = ["text_exact_match", "text_f1", "text_rouge_l", "text_chrf", "text_bleu"]
GT_NAMES = ["text_gt_exact_match", "text_gt_f1", "text_gt_rouge_l", "text_gt_chrf", "text_gt_bleu"]


def by_name(metrics: list[Metric]) -> dict[str, Metric]:
    names = [m.name for m in metrics]
    assert len(names) == len(set(names)), "a metric was reported twice"
    return {m.name: m for m in metrics}


def answers(*texts: str, **counters: float) -> WorkloadOutput:
    return WorkloadOutput(text=list(texts), items=len(texts), counters=dict(counters))


def context(inputs: dict[str, Any] | None = None, **settings: Any) -> EvalContext:
    return EvalContext(inputs=inputs or {}, settings=settings)


# ----------------------------------------------------------------- normalisation and one pair


def test_normalize_lowercases_strips_punctuation_collapses_spaces_and_keeps_articles() -> None:
    assert normalize("  The cat,   sat!  ") == "the cat sat"
    assert normalize("«An» apple — don't") == "an apple dont"


def test_exact_match_after_normalisation() -> None:
    assert exact_match("The cat, sat!", "the cat sat") == 1.0
    assert exact_match("the cat sat", "a cat sat") == 0.0  # articles are not dropped


def test_token_f1_and_rouge_l_on_a_prefix_are_six_sevenths() -> None:
    # 3 common tokens; P = 3/3, R = 3/4 -> F = 2 * 1 * 0.75 / 1.75 = 6/7
    assert token_f1("the cat sat", "the cat sat on") == pytest.approx(6 / 7)
    precision, recall, f = rouge_l("the cat sat", "the cat sat on")
    assert (precision, recall) == (pytest.approx(1.0), pytest.approx(0.75))
    assert f == pytest.approx(6 / 7)


def test_rouge_l_follows_order_where_bag_overlap_does_not() -> None:
    assert token_f1("a b c d", "d c b a") == pytest.approx(1.0)
    assert lcs_length(["a", "b", "c", "d"], ["d", "c", "b", "a"]) == 1
    assert rouge_l("a b c d", "d c b a") == pytest.approx((0.25, 0.25, 0.25))


def test_token_f1_counts_multiplicity() -> None:
    # pred "a a a" vs ref "a b": common = min(3, 1) = 1; P = 1/3, R = 1/2 -> F = 2/5
    assert token_f1("a a a", "a b") == pytest.approx(0.4)


def test_lcs_of_interleaved_sequences() -> None:
    assert lcs_length(["a", "x", "b", "y", "c"], ["a", "b", "c"]) == 3
    assert lcs_length([], ["a"]) == 0


def test_chrf_and_bleu_are_100_for_identical_and_0_for_disjoint_strings() -> None:
    assert chrf("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(100.0)
    assert bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(100.0)
    assert bleu("the cat sat on the mat", "the cat sat on the mat") <= 100.0  # clamped round-off
    assert chrf("xyz qqq", "abc def") == 0.0
    assert bleu("xyz qqq", "abc def") == 0.0


def test_empty_answers_agree_only_with_empty_answers() -> None:
    for score in (exact_match, token_f1, lambda p, r: rouge_l(p, r)[2]):
        assert score("", "!!") == 1.0
        assert score("", "cat") == 0.0
        assert score("cat", "") == 0.0
    assert chrf(" ", "") == 100.0 and bleu("", "") == 100.0
    assert chrf("", "cat") == 0.0 and bleu("cat", "") == 0.0


# ----------------------------------------------------------------- against the reference


def test_reference_metrics_are_batch_means_of_sentence_scores() -> None:
    output = answers("the cat sat", "a b c d")
    reference = answers("the cat sat on", "d c b a")
    metrics = by_name(text_metrics(output, reference, context()))
    assert metrics["text_f1"].value == pytest.approx((6 / 7 + 1.0) / 2)
    assert metrics["text_rouge_l"].value == pytest.approx((6 / 7 + 0.25) / 2)
    assert metrics["text_exact_match"].value == pytest.approx(0.0)
    assert metrics["text_chrf"].value == pytest.approx(
        (chrf("the cat sat", "the cat sat on") + chrf("a b c d", "d c b a")) / 2
    )
    assert metrics["text_bleu"].value == pytest.approx(
        (bleu("the cat sat", "the cat sat on") + bleu("a b c d", "d c b a")) / 2
    )


def test_identical_answers_score_the_maximum() -> None:
    output = answers("The cat sat on the mat.", "Paris is the capital.")
    metrics = by_name(text_metrics(output, output, context()))
    for name in REFERENCE_NAMES:
        expected = 100.0 if TEXT_METRICS[name][0] == "score" else 1.0
        assert metrics[name].value == pytest.approx(expected), name


def test_units_and_directions() -> None:
    metrics = by_name(text_metrics(answers("a"), answers("a"), context({"ground_truth": "a"})))
    assert set(metrics) == set(TEXT_METRICS)
    for name, metric in metrics.items():
        assert (metric.unit, metric.direction) == TEXT_METRICS[name]
    assert metrics["text_bleu"].unit == "score" and metrics["text_chrf"].unit == "score"
    assert metrics["text_f1"].unit == "1" and metrics["text_f1"].direction == "maximize"
    assert metrics["text_truncated_fraction"].direction == "minimize"


def test_different_batch_sizes_compare_the_common_requests() -> None:
    output = answers("yes", "no", "maybe")
    reference = answers("yes")
    metrics = by_name(text_metrics(output, reference, context()))
    assert metrics["text_exact_match"].value == 1.0


def test_reference_metrics_unavailable_with_reason() -> None:
    no_reference = by_name(text_metrics(answers("a"), None, context()))
    empty_reference = by_name(text_metrics(answers("a"), WorkloadOutput(), context()))
    for name in REFERENCE_NAMES:
        assert not no_reference[name].available
        assert no_reference[name].reason == "no reference output in this study"
        assert not empty_reference[name].available
        assert empty_reference[name].reason == "the reference output has no text"


def test_no_text_makes_every_text_metric_unavailable() -> None:
    metrics = by_name(
        text_metrics(
            WorkloadOutput(video=np.zeros((1, 1, 1, 1, 3), np.uint8)), answers("a"), context({"ground_truth": "a"})
        )
    )
    for name in REFERENCE_NAMES + GT_NAMES:
        assert metrics[name].value is None
        assert metrics[name].reason == "the workload produced no text"


# ----------------------------------------------------------------- against ground truth


def test_ground_truth_list_paired_by_request() -> None:
    output = answers("The cat sat!", "a b c d")
    inputs = {"ground_truth": ["the cat sat on", "d c b a"]}
    metrics = by_name(text_metrics(output, None, context(inputs)))
    assert metrics["text_gt_f1"].value == pytest.approx((6 / 7 + 1.0) / 2)
    assert metrics["text_gt_rouge_l"].value == pytest.approx((6 / 7 + 0.25) / 2)
    assert metrics["text_gt_exact_match"].value == 0.0
    assert not metrics["text_f1"].available  # no reference, ground truth still scored


def test_single_ground_truth_string_applies_to_every_request() -> None:
    output = answers("Paris.", "paris", "Lyon")
    metrics = by_name(text_metrics(output, output, context({"ground_truth": "Paris"})))
    assert metrics["text_gt_exact_match"].value == pytest.approx(2 / 3)
    assert metrics["text_gt_chrf"].value == pytest.approx(
        (chrf("Paris.", "Paris") + chrf("paris", "Paris") + chrf("Lyon", "Paris")) / 3
    )


def test_ground_truth_unavailable_with_reason() -> None:
    missing = by_name(text_metrics(answers("a"), answers("a"), context()))
    malformed = by_name(text_metrics(answers("a"), answers("a"), context({"ground_truth": [1, 2]})))
    for name in GT_NAMES:
        assert missing[name].value is None and missing[name].reason == "no ground_truth in inputs"
        assert malformed[name].value is None and "ground_truth" in (malformed[name].reason or "")


# ----------------------------------------------------------------- truncation


def test_truncation_from_counted_hits() -> None:
    output = answers("a", "b", "c", "d", max_new_tokens_hit=1)
    metric = by_name(text_metrics(output, None, context(max_new_tokens=16)))["text_truncated_fraction"]
    assert metric.value == pytest.approx(0.25)
    assert (metric.unit, metric.direction) == ("1", "minimize")


def test_truncation_from_token_totals_when_they_determine_it() -> None:
    assert truncated_fraction({"new_tokens": 32}, {"max_new_tokens": 32}, 1) == 1.0
    assert truncated_fraction({"new_tokens": 31}, {"max_new_tokens": 32}, 1) == 0.0
    assert truncated_fraction({"new_tokens": 128}, {"max_new_tokens": 32}, 4) == 1.0  # mean >= limit
    assert truncated_fraction({"new_tokens": 20}, {"max_new_tokens": 32}, 4) == 0.0  # total < limit
    assert truncated_fraction({"new_tokens": 32}, {"max_new_tokens": np.int64(32)}, 1) == 1.0
    output = answers("a long answer", new_tokens=64)
    metric = by_name(text_metrics(output, None, context(max_new_tokens=64)))["text_truncated_fraction"]
    assert metric.value == 1.0


def test_truncation_unavailable_with_reason() -> None:
    def reason(counters: dict[str, float], settings: dict[str, Any], count: int = 4) -> str:
        with pytest.raises(ValueError) as error:
            truncated_fraction(counters, settings, count)
        return str(error.value)

    assert "no max_new_tokens" in reason({"new_tokens": 40}, {})
    assert "no max_new_tokens" in reason({"new_tokens": 40}, {"max_new_tokens": True})
    assert "neither" in reason({}, {"max_new_tokens": 32})
    # 4 answers, 100 tokens, limit 32: anywhere from 0 to 3 answers may have hit it
    assert "0..3 answers" in reason({"new_tokens": 100}, {"max_new_tokens": 32})
    assert "not a count" in reason({"max_new_tokens_hit": 5}, {}, 4)
    assert "no answers" in reason({"max_new_tokens_hit": 0}, {}, 0)
    metric = by_name(text_metrics(answers("a"), None, context()))["text_truncated_fraction"]
    assert metric.value is None and "max_new_tokens" in (metric.reason or "")
