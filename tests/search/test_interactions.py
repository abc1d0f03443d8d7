"""A mode switch whose cost scales with the size knobs (issue 38, item 2): a step cache that skips a larger share
of the steps the more steps there are is not one factor on the latency, so a line through log(latency) misses it;
the cache's interaction columns (:mod:`tuner.search.fitting.interactions`) enter the line where they predict the
held-out runs better, and stay out where every knob multiplies."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from optuna.distributions import CategoricalDistribution, IntDistribution

from tuner.search.fitting.interactions import chosen_mask, extended, group_spans, interaction_groups
from tuner.search.prediction import RIDGES, LogRidge
from tuner.search.setting_features import cost_columns, setting_features

SPACE = {
    "num_frames": IntDistribution(5, 17, step=4),
    "steps": CategoricalDistribution([4, 8, 12, 16]),
    "cache": CategoricalDistribution(["none", "skip", "reuse"]),
    "size": CategoricalDistribution([64]),
}


def latency_s(params: dict[str, Any], mode_scales: bool) -> float:
    """Frames x steps, and the cache's factor: with ``mode_scales``, 'skip' computes sqrt(steps) of the steps
    (a larger share skipped at more steps); otherwise every cache is one factor (0.6 and 0.8)."""
    steps = params["steps"]
    if mode_scales:
        computed = {"none": steps, "skip": math.sqrt(steps) * 2, "reuse": 0.8 * steps}[params["cache"]]
    else:
        computed = steps * {"none": 1.0, "skip": 0.6, "reuse": 0.8}[params["cache"]]
    return 0.01 * params["num_frames"] * computed


def runs(count: int, seed: int, mode_scales: bool) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """``count`` random settings' cost rows and log latencies (2 % noise, seeded)."""
    rng = np.random.default_rng(seed)
    columns = cost_columns(SPACE)
    settings = [
        {
            "num_frames": int(rng.choice([5, 9, 13, 17])),
            "steps": int(rng.choice([4, 8, 12, 16])),
            "cache": str(rng.choice(["none", "skip", "reuse"])),
            "size": 64,
        }
        for _ in range(count)
    ]
    rows = np.asarray([[setting_features(s, SPACE, False)[i] for i in columns] for s in settings])
    logs = np.log([latency_s(s, mode_scales) for s in settings]) + rng.normal(0.0, 0.02, count)
    return rows, logs, settings


def test_the_groups_pair_each_word_choice_with_each_number_and_skip_constants_and_numbers() -> None:
    columns = cost_columns(SPACE)
    groups = interaction_groups(SPACE, columns)
    assert len(groups) == 1 and len(groups[0]) == 2 * 2  # cache's 2 one-hots x (frames, log steps)
    rows, _, settings = runs(5, 0, True)
    wide = extended(rows, groups)
    assert wide.shape == (5, rows.shape[1] + 4)
    for row, setting in zip(wide, settings, strict=True):
        full = setting_features(setting, SPACE, False)
        frames, log_steps = full[0], full[4]  # frames' log; steps' one-hots (3) then its log value
        skip, reuse = float(setting["cache"] == "skip"), float(setting["cache"] == "reuse")
        assert list(row[rows.shape[1] :]) == [skip * frames, skip * log_steps, reuse * frames, reuse * log_steps]
    assert group_spans(rows.shape[1], groups) == [(rows.shape[1], rows.shape[1] + 4)]
    assert interaction_groups({"steps": SPACE["steps"], "size": SPACE["size"]}, [0, 1, 2, 3, 4]) == []


def held_out_error(model: LogRidge, settings: list[dict[str, Any]], mode_scales: bool) -> float:
    columns = cost_columns(SPACE)
    errors = []
    for setting in settings:
        centre, _, _ = model.predict([setting_features(setting, SPACE, False)[i] for i in columns])
        errors.append(abs(math.exp(centre) / latency_s(setting, mode_scales) - 1))
    return float(np.median(errors))


def test_a_cache_whose_share_grows_with_the_steps_is_learned_and_a_plain_factor_keeps_the_line() -> None:
    groups = interaction_groups(SPACE, cost_columns(SPACE))
    _, _, fresh = runs(200, 99, True)
    rows, logs, _ = runs(40, 1, True)
    plain, with_groups = LogRidge(rows, logs), LogRidge(rows, logs, interactions=groups)
    assert with_groups.mask[rows.shape[1] :].all()  # the cache's group kept
    assert held_out_error(with_groups, fresh, True) < 0.5 * held_out_error(plain, fresh, True)
    rows, logs, _ = runs(40, 1, False)  # every cache one factor: the group takes nothing off the line's error
    assert not LogRidge(rows, logs, interactions=groups).mask[rows.shape[1] :].any()
    few_rows, few_logs, _ = runs(5, 2, True)  # too few runs to try a group
    spans = group_spans(few_rows.shape[1], groups)
    assert not chosen_mask(extended(few_rows, groups), few_logs, spans, RIDGES)[few_rows.shape[1] :].any()
