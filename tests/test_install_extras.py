"""Installing beside a model: the extras, the one line naming a missing one, and pip's resolution.

- The package metadata: Python 3.11-3.13, torch a range in core, the CI versions pinned in
  ``test``, each extra with the modules :mod:`tuner.spec.extras` maps to it.
- Commands, validate/run and the evaluators with an extra's modules made absent (a
  ``sitecustomize`` on ``PYTHONPATH`` hides them from every finder, in the tuner's own
  processes and the workers it starts): one line naming the extra, exit 2, never a
  traceback; what needs no extra still runs.
- ``pip install --dry-run`` (slow; needs the package index): the project's wheel with
  ``[all]`` resolves for Python 3.12 and 3.13 with ``torch==2.11.*`` (binary wheels only),
  and ``.[test]`` on this interpreter picks the pinned torch 2.14.1 / torchvision 0.29.1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from tuner.spec.extras import (
    EXTRA_OF_MODULE,
    MissingExtra,
    missing_extra_message,
    missing_module,
    missing_modules,
    unavailable_reason,
)

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EVERY_EXTRA_MODULE = sorted(EXTRA_OF_MODULE)

HIDER = '''
"""Test support: the modules named in $TUNER_TEST_ABSENT_MODULES look not installed (find_spec None)."""
import os
import sys

_ABSENT = frozenset(name for name in os.environ.get("TUNER_TEST_ABSENT_MODULES", "").split(",") if name)


class _Hiding:
    def __init__(self, finder):
        self._finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _ABSENT:
            return None
        return self._finder.find_spec(name, path, target)

    def __getattr__(self, attribute):
        return getattr(self._finder, attribute)


sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
'''


# --- the metadata ---------------------------------------------------------------------------------


def _names(requirements: list[str]) -> list[str]:
    return [
        r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower() for r in requirements
    ]


def test_python_and_torch_are_ranges_and_ci_versions_are_pinned_in_test() -> None:
    assert PROJECT["requires-python"] == ">=3.11,<3.14"
    core = PROJECT["dependencies"]
    assert "torch>=2.5" in core and not any(r.startswith("torch==") for r in core)
    extras = PROJECT["optional-dependencies"]
    assert {"torch==2.14.1", "torchvision==0.29.1", "tuner[all]"} <= set(extras["test"])
    assert extras["all"] == ["tuner[serve,postgres,perceptual,media,models]"]
    heavy = {
        "fastapi",
        "uvicorn",
        "psycopg",
        "lpips",
        "stlpips-pytorch",
        "ipython",
        "torchsummary",
        "opencv-python-headless",
        "av",
        "torchvision",
        "diffusers",
        "transformers",
        "accelerate",
    }
    assert not heavy & set(_names(core)), "a model's environment must not have to take these"


@pytest.mark.parametrize(
    "extra, packages",
    [
        ("serve", {"fastapi", "uvicorn"}),
        ("postgres", {"psycopg"}),
        ("perceptual", {"lpips", "stlpips-pytorch", "ipython", "torchsummary", "torchvision"}),
        ("media", {"opencv-python-headless", "av"}),
        ("models", {"diffusers", "transformers", "accelerate"}),
    ],
)
def test_each_extra_installs_the_modules_named_for_it(extra: str, packages: set[str]) -> None:
    assert set(_names(PROJECT["optional-dependencies"][extra])) == packages
    assert extra in set(EXTRA_OF_MODULE.values())


# --- the one line ---------------------------------------------------------------------------------


def test_a_missing_module_of_an_extra_is_named_with_its_install_command() -> None:
    error = ModuleNotFoundError("No module named 'fastapi.responses'", name="fastapi.responses")
    assert missing_extra_message(error, "tuner serve") == (
        "tuner serve needs the 'serve' extra (no module named 'fastapi'): pip install 'tuner[serve]'"
    )
    try:
        try:
            raise ModuleNotFoundError("No module named 'IPython'", name="IPython")
        except ModuleNotFoundError as inner:
            raise RuntimeError("building ST-LPIPS failed") from inner
    except RuntimeError as outer:
        assert missing_module(outer) == "IPython"
    assert missing_extra_message(ModuleNotFoundError("No module named 'numpyy'", name="numpyy"), "tuner run") is None
    assert missing_extra_message(ValueError("cv2"), "tuner run") is None
    assert isinstance(MissingExtra("av", "media", "x"), ModuleNotFoundError)
    assert unavailable_reason("perceptual evaluator", "stlpips_pytorch") == (
        "perceptual evaluator unavailable: install the 'perceptual' extra: pip install 'tuner[perceptual]' "
        "(no module named 'stlpips_pytorch')"
    )
    assert missing_modules(["json", "no_such_module_here"]) == ["no_such_module_here"]


def _hider(tmp_path: Path) -> Path:
    directory = tmp_path / "absent_modules"
    directory.mkdir(exist_ok=True)
    (directory / "sitecustomize.py").write_text(HIDER)
    return directory


def _python(
    tmp_path: Path, args: list[str], absent: list[str], extra_path: Sequence[Path] = (), timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    path = [str(p) for p in (*extra_path, _hider(tmp_path))]
    env = {
        **os.environ,
        "TUNER_TEST_ABSENT_MODULES": ",".join(absent),
        "TUNER_HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]),
        "MLFLOW_TRACKING_URI": "",
        "TUNER_STORAGE": "",
        "TUNER_DEBUG": "",
    }
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def _tuner(tmp_path: Path, *args: str, absent: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return _python(tmp_path, ["-m", "tuner", *args], absent, timeout=timeout)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    return lines[0]


def test_the_hider_makes_a_module_look_not_installed(tmp_path: Path) -> None:
    done = _python(
        tmp_path, ["-c", "import importlib.util as u; print(u.find_spec('json') is None)\nimport json"], ["json"]
    )
    assert "True" in done.stdout and "ModuleNotFoundError: No module named 'json'" in done.stderr


def test_serve_without_fastapi_names_the_serve_extra(tmp_path: Path) -> None:
    line = _one_line(_tuner(tmp_path, "serve", "--insecure-localhost", absent=["fastapi"]))
    assert line == (
        "error: tuner serve needs the 'serve' extra (no module named 'fastapi'): pip install 'tuner[serve]'"
    )


def test_a_postgresql_storage_without_psycopg_names_the_postgres_extra(tmp_path: Path) -> None:
    line = _one_line(
        _tuner(tmp_path, "status", "--storage", "postgresql://tuner:hunter2@127.0.0.1:9/db", absent=["psycopg"])
    )
    assert "'postgres' extra (no module named 'psycopg'): pip install 'tuner[postgres]'" in line
    assert line.startswith("error: cannot open storage postgresql://tuner:***@127.0.0.1:9/db")


def test_validate_and_run_refuse_an_st_lpips_spec_without_the_perceptual_extra(tmp_path: Path) -> None:
    spec = str(ROOT / "search_spaces" / "avatar_demo.yaml")
    expected = (
        "objectives.1.metric: metric 'stlpips_alex' needs the 'perceptual' extra (no module named "
        "'stlpips_pytorch'): pip install 'tuner[perceptual]'"
    )
    validated = _one_line(_tuner(tmp_path, "validate", spec, absent=["stlpips_pytorch"]))
    assert validated.startswith(f"error: {spec}:") and validated.endswith(expected)
    assert _one_line(_tuner(tmp_path, "run", spec, "--no-mlflow", absent=["stlpips_pytorch"])) == validated
    assert not (tmp_path / "home").exists(), "a refused run creates no storage"
    both = _one_line(_tuner(tmp_path, "validate", spec, absent=["IPython", "cv2"]))
    assert "(no module named 'IPython')" in both and "pip install 'tuner[perceptual,media]'" in both


@pytest.mark.parametrize(
    "outputs, absent, refused",
    [
        ("{video: out.mp4}", ["av"], "av"),
        ("{video: out.mp4, audio: out.wav}", ["av"], None),  # the audio track is not read
        ("{video: out.mp4, audio: out.wav}", ["cv2"], "cv2"),
        ("{video: out.npz}", ["cv2", "av"], None),  # a numpy file: no decoder
    ],
)
def test_validate_refuses_a_video_container_output_without_the_media_extra(
    tmp_path: Path, outputs: str, absent: list[str], refused: str | None
) -> None:
    text = (ROOT / "tests" / "specs" / "fake_ok.yaml").read_text()
    spec = tmp_path / "command.yaml"
    spec.write_text(
        text.replace(
            "  class: tuner.workloads.fake:FakeWorkload\n",
            f"  command:\n    argv: [prog, '{{noise}}']\n    outputs: {outputs}\n",
        )
    )
    done = _tuner(tmp_path, "validate", str(spec), absent=absent)
    if refused is None:
        assert done.returncode == 0, done.stderr
    else:
        assert _one_line(done).endswith(
            f"workload.command.outputs.video: the video container output 'out.mp4' needs the 'media' extra "
            f"(no module named '{refused}'): pip install 'tuner[media]'"
        )


def test_commands_that_need_no_extra_run_without_any(tmp_path: Path) -> None:
    """Every extra's module absent (in the workers too): validate, a short study, status, export."""
    absent = EVERY_EXTRA_MODULE
    for spec in (ROOT / "tests" / "specs" / "fake_ok.yaml", ROOT / "search_spaces" / "avqa_demo.yaml"):
        validated = _tuner(tmp_path, "validate", str(spec), absent=absent)
        assert validated.returncode == 0, validated.stderr
    ran = _tuner(
        tmp_path,
        "run",
        str(ROOT / "tests" / "specs" / "fake_ok.yaml"),
        "--study-name",
        "bare",
        "--trials",
        "2",
        "--no-mlflow",
        absent=absent,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    status = _tuner(tmp_path, "status", "bare", "--json", absent=absent)
    trials = json.loads(status.stdout)
    assert status.returncode == 0 and any(t.get("outcome") == "OK" for t in trials["trials"]), status.stdout[-2000:]
    assert _tuner(tmp_path, "export", "bare", "-o", str(tmp_path / "best.yaml"), absent=absent).returncode == 0


EVALUATE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from tuner.evaluators.base import EvalContext
    from tuner.evaluators.registry import evaluate_quality
    from tuner.workloads.base import WorkloadOutput

    video = np.random.default_rng(0).integers(0, 256, (1, 6, 32, 32, 3), dtype=np.uint8)
    noisy = np.clip(video.astype(int) + 3, 0, 255).astype(np.uint8)
    metrics = evaluate_quality(sys.argv[1:], WorkloadOutput(video=noisy), WorkloadOutput(video=video), EvalContext())
    print(json.dumps({m.name: [m.value, m.reason] for m in metrics}))
""")


def _evaluate(
    tmp_path: Path, names: list[str], absent: list[str], extra_path: Sequence[Path] = ()
) -> dict[str, list[object]]:
    done = _python(tmp_path, ["-c", EVALUATE, *names], absent, extra_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("absent", ["stlpips_pytorch", "IPython"])
def test_an_unavailable_perceptual_metric_names_the_perceptual_extra(tmp_path: Path, absent: str) -> None:
    metrics = _evaluate(tmp_path, ["stlpips_alex", "psnr_db"], [absent])
    assert metrics["stlpips_alex"] == [
        None,
        (
            "perceptual evaluator unavailable: install the 'perceptual' extra: pip install 'tuner[perceptual]' "
            f"(no module named '{absent}')"
        ),
    ]
    assert isinstance(metrics["psnr_db"][0], float), "the other families still run"


def test_a_family_failing_on_an_extras_import_names_the_extra(tmp_path: Path) -> None:
    """cv2 found but its import fails (as a broken install does): the failure, too, names the extra."""
    broken = tmp_path / "broken"
    (broken / "cv2").mkdir(parents=True)
    (broken / "cv2" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'cv2'\", name='cv2')\n")
    metrics = _evaluate(tmp_path, ["flicker_mae"], [], [broken])
    assert metrics["flicker_mae"] == [
        None,
        (
            "flicker evaluator unavailable: install the 'media' extra: pip install 'tuner[media]' "
            "(no module named 'cv2')"
        ),
    ]


# --- pip's resolution (slow: the package index) -----------------------------------------------------


def _pip(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _stderr_tail(done: subprocess.CompletedProcess[str]) -> str:
    """pip's complaint without the noise of this machine's file:// indexes (one warning per package)."""
    return "\n".join(line for line in done.stderr.splitlines() if "is ignored: it is neither" not in line)[-3000:]


@pytest.fixture(scope="module")
def project_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What a build of the project reads (pyproject, README, the packages), copied: pip writes nothing here."""
    source = tmp_path_factory.mktemp("project")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in ("tuner",):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return source


@pytest.fixture(scope="module")
def project_wheel(project_source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel: ``--only-binary=:all:`` refuses to build a source tree, so the dry runs use this."""
    out = tmp_path_factory.mktemp("wheel")
    built = _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(project_source))
    assert built.returncode == 0, _stderr_tail(built)
    (wheel,) = out.glob("tuner-*.whl")
    return wheel


def _dry_run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """``pip install --dry-run --ignore-installed --report`` of ``args``: (the run, name -> version chosen)."""
    report = tmp_path / "report.json"
    done = _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), *args)
    if done.returncode != 0:
        return done, {}
    chosen = json.loads(report.read_text())["install"]
    return done, {
        re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"] for item in chosen
    }


@pytest.mark.slow
@pytest.mark.parametrize("python", ["3.12", "3.13"])
def test_all_extras_resolve_beside_torch_2_11(tmp_path: Path, project_wheel: Path, python: str) -> None:
    """A model's environment: Python 3.12 (3.13 soon) with torch 2.11 (the lent GPU image's)."""
    done, chosen = _dry_run(
        tmp_path,
        "--python-version",
        python,
        "--only-binary=:all:",
        "--target",
        str(tmp_path / "target"),
        f"tuner[all] @ {project_wheel.as_uri()}",
        "torch==2.11.*",
    )
    assert done.returncode == 0, _stderr_tail(done)
    assert chosen["torch"].startswith("2.11."), chosen["torch"]
    assert chosen["torchvision"].startswith("0.26."), "the torchvision made for torch 2.11"
    assert {
        "tuner",
        "fastapi",
        "uvicorn",
        "psycopg",
        "lpips",
        "stlpips-pytorch",
        "ipython",
        "torchsummary",
        "opencv-python-headless",
        "av",
        "optuna",
        "mlflow",
    } <= set(chosen)


def _wheel_requires_python(wheel: Path) -> str:
    """The ``Requires-Python`` line of ``wheel``'s METADATA (what every installer reads)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return next(line.partition(":")[2].strip() for line in lines if line.startswith("Requires-Python:"))


def _pip_version() -> tuple[int, ...]:
    import importlib.metadata

    return tuple(int(part) for part in re.findall(r"\d+", importlib.metadata.version("pip"))[:2])


PIP_CHECKS_TARGET_PYTHON = (26, 0)
"""The pip this check needs: 26.x refuses a wheel whose Requires-Python excludes ``--python-version`` (26.2.1 and
26.3 checked); 23.2.1 -- what ``python3.11 -m venv`` bundles -- installs it anyway (exit 0), so the README's set-up
upgrades pip first, as ``.ci/run`` does."""


@pytest.mark.slow
def test_python_3_14_is_refused(tmp_path: Path, project_wheel: Path) -> None:
    from packaging.specifiers import SpecifierSet

    allowed = SpecifierSet(_wheel_requires_python(project_wheel))
    assert "3.14.0" not in allowed and "3.11.0" in allowed and "3.13.9" in allowed, allowed
    if _pip_version() < PIP_CHECKS_TARGET_PYTHON:
        pytest.skip(
            f"pip {'.'.join(map(str, _pip_version()))} does not check Requires-Python against "
            f"--python-version (the wheel's metadata refuses 3.14, checked above); "
            f"'pip install --upgrade pip' (README set-up) gives one that does"
        )
    done, _ = _dry_run(
        tmp_path,
        "--python-version",
        "3.14",
        "--only-binary=:all:",
        "--no-deps",
        "--target",
        str(tmp_path / "target"),
        f"tuner @ {project_wheel.as_uri()}",
    )
    assert done.returncode != 0 and "requires a different Python" in done.stderr, _stderr_tail(done)


@pytest.mark.slow
def test_the_test_extra_here_still_gets_the_pinned_torch(tmp_path: Path, project_source: Path) -> None:
    """What ``pip install -e '.[test]'`` (README, .ci/run) picks on this Python 3.11: the versions CI runs."""
    done, chosen = _dry_run(tmp_path, f"{project_source}[test]")
    assert done.returncode == 0, _stderr_tail(done)
    assert (chosen["torch"], chosen["torchvision"]) == ("2.14.1", "0.29.1")
    assert {"tuner", "fastapi", "psycopg", "stlpips-pytorch", "opencv-python-headless", "av", "pytest"} <= set(chosen)
