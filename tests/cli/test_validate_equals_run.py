"""``tuner validate`` passes a spec only if ``tuner run`` would start it, and says the same when not.

Every spec in ``search_spaces/``, ``tests/specs/`` and the bad-input corpus
(``tests/bad_input/`` plus the generated hostile ones) goes through both, with
the real program: ``validate``'s status, and whether ``run`` got as far as
creating its study (its ``study <name> in <storage>`` line; it is then
interrupted, which a run survives by design). A spec validate refuses must be
refused by run with the very same one line, before anything is created.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bad_input_harness import CORPUS, Answer, hostile_specs, run_measured

ROOT = Path(__file__).resolve().parents[2]


def _all_specs(tmp: Path) -> list[Path]:
    hostile = [path for path, _ in hostile_specs(tmp).values()]
    return (
        sorted((ROOT / "search_spaces").glob("*.yaml"))
        + sorted((ROOT / "tests" / "specs").glob("*.yaml"))
        + sorted(CORPUS.glob("*.yaml"))
        + hostile
    )


def _both(spec: Path, tmp: Path) -> tuple[Path, str, bool]:
    """Run validate then run on ``spec``: (spec, any disagreement or '', whether validate passed)."""
    work = tmp / spec.stem
    work.mkdir(parents=True, exist_ok=True)
    home = work / "home"
    checked = run_measured(["validate", str(spec)], work, home)
    return (
        spec,
        *_compare(
            checked,
            run_measured(["run", str(spec), "--home", str(home), "--trials", "1"], work, home, stop_when_started=True),
            home,
        ),
    )


def _compare(checked: Answer, started: Answer, home: Path) -> tuple[str, bool]:
    passed = checked.status == 0
    if passed:
        if not started.started:
            return f"validate passed but run did not start: {started.status} {started.stderr.strip()[-300:]}", passed
        return "", passed
    if started.started:
        return f"validate refused ({checked.stderr.strip()}) but run started", passed
    if started.status != 2 or started.stderr.strip() != checked.stderr.strip():
        return (
            f"validate said {checked.stderr.strip()!r}, run said ({started.status}) {started.stderr.strip()!r}",
            passed,
        )
    if (home / "studies.db").exists():
        return "run refused the spec but created a storage", passed
    return "", passed


@pytest.mark.slow
def test_validate_passes_exactly_the_specs_run_starts(tmp_path: Path) -> None:
    specs = _all_specs(tmp_path / "hostile")
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda s: _both(s, tmp_path / "work"), specs))
    disagreements = [f"{spec.name}: {problem}" for spec, problem, _ in results if problem]
    assert disagreements == [], "\n".join(disagreements)
    passed = {spec.name for spec, _, ok in results if ok}
    assert {"avatar_demo.yaml", "avqa_demo.yaml", "fake_ok.yaml", "fake_grid.yaml"} <= passed, passed
    assert not any(spec.name in passed for spec in specs if CORPUS in spec.parents and spec.stem != "device_cuda")
    assert len(specs) >= 50, len(specs)
