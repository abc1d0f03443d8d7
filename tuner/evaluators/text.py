"""Answer-text quality: exact match, token F1, ROUGE-L, chrF, BLEU, truncation.

Normalisation (for exact match, token F1 and ROUGE-L)
----------------------------------------------------
SQuAD-style, minus article removal: lowercase (``str.lower``), delete every
punctuation character (ASCII ``string.punctuation`` and every Unicode character
of category ``P*``; deleted, not replaced by a space, so ``"don't"`` becomes
``"dont"``), split on whitespace. Articles (a / an / the) are *kept*: they are
tokens like any other, so ``"the cat sat"`` vs ``"the cat sat on"`` scores
F1 = 6/7.

Scores of one answer ``pred`` against one reference ``ref``
------------------------------------------------------------
* exact match: 1.0 when the normalised token sequences are equal, else 0.0.
* token F1: with ``common = |bag(pred) ∩ bag(ref)|`` (tokens counted with
  multiplicity), ``P = common / len(pred)``, ``R = common / len(ref)``,
  ``F1 = 2PR / (P + R)`` (0 when ``common`` is 0).
* ROUGE-L: ``lcs`` = length of the longest common subsequence of the two token
  sequences, ``P = lcs / len(pred)``, ``R = lcs / len(ref)``,
  ``F = 2PR / (P + R)`` (beta = 1; 0 when ``lcs`` is 0).
* chrF and BLEU: sacrebleu's ``sentence_chrf`` / ``sentence_bleu`` with their
  default settings (chrF: char 6-grams, beta 2; BLEU: 13a tokeniser, exp
  smoothing) on the *raw* strings, so the numbers match sacrebleu's. They stay
  on sacrebleu's 0..100 scale (unit ``"score"``), clamped to [0, 100] against
  float round-off (identical strings give 100.00000000000004 otherwise).
* Empty answers: two answers that are both empty (after normalisation for the
  token metrics, after ``strip`` for chrF/BLEU) agree fully and score the
  maximum (1 or 100; sacrebleu alone would say 0); exactly one empty scores 0.

Over a batch
------------
Answers are paired by request index. The batch score is the arithmetic mean of
the per-pair (sentence-level) scores, not a corpus-level BLEU/chrF. When the two
lists differ in length (e.g. the candidate's ``batch_size`` differs from the
reference's), the first ``min(n, m)`` requests are compared, as the video
evaluator compares the first request.

Ground truth
------------
``context.inputs["ground_truth"]`` is a string or a list of strings, one per
request. A single string is the ground truth of every request (the batch
repeats one question); a list is paired by index like the reference answers.

Truncation
----------
``text_truncated_fraction`` is the fraction of the call's answers whose new
token count reached ``settings["max_new_tokens"]``. See
:func:`truncated_fraction` for what the workload must report.
"""

from __future__ import annotations

import math
import numbers
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tuner.evaluators.base import EvalContext
from tuner.results import Direction, Metric

ASCII_PUNCTUATION = frozenset(string.punctuation)

#: Every metric :func:`text_metrics` returns: name -> (unit, direction).
TEXT_METRICS: dict[str, tuple[str, Direction]] = {
    "text_exact_match": ("1", "maximize"),
    "text_f1": ("1", "maximize"),
    "text_rouge_l": ("1", "maximize"),
    "text_chrf": ("score", "maximize"),
    "text_bleu": ("score", "maximize"),
    "text_gt_exact_match": ("1", "maximize"),
    "text_gt_f1": ("1", "maximize"),
    "text_gt_rouge_l": ("1", "maximize"),
    "text_gt_chrf": ("score", "maximize"),
    "text_gt_bleu": ("score", "maximize"),
    "text_truncated_fraction": ("1", "minimize"),
}

PairScore = Callable[[str, str], float]


# --------------------------------------------------------------------------- one pair


def _is_punctuation(char: str) -> bool:
    return char in ASCII_PUNCTUATION or unicodedata.category(char).startswith("P")


def normalize(text: str) -> str:
    """Lowercase, delete punctuation, collapse whitespace (articles kept)."""
    kept = "".join(char for char in text.lower() if not _is_punctuation(char))
    return " ".join(kept.split())


def tokens(text: str) -> list[str]:
    """The normalised whitespace tokens of ``text``."""
    return normalize(text).split()


def exact_match(pred: str, ref: str) -> float:
    """1.0 when ``pred`` and ``ref`` are equal after :func:`normalize`, else 0.0."""
    return 1.0 if normalize(pred) == normalize(ref) else 0.0


def _f_measure(overlap: int, pred_len: int, ref_len: int) -> float:
    """2PR/(P+R) with P = overlap/pred_len, R = overlap/ref_len; both empty -> 1."""
    if pred_len == 0 and ref_len == 0:
        return 1.0
    if overlap == 0:
        return 0.0
    precision, recall = overlap / pred_len, overlap / ref_len
    return 2 * precision * recall / (precision + recall)


def token_f1(pred: str, ref: str) -> float:
    """Bag-of-tokens F1 (multiplicity counted) of the normalised tokens, in [0, 1]."""
    pred_tokens, ref_tokens = tokens(pred), tokens(ref)
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    return _f_measure(common, len(pred_tokens), len(ref_tokens))


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of ``a`` and ``b`` (O(len(a)·len(b)))."""
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for item in a:
        current = [0]
        for j, other in enumerate(b):
            current.append(previous[j] + 1 if item == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(pred: str, ref: str) -> tuple[float, float, float]:
    """ROUGE-L (precision, recall, F with beta = 1) on normalised tokens.

    Both empty -> (1, 1, 1); exactly one empty -> (0, 0, 0).
    """
    pred_tokens, ref_tokens = tokens(pred), tokens(ref)
    if not pred_tokens and not ref_tokens:
        return 1.0, 1.0, 1.0
    if not pred_tokens or not ref_tokens:
        return 0.0, 0.0, 0.0
    lcs = lcs_length(pred_tokens, ref_tokens)
    precision, recall = lcs / len(pred_tokens), lcs / len(ref_tokens)
    return precision, recall, _f_measure(lcs, len(pred_tokens), len(ref_tokens))


def _rouge_l_f(pred: str, ref: str) -> float:
    return rouge_l(pred, ref)[2]


def _sacrebleu_score(pred: str, ref: str, kind: str) -> float:
    if not pred.strip() and not ref.strip():
        return 100.0
    import sacrebleu  # lazy: only the worker evaluating text needs it

    scorer = sacrebleu.sentence_chrf if kind == "chrf" else sacrebleu.sentence_bleu
    return min(100.0, max(0.0, float(scorer(pred, [ref]).score)))


def chrf(pred: str, ref: str) -> float:
    """sacrebleu sentence-level chrF (default settings) on raw text, 0..100."""
    return _sacrebleu_score(pred, ref, "chrf")


def bleu(pred: str, ref: str) -> float:
    """sacrebleu sentence-level BLEU (default settings) on raw text, 0..100."""
    return _sacrebleu_score(pred, ref, "bleu")


# --------------------------------------------------------------------------- batches

#: Metric suffix -> per-pair score; the batch value is the mean over pairs.
PAIR_SCORES: dict[str, PairScore] = {
    "exact_match": exact_match,
    "f1": token_f1,
    "rouge_l": _rouge_l_f,
    "chrf": chrf,
    "bleu": bleu,
}


def mean_score(preds: Sequence[str], refs: Sequence[str], score: PairScore) -> float:
    """Mean of ``score(preds[i], refs[i])`` over the first ``min(len)`` indices."""
    count = min(len(preds), len(refs))
    if count == 0:
        raise ValueError("no answer pairs to compare")
    return sum(score(preds[i], refs[i]) for i in range(count)) / count


def _scored_metrics(prefix: str, preds: Sequence[str], refs: Sequence[str]) -> list[Metric]:
    metrics = []
    for suffix, score in PAIR_SCORES.items():
        name = f"{prefix}{suffix}"
        unit, direction = TEXT_METRICS[name]
        metrics.append(Metric(name, mean_score(preds, refs, score), unit, direction))
    return metrics


def _unavailable(prefix: str, reason: str) -> list[Metric]:
    return [
        Metric.unavailable(f"{prefix}{suffix}", *TEXT_METRICS[f"{prefix}{suffix}"], reason) for suffix in PAIR_SCORES
    ]


def ground_truth_answers(inputs: Mapping[str, Any], count: int) -> list[str]:
    """The ground truth per request (see module docs); ``ValueError`` with the reason."""
    if "ground_truth" not in inputs or inputs["ground_truth"] is None:
        raise ValueError("no ground_truth in inputs")
    truth = inputs["ground_truth"]
    if isinstance(truth, str):
        return [truth] * count
    if isinstance(truth, (list, tuple)) and truth and all(isinstance(t, str) for t in truth):
        return list(truth)
    raise ValueError(
        f"inputs['ground_truth'] must be a string or a non-empty list of strings, got {type(truth).__name__}"
    )


# --------------------------------------------------------------------------- truncation


def _token_limit(value: Any) -> float | None:
    """``value`` as a token limit (a finite number >= 1), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    limit = float(value)
    return limit if math.isfinite(limit) and limit >= 1 else None


def truncated_fraction(counters: Mapping[str, float], settings: Mapping[str, Any], answers: int) -> float:
    """Fraction of ``answers`` that hit ``max_new_tokens``; ``ValueError`` with the reason.

    An answer hit the limit when its new token count is >= ``settings["max_new_tokens"]``.
    Sources, in order:

    1. ``counters["max_new_tokens_hit"]``: how many answers hit the limit
       (the workload counted them). Fraction = hit / answers.
    2. ``counters["new_tokens"]``: the *total* new tokens of the call over all
       ``answers`` (T), with limit L = ``settings["max_new_tokens"]``. Each
       answer has at most L tokens, so the number k that hit satisfies
       ``T - answers·(L-1) <= k <= T / L``. When these bounds pin one k (always
       for one answer; mean tokens >= L gives k = answers; T < L gives k = 0)
       that k / answers is returned; otherwise the fraction is not determined
       and the metric is unavailable (report source 1 instead).
    """
    if answers <= 0:
        raise ValueError("the workload reported no answers")
    if "max_new_tokens_hit" in counters:
        hit = float(counters["max_new_tokens_hit"])
        if not (math.isfinite(hit) and 0 <= hit <= answers):
            raise ValueError(f"counters['max_new_tokens_hit'] = {hit} is not a count in [0, {answers}]")
        return hit / answers
    limit = _token_limit(settings.get("max_new_tokens"))
    if limit is None:
        raise ValueError("no max_new_tokens (>= 1) in settings and no counters['max_new_tokens_hit']")
    if "new_tokens" not in counters:
        raise ValueError("the workload reported neither counters['new_tokens'] nor counters['max_new_tokens_hit']")
    total = float(counters["new_tokens"])
    if not (math.isfinite(total) and total >= 0):
        raise ValueError(f"counters['new_tokens'] = {total} is not a token count")
    least = min(answers, max(0, math.ceil(total - answers * (limit - 1))))
    most = min(answers, math.floor(total / limit))
    if least != most:
        raise ValueError(
            f"new_tokens = {total:g} over {answers} answers with max_new_tokens = {limit:g} "
            f"leaves {least}..{most} answers at the limit; report "
            "counters['max_new_tokens_hit']"
        )
    return most / answers


def _truncation_metric(output: Any, context: EvalContext) -> Metric:
    name = "text_truncated_fraction"
    unit, direction = TEXT_METRICS[name]
    answers = len(output.text) if output.text is not None else int(output.items)
    try:
        value = truncated_fraction(output.counters or {}, context.settings, answers)
    except ValueError as error:
        return Metric.unavailable(name, unit, direction, str(error))
    return Metric(name, value, unit, direction)


# --------------------------------------------------------------------------- evaluator


def text_metrics(output: Any, reference: Any | None, context: EvalContext) -> list[Metric]:
    """All :data:`TEXT_METRICS` of ``output`` (a ``WorkloadOutput``).

    ``text_*`` compare ``output.text`` with ``reference.text`` (the reference
    setting's answers); ``text_gt_*`` compare it with ``inputs["ground_truth"]``;
    ``text_truncated_fraction`` comes from the output's counters. Each metric
    that cannot be computed is returned unavailable with the reason.
    """
    metrics: list[Metric] = []
    answers = [str(t) for t in output.text] if output.text is not None else None
    if not answers:
        metrics += _unavailable("text_", "the workload produced no text")
        metrics += _unavailable("text_gt_", "the workload produced no text")
        metrics.append(_truncation_metric(output, context))
        return metrics

    if reference is None:
        metrics += _unavailable("text_", "no reference output in this study")
    elif not reference.text:
        metrics += _unavailable("text_", "the reference output has no text")
    else:
        metrics += _scored_metrics("text_", answers, [str(t) for t in reference.text])

    try:
        truth = ground_truth_answers(context.inputs, len(answers))
    except ValueError as error:
        metrics += _unavailable("text_gt_", str(error))
    else:
        metrics += _scored_metrics("text_gt_", answers, truth)

    metrics.append(_truncation_metric(output, context))
    return metrics
