"""The bad-input corpus: every bad spec and bad command line gets one clear line, and harms nothing.

Each case runs the real ``tuner`` program (``python -m tuner``) in a fresh directory
with ``--home`` inside it and a secret planted in the environment, and must:

- exit with status 2 and print exactly one line on stderr, ``error: ...``, never a
  traceback; a spec's line has the shape ``file:line: key: problem``;
- say what the corpus expects (the case's fragment);
- stay within 5 s of CPU and 500 MB of peak memory (the child's own rusage, so a
  busy host does not fail it; the wall clock only has a generous timeout);
- create nothing outside the home, and show the secret nowhere: not in its output,
  not in any file it wrote.

The specs are ``tests/bad_input/*.yaml`` (plus three generated hostile ones); every
one also goes through ``tuner run`` in ``test_validate_equals_run.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bad_input_harness import (
    CORPUS,
    CPU_LIMIT_S,
    MEMORY_LIMIT_MB,
    SECRET,
    Answer,
    expected_fragment,
    hostile_specs,
    new_files,
    run_measured,
    secret_in_files,
)

SPEC_LINE = re.compile(r"^error: (?P<file>[^:]+\.yaml):(?P<line>\d+): (?P<key>[\w.()\- ]+|\(top level\)): \S")
OK_SPEC = Path(__file__).resolve().parents[1] / "specs" / "fake_ok.yaml"
PG = f"postgresql+psycopg://:{SECRET}@127.0.0.1:9/tuner"

# (case id, argv with {spec} {home} {tmp} placeholders, expected fragment of the one line)
COMMAND_LINES: list[tuple[str, list[str], str]] = [
    ("unknown_option", ["run", "{spec}", "--bogus"], "No such option: --bogus"),
    ("missing_argument", ["run"], "Missing argument"),
    ("unknown_command", ["tune", "{spec}"], "No such command 'tune'"),
    ("trials_zero", ["run", "{spec}", "--trials", "0", "--home", "{home}"], "--trials"),
    ("workers_negative", ["run", "{spec}", "--workers", "-1", "--home", "{home}"], "--workers"),
    ("unknown_sampler_flag", ["run", "{spec}", "--sampler", "annealing", "--home", "{home}"], "unknown sampler"),
    ("grid_override_continuous", ["run", "{continuous}", "--sampler", "grid", "--home", "{home}"], "needs a step"),
    ("study_name_escape", ["run", "{spec}", "--study-name", "../../escaped", "--home", "{home}"], "study name"),
    ("study_name_absolute", ["run", "{spec}", "--study-name", "/tmp/abs", "--home", "{home}"], "study name"),
    ("spec_missing", ["validate", "{tmp}/nowhere.yaml"], "cannot read spec"),
    ("spec_is_directory", ["validate", "{tmp}"], "cannot read spec"),
    ("status_missing_study", ["status", "nosuch", "--home", "{home}"], "no study"),
    ("resume_missing_study", ["resume", "nosuch", "--home", "{home}", "--no-mlflow"], "no study"),
    ("resume_escape_name", ["resume", "../../x", "--home", "{home}"], "study name"),
    ("resume_timeout_zero", ["resume", "nosuch", "--timeout", "0", "--home", "{home}"], "--timeout"),
    ("resume_timeout_infinite", ["resume", "nosuch", "--timeout", "inf", "--home", "{home}"], "finite"),
    ("run_wall_time_infinite", ["run", "{spec}", "--wall-time", "inf", "--home", "{home}", "--no-mlflow"], "finite"),
    ("export_missing_study", ["export", "nosuch", "--home", "{home}"], "no study"),
    ("front_missing_study", ["front", "nosuch", "--home", "{home}"], "no study"),
    ("show_missing_study", ["show", "nosuch", "0", "--home", "{home}"], "no study"),
    ("show_trial_not_a_number", ["show", "nosuch", "last", "--home", "{home}"], "Invalid value for 'trial'"),
    ("dashboard_missing_study", ["dashboard", "nosuch", "--home", "{home}", "--refresh-only"], "no study"),
    ("dashboard_interval_zero", ["dashboard", "--home", "{home}", "--interval", "0"], "--interval"),
    ("sync_missing_study", ["sync-mlflow", "nosuch", "--home", "{home}"], "no study"),
    ("check_missing_file", ["check", "{tmp}/nowhere.yaml", "--home", "{home}"], "nowhere.yaml"),
    ("check_not_a_config", ["check", "{spec}", "--home", "{home}"], "fake_ok.yaml"),
    ("ui_file_store", ["ui", "--home", "{home}", "--mlflow-uri", "file://{tmp}/mlruns"], "sqlite"),
    ("ui_unknown_host", ["ui", "--home", "{home}", "--host", "no-such-host.invalid"], "--host"),
    ("schema_onto_directory", ["schema", "--output", "{tmp}"], "cannot write the schema"),
    ("storage_password_empty_user", ["status", "--storage", PG], "cannot open storage"),
    (
        "storage_password_query",
        ["status", "x", "--storage", f"postgresql+psycopg://u@127.0.0.1:9/tuner?password={SECRET}"],
        "cannot open storage",
    ),
    ("storage_unknown_scheme", ["status", "--storage", "mongodb://127.0.0.1/x"], "cannot open storage"),
    ("worker_bad_gpus", ["worker", "--gpus", "0,zero", "--home", "{home}", "--once"], "--gpus"),
    ("worker_escape_name", ["worker", "../../x", "--home", "{home}"], "study name"),
    ("worker_missing_study", ["worker", "nosuch", "--home", "{home}", "--no-mlflow"], "no study"),
    ("worker_storage_password", ["worker", "--storage", PG, "--once"], "cannot open storage"),
    ("serve_without_token", ["serve", "--home", "{home}"], "no token"),
    (
        "serve_insecure_off_localhost",
        ["serve", "--home", "{home}", "--host", "0.0.0.0", "--insecure-localhost"],
        "loopback",
    ),
    ("serve_token_file_missing", ["serve", "--token-file", "{tmp}/nowhere", "--home", "{home}"], "cannot read"),
    ("serve_port_out_of_range", ["serve", "--port", "70000", "--insecure-localhost", "--home", "{home}"], "--port"),
    (
        "submit_nothing_listens",
        ["submit", "{spec}", "--server", "http://127.0.0.1:9", "--gpu-type", "cpu"],
        "cannot reach",
    ),
    ("submit_spec_missing", ["submit", "{tmp}/nowhere.yaml", "--server", "http://127.0.0.1:9"], "cannot read spec"),
    ("submit_not_a_server_url", ["submit", "{spec}", "--server", "ftp://127.0.0.1/x"], "--server"),
    ("submit_server_password", ["submit", "{spec}", "--server", f"http://u:{SECRET}@127.0.0.1:9"], "cannot reach"),
]


def _check_answer(answer: Answer, fragment: str) -> str:
    output = answer.stdout + answer.stderr
    assert "Traceback" not in output, output
    assert answer.status == 2, f"status {answer.status}: {output}"
    lines = answer.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {answer.stderr!r}"
    line = lines[0]
    assert line.startswith("error: ") and fragment in line, f"expected {fragment!r} in: {line}"
    assert SECRET not in output, output
    assert answer.cpu_s <= CPU_LIMIT_S, f"{answer.cpu_s:.1f} s of CPU: {line}"
    assert answer.peak_mb <= MEMORY_LIMIT_MB, f"{answer.peak_mb:.0f} MB peak: {line}"
    return line


def _workspace(tmp_path: Path) -> tuple[Path, Path, set[Path]]:
    home = tmp_path / "home"
    return home, tmp_path, set(tmp_path.rglob("*"))


def _corpus_specs() -> list[Path]:
    return sorted(CORPUS.glob("*.yaml"))


def test_the_corpus_has_at_least_forty_cases() -> None:
    cases = len(_corpus_specs()) + 3 + len(COMMAND_LINES)
    assert cases >= 40, cases
    assert len({p.stem for p in _corpus_specs()} | {c[0] for c in COMMAND_LINES}) == cases - 3


@pytest.mark.parametrize("spec", _corpus_specs(), ids=lambda p: p.stem)
def test_a_bad_spec_gets_one_line_naming_file_line_and_key(spec: Path, tmp_path: Path, gpu_visible: bool) -> None:
    if spec.stem == "device_cuda" and gpu_visible:
        pytest.skip("device: cuda is a valid spec on a host with a GPU")
    home, cwd, before = _workspace(tmp_path)
    answer = run_measured(["validate", str(spec)], cwd, home)
    line = _check_answer(answer, expected_fragment(spec))
    match = SPEC_LINE.match(line)
    assert match and match.group("file") == str(spec), f"not file:line: key: problem: {line}"
    assert new_files(tmp_path, before, []) == []


def test_hostile_specs_are_refused_within_limits(tmp_path: Path) -> None:
    specs = hostile_specs(tmp_path / "specs")
    home, cwd, before = _workspace(tmp_path)
    for name, (path, fragment) in specs.items():
        answer = run_measured(["validate", str(path)], cwd, home)
        line = _check_answer(answer, fragment)
        assert SPEC_LINE.match(line), f"{name}: {line}"
    assert new_files(tmp_path, before, []) == []


@pytest.mark.parametrize("case", COMMAND_LINES, ids=lambda c: c[0])
def test_a_bad_command_line_gets_one_line(case: tuple[str, list[str], str], tmp_path: Path) -> None:
    _, argv, fragment = case
    home, cwd, before = _workspace(tmp_path)
    continuous = tmp_path / "continuous.yaml"  # valid, with a float parameter that has no step
    continuous.write_text(OK_SPEC.read_text().replace("high: 0.02, step: 0.001}", "high: 0.02}"))
    before.add(continuous)
    args = [a.format(spec=OK_SPEC, home=home, tmp=tmp_path, continuous=continuous) for a in argv]
    answer = run_measured(args, cwd, home)
    _check_answer(answer, fragment)
    assert new_files(tmp_path, before, [home]) == [], "wrote outside --home"
    assert not (home / "studies.db").exists() or case[0].startswith("ui_"), "a reading command created a storage"
    assert secret_in_files(tmp_path) == []


def test_every_command_is_walked_with_bad_arguments() -> None:
    """A command added later must join the table above (each is run with bad arguments there)."""
    import typer

    from tuner.cli.main import app

    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    walked = {argv[0] for _, argv, _ in COMMAND_LINES}
    assert commands - walked == set(), f"commands never given bad arguments: {sorted(commands - walked)}"
    assert len(commands) >= 10, commands
