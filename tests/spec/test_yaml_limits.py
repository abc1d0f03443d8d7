"""Hostile spec YAML gets one clear line, quickly: size, nesting, alias bombs, repeated keys, typos.

Each sample is generated here. Resource bounds are generous (the machine is shared): the point is
that nothing grows with the hostile input (before these limits an alias bomb took 62 s and 4 GB).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from limit_helpers import cheap

from tuner.spec import yaml_guard
from tuner.spec.loading import key_line, load_spec, parse_spec, spec_key_lines
from tuner.spec.models import SpecError

ROOT = Path(__file__).resolve().parents[2]
GOOD = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()


def refused(text: str, source: str = "bad.yaml", traced_mb: float | None = 200.0) -> str:
    with cheap(traced_mb=traced_mb), pytest.raises(SpecError) as info:
        parse_spec(text, source=source)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message, message
    return message


def line_of(text: str, start: str) -> int:
    return 1 + next(i for i, line in enumerate(text.splitlines()) if line.startswith(start))


def billion_laughs(levels: int = 9) -> str:
    """Each anchor is a list of ten aliases of the previous one: 10**9 strings when expanded."""
    lines = ["name: bomb", 'lol0: &l0 "lol"']
    lines += [f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_at_the_alias_that_crosses_the_limit() -> None:
    text = billion_laughs()
    assert len(text) < 800
    message = refused(text, source="bomb.yaml")
    assert re.fullmatch(
        rf"bomb\.yaml:{line_of(text, 'lol5:')}: lol5\.\d: alias \*l4 expands the spec to more than "
        r"100,000 YAML nodes, counting every alias expanded \(limit 100,000\)",
        message,
    ), message


def test_alias_bomb_inside_a_valid_spec_is_refused() -> None:
    bomb = "".join(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 10))
    text = GOOD.replace(
        "inputs:\n  note: simulated\n", "inputs:\n  note: simulated\n  laughs:\n    l0: &l0 lol\n" + bomb
    )
    message = refused(text)
    assert message.startswith(f"bad.yaml:{line_of(text, '    l5:')}: inputs.laughs.l5."), message
    assert "alias *l4 expands the spec to more than 100,000 YAML nodes" in message


def test_recursive_alias_is_refused() -> None:
    assert refused("name: x\nloop: &a [1, *a]\n") == (
        "bad.yaml:2: loop.1: alias *a is used inside its own anchor (a recursive structure cannot be a spec)"
    )


def test_aliases_and_merge_keys_within_the_limits_still_load() -> None:
    text = GOOD.replace(
        "inputs:\n  note: simulated\n", "inputs:\n  note: simulated\n  base: &b {x: 1, y: [1, 2]}\n  copy: *b\n"
    ).replace(
        "measurement: {warmup: 1, min_repeats: 2, max_repeats: 3}",
        "measurement:\n  <<: {warmup: 1, min_repeats: 2, max_repeats: 4}\n  max_repeats: 3",
    )
    spec = parse_spec(text)
    assert spec.inputs["copy"] == {"x": 1, "y": [1, 2]}
    assert (spec.measurement.warmup, spec.measurement.max_repeats) == (1, 3)


@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")], ids=["lists", "mappings"])
def test_deep_nesting_is_refused_while_composing(opening: str, closing: str) -> None:
    text = "x: " + opening * 5000 + "1" + closing * 5000 + "\n"
    message = refused(text, source="deep.yaml", traced_mb=None)  # CPU is the point; tracing is slow here
    part = "0" if opening == "[" else "a"  # 64 levels: the top-level mapping, x's value and 62 more
    expected = (
        f"deep.yaml:1: x.{'.'.join([part] * 5)}.(55 more).{'.'.join([part] * 3)}: "
        "collections nested deeper than 64 levels (limit 64)"
    )
    assert message == expected


def test_deep_nesting_at_the_top_level() -> None:
    message = refused("[" * 5000 + "]" * 5000, traced_mb=None)
    assert message.startswith("bad.yaml:1: 0.0.0.0.0.0.(") and message.endswith("levels (limit 64)"), message


def test_recursion_error_is_a_last_resort_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_guard, "MAX_DEPTH", 10**6)  # as if the depth check were missing
    message = refused("x: " + "[" * 5000 + "]" * 5000, traced_mb=None)
    assert message == "bad.yaml:1: (top level): the spec is too deeply nested or too large to read (RecursionError)"


def test_oversized_text_is_refused_before_parsing() -> None:
    text = GOOD + "# padding\n" * (5 * 2**20 // 10)
    size = len(text.encode())
    with cheap(cpu_s=2.0, traced_mb=50):  # no parse: a 5 MB spec used to take 20 s
        message = refused(text)
    assert message == (
        f"bad.yaml:1: (top level): the spec is {size:,} bytes (limit 1,048,576 bytes = 1 MiB); "
        "keep large data in files the workload reads"
    )


def test_oversized_file_is_not_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(GOOD + "# padding\n" * (5 * 2**20 // 10))
    with cheap(cpu_s=2.0, traced_mb=10), pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}:1: (top level): the spec is {path.stat().st_size:,} bytes "
        "(limit 1,048,576 bytes = 1 MiB); keep large data in files the workload reads"
    )


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"name: x\ndescription: caf\xe9\n")
    with pytest.raises(SpecError, match=r"latin\.yaml:2: \(top level\): not UTF-8 text"):
        load_spec(path)


def test_duplicate_key_names_both_lines() -> None:
    text = GOOD.replace("  timeout_s: 20\n", "  timeout_s: 20\n  device: cpu\n  timeout_s: 30\n")
    assert refused(text) == "bad.yaml:7: workload.timeout_s: duplicate key 'timeout_s' (first at line 5)"


def test_duplicate_top_level_key() -> None:
    text = GOOD + "budget: {trials: 9}\n"
    first, second = line_of(text, "budget:"), len(text.splitlines())
    assert refused(text) == f"bad.yaml:{second}: budget: duplicate key 'budget' (first at line {first})"


def test_duplicate_key_in_a_flow_mapping() -> None:
    text = GOOD.replace("budget: {trials: 8}", "budget: {trials: 8, trials: 9}")
    line = line_of(text, "budget:")
    assert refused(text) == f"bad.yaml:{line}: budget.trials: duplicate key 'trials' (first at line {line})"


def test_misspelt_top_level_key_names_itself_with_a_suggestion() -> None:
    text = GOOD.replace("parameters:", "paramters:")
    assert refused(text, source="spec.yaml") == (
        f"spec.yaml:{line_of(text, 'paramters:')}: paramters: unknown key (did you mean 'parameters'?)"
    )


def test_misspelt_key_keeps_the_count_of_other_problems() -> None:
    text = GOOD.replace("parameters:", "paramters:").replace("budget: {trials: 8}", "budget: {trials: -1}")
    assert refused(text).endswith(": paramters: unknown key (did you mean 'parameters'?) (and 1 more problem)")


@pytest.mark.parametrize(
    "old, new, key, suggestion",
    [
        ("noise: {type: int, low: 0,", "noise: {type: int, lowe: 0,", "parameters.noise.lowe", "low"),
        ("  timeout_s: 20\n", "  timeout_s: 20\n  devise: cpu\n", "workload.devise", "device"),
        ("{metric: psnr_db, min: 15}", "{metric: psnr_db, mim: 15}", "constraints.1.mim", "min"),
        (
            "{metric: latency_p50_s, direction: minimize}",
            "{metric: latency_p50_s, directon: minimize}",
            "objectives.0.directon",
            "direction",
        ),
    ],
    ids=["parameter", "workload", "constraint", "objective"],
)
def test_misspelt_nested_key_suggests_the_models_key(old: str, new: str, key: str, suggestion: str) -> None:
    text = GOOD.replace(old, new)
    typo = key.rsplit(".", 1)[1] + ":"
    line = 1 + next(i for i, ln in enumerate(text.splitlines()) if typo in ln)
    assert refused(text) == f"bad.yaml:{line}: {key}: unknown key (did you mean '{suggestion}'?)"


def test_unknown_key_without_a_close_match() -> None:
    text = GOOD + "zzz: 1\n"
    assert refused(text) == (
        f"bad.yaml:{len(text.splitlines())}: zzz: unknown key (check the spelling; see search_spaces/schema.json)"
    )


def test_validator_message_naming_a_key_path_points_at_that_key() -> None:
    text = GOOD.replace(
        "baseline: {sleep_s: 0.02, noise: 5, batch_size: 1}", "baseline: {sleep_s: 0.02, noise: 7, batch_size: 1}"
    )
    assert refused(text) == (
        f"bad.yaml:{line_of(text, 'baseline:')}: baseline: noise=7 is outside the parameter's range or choices"
    )


def test_unreadable_scalar_is_located() -> None:
    text = GOOD + "seed: " + "9" * 5000 + "\n"
    assert refused(text).startswith(f"bad.yaml:{len(text.splitlines())}: seed: cannot read this value: ")


def test_key_line_and_spec_key_lines() -> None:
    assert key_line(GOOD, ("workload", "class")) == line_of(GOOD, "  class:")
    assert key_line(GOOD, ["budget", "trials"]) == line_of(GOOD, "budget:")
    assert key_line(GOOD, ("rules", "0", "expr")) == line_of(GOOD, "  - expr:")
    assert key_line(GOOD, ("sampler", "options")) == 1  # absent: the top of the file
    assert key_line("name: [unclosed\n", ("name",)) == 1
    lines = spec_key_lines(GOOD)
    assert lines[("parameters", "noise")] == line_of(GOOD, "  noise:")
    assert spec_key_lines(billion_laughs()) == {}
