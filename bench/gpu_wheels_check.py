"""Are the wheels in ./.whl complete for the lent GPU image? Checked here, before the GPU window is spent.

The lent H200 image (Python 3.12, x86-64, no package registry) holds the packages
listed in ``bench/gpu_image_packages.txt``; ``bench/gpu_wheels.sh`` fetches the
rest as wheels that travel with the working tree. This check:

1. installs every wheel into an EMPTY target with ``pip install --no-index
   --no-deps --only-binary=:all: --python-version 3.12 --platform ...`` (pip
   refuses a wheel built for another Python or platform, and two versions of one
   package);
2. reads the ``Requires-Dist`` of every installed distribution, evaluates the
   markers for CPython 3.12 on Linux x86-64 with the extras actually asked for
   (``X[e]`` anywhere turns on X's extra ``e``), and requires each requirement to
   be met by a carried distribution whose version satisfies the specifier, or by
   an image package: without a specifier any image package does; with one, only
   an image package whose version is known and satisfies it (an unknown version
   counts as NOT met: carry the wheel);
3. does the same for the tuner's own core requirements (``[project].dependencies``
   of ``pyproject.toml``, read at run time; extras are not needed there), since
   the tuner runs from the working tree on ``PYTHONPATH``;
4. sums the wheels' size and the size of what travels of the working tree
   (tracked and untracked-not-ignored files): both must fit the device tool's
   64 MiB, the wheels at most ``--max-wheels-mb`` (default 50 MB).

One line per problem, notes (a carried package shadowing an image one, an extra
of an image package that cannot be checked) on lines of their own, then a summary
line; exit status 1 on any problem. ``--import-guard DIR`` instead writes a
``sitecustomize.py`` into DIR that, on ``PYTHONPATH``, makes every process refuse
to import a module of an installed distribution that is neither in the image nor
carried: the CPU run of ``bench/gpu_check.py`` under it imports only what the GPU
host will have (tests/test_gpu_check.py). Units: MB are 1e6 bytes, MiB 2**20.
Usage: ``python bench/gpu_wheels_check.py [--wheels DIR] [--no-project] [--import-guard DIR]``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from importlib.metadata import Distribution, distributions
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
IMAGE_PACKAGES = ROOT / "bench" / "gpu_image_packages.txt"
WHEELS_SCRIPT = ROOT / "bench" / "gpu_wheels.sh"
IMAGE_PYTHON = "3.12.3"
PLATFORMS = (
    "manylinux_2_17_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
TRAVEL_LIMIT_BYTES = 64 * 2**20
"""What the device tool carries per call: working tree and wheels together."""


def marker_environment(extra: str = "") -> dict[str, str]:
    """PEP 508 marker values of the image's interpreter (CPython 3.12 on Linux x86-64)."""
    return {
        "python_version": IMAGE_PYTHON.rsplit(".", 1)[0],
        "python_full_version": IMAGE_PYTHON,
        "implementation_name": "cpython",
        "implementation_version": IMAGE_PYTHON,
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "sys_platform": "linux",
        "extra": extra,
    }


def read_image_packages(path: Path = IMAGE_PACKAGES) -> dict[str, Version | None]:
    """Canonical name -> version (None when unknown) of the image's packages (``name`` or ``name==version``)."""
    packages: dict[str, Version | None] = {}
    for line in path.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            name, _, version = entry.partition("==")
            packages[canonicalize_name(name.strip())] = Version(version.strip()) if version.strip() else None
    return packages


@dataclass
class Report:
    """Problems (each makes the check fail) and notes, one line each."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def install_into_empty_target(wheels: list[Path], target: Path) -> str | None:
    """``pip install --no-index --no-deps`` of ``wheels`` into ``target`` as the image's Python would take
    them; None on success, else pip's last lines."""
    platforms = [argument for name in PLATFORMS for argument in ("--platform", name)]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(target),
            "--python-version",
            IMAGE_PYTHON.rsplit(".", 1)[0],
            "--implementation",
            "cp",
            "--only-binary=:all:",
            *platforms,
            *map(str, wheels),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        return None
    return " | ".join((done.stdout + done.stderr).strip().splitlines()[-6:])


def check_requirements(
    carried: dict[str, Distribution],
    image: dict[str, Version | None],
    roots: list[tuple[str, list[Requirement]]],
    report: Report,
) -> None:
    """Every requirement of ``roots`` (requirer, requirements) and of the carried distributions they reach,
    met by ``carried`` or ``image`` (module docstring, point 2). Appends to ``report``."""
    extras_on: dict[str, set[str]] = {name: {""} for name in carried}
    checked: set[tuple[str, str]] = set()
    pending: list[tuple[str, str]] = [(name, "") for name in carried]
    for requirer, requirements in roots:
        for requirement in requirements:
            _check_one(requirer, requirement, {""}, carried, image, extras_on, pending, report)
    while pending:
        name, extra = pending.pop()
        if (name, extra) in checked:
            continue
        checked.add((name, extra))
        dist = carried[name]
        shown = f"{dist.metadata['Name']} {dist.version}"
        for text in dist.requires or []:
            requirement = Requirement(text)
            if extra and (requirement.marker is None or "extra" not in str(requirement.marker)):
                continue  # already checked without the extra
            _check_one(shown, requirement, {extra}, carried, image, extras_on, pending, report)


def _check_one(
    requirer: str,
    requirement: Requirement,
    extras: set[str],
    carried: dict[str, Distribution],
    image: dict[str, Version | None],
    extras_on: dict[str, set[str]],
    pending: list[tuple[str, str]],
    report: Report,
) -> None:
    marker: Marker | None = requirement.marker
    if marker is not None and not any(marker.evaluate(marker_environment(e)) for e in extras):
        return
    name = canonicalize_name(requirement.name)
    specifier: SpecifierSet = requirement.specifier
    wanted = f"{requirement} (needed by {requirer})"
    if name in carried:
        version = carried[name].version
        if specifier and not specifier.contains(version, prereleases=True):
            report.problems.append(f"carried {carried[name].metadata['Name']} {version} does not satisfy {wanted}")
        for extra in requirement.extras:
            if canonicalize_name(extra) not in extras_on[name]:
                extras_on[name].add(canonicalize_name(extra))
                pending.append((name, canonicalize_name(extra)))
        return
    if name not in image:
        report.problems.append(f"missing: {wanted}: neither carried nor in the image")
        return
    known = image[name]
    if specifier and known is None:
        report.problems.append(
            f"unknown version: {wanted}: the image has {name} at a version not known here; "
            "carry a wheel that satisfies it"
        )
    elif specifier and known is not None and not specifier.contains(known, prereleases=True):
        report.problems.append(f"too old/new: {wanted}: the image has {name} {known}; carry one that satisfies it")
    elif requirement.extras:
        report.notes.append(
            f"note: {wanted}: extras {sorted(requirement.extras)} of the image's {name} are not checked"
        )


def project_requirements(pyproject: Path) -> tuple[list[Requirement], str]:
    """The core ``[project].dependencies`` of ``pyproject`` (no extras) and its ``requires-python``."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return [Requirement(text) for text in project.get("dependencies", [])], project.get("requires-python", "")


def travelling_tree_bytes(root: Path = ROOT) -> int | None:
    """Bytes of the working tree the device tool carries: tracked plus untracked-not-ignored files."""
    done = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        return None
    paths = {root / name for name in done.stdout.decode(errors="replace").split("\0") if name}
    return sum(path.stat().st_size for path in paths if path.is_file())


def check_wheels(wheel_dir: Path, image_file: Path, pyproject: Path | None, max_wheels_mb: float) -> Report:
    """The whole check (module docstring); ``pyproject`` None skips the tuner's own requirements."""
    report = Report()
    image = read_image_packages(image_file)
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not wheels:
        report.problems.append(f"no wheels in {wheel_dir} (run bench/gpu_wheels.sh)")
        return report
    by_name: dict[str, list[str]] = {}
    for wheel in wheels:
        by_name.setdefault(canonicalize_name(wheel.name.split("-")[0]), []).append(wheel.name)
    for name, files in sorted(by_name.items()):
        if len(files) > 1:
            report.problems.append(f"two wheels of {name} (pip would refuse the install): {', '.join(files)}")
    with tempfile.TemporaryDirectory(prefix="gpu_wheels_target_") as scratch:
        failure = install_into_empty_target(wheels, Path(scratch))
        if failure is not None:
            report.problems.append(f"pip cannot install the wheels for CPython 3.12 x86-64: {failure}")
            return report
        carried: dict[str, Distribution] = {
            canonicalize_name(d.metadata["Name"]): d for d in distributions(path=[scratch])
        }
        for name, dist in sorted(carried.items()):
            requires_python = (dist.metadata.get_all("Requires-Python") or [None])[0]
            if requires_python and not SpecifierSet(requires_python).contains(IMAGE_PYTHON):
                report.problems.append(f"{name} {dist.version} requires Python {requires_python}")
            if name in image:
                report.notes.append(
                    f"note: carried {name} {dist.version} shadows the image's "
                    f"{name} {image[name] or '(version unknown)'}"
                )
        roots: list[tuple[str, list[Requirement]]] = []
        if pyproject is not None:
            requirements, requires_python = project_requirements(pyproject)
            roots.append(("tuner (pyproject core dependencies)", requirements))
            if requires_python and not SpecifierSet(requires_python).contains(IMAGE_PYTHON):
                report.notes.append(
                    f"note: tuner's requires-python {requires_python!r} excludes {IMAGE_PYTHON} "
                    "(it runs from PYTHONPATH there, not installed)"
                )
        check_requirements(carried, image, roots, report)
        report.notes.append(
            f"carried: {len(carried)} distributions: "
            + ", ".join(f"{d.metadata['Name']} {d.version}" for _, d in sorted(carried.items()))
        )
    wheel_bytes = sum(wheel.stat().st_size for wheel in wheels)
    tree_bytes = travelling_tree_bytes()
    if wheel_bytes > max_wheels_mb * 1e6:
        report.problems.append(f"the wheels take {wheel_bytes / 1e6:.1f} MB, over {max_wheels_mb:g} MB")
    if tree_bytes is not None and tree_bytes + wheel_bytes > TRAVEL_LIMIT_BYTES:
        report.problems.append(
            f"tree {tree_bytes / 2**20:.1f} MiB + wheels {wheel_bytes / 2**20:.1f} MiB is over "
            "the 64 MiB the device tool carries"
        )
    tree_text = "unknown (not a git checkout)" if tree_bytes is None else f"{tree_bytes / 2**20:.1f} MiB"
    report.notes.append(f"size: wheels {wheel_bytes / 2**20:.1f} MiB ({len(wheels)} files) + tree {tree_text}")
    return report


GUARD_TEMPLATE = '''"""Written by bench/gpu_wheels_check.py --import-guard: this interpreter sees only the distributions the
GPU image has or the wheels carry (and the tuner): others can be neither imported nor found by
importlib.metadata (so their entry points, pytest plugins among them, are not loaded either); a probe with
importlib.util.find_spec answers None for them, as it does where they are not installed."""
import importlib.abc
import importlib.metadata
import importlib.util
import sys

from packaging.utils import canonicalize_name

ALLOWED = {allowed!r}
_discover = importlib.metadata.Distribution.discover.__func__


def _allowed(dist):
    name = dist.metadata["Name"]
    return name is None or canonicalize_name(name) in ALLOWED


def _discover_allowed(cls, **kwargs):
    return (dist for dist in _discover(cls, **kwargs) if _allowed(dist))


class _ImageGuard(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.owners = importlib.metadata.packages_distributions()

    def find_spec(self, name, path=None, target=None):
        if "." in name:
            return None
        owners = self.owners.get(name)
        if not owners or any(canonicalize_name(owner) in ALLOWED for owner in owners):
            return None
        raise ModuleNotFoundError(f"No module named {{name!r}} (gpu image guard: {{owners}} is neither in the "
                                  "GPU image nor carried as a wheel)", name=name)


_guard = _ImageGuard()
_find_spec = importlib.util.find_spec


def _find_spec_allowed(name, package=None):
    """As on the image, a probe (importlib.util.find_spec) of a package it lacks answers None."""
    owners = _guard.owners.get(name.partition(".")[0]) if not name.startswith(".") else None
    if owners and not any(canonicalize_name(owner) in ALLOWED for owner in owners):
        return None
    return _find_spec(name, package)


sys.meta_path.insert(0, _guard)
importlib.util.find_spec = _find_spec_allowed
importlib.metadata.Distribution.discover = classmethod(_discover_allowed)
'''


def carried_package_names(script: Path = WHEELS_SCRIPT) -> set[str]:
    """Canonical names of the packages ``bench/gpu_wheels.sh`` fetches (its ``packages=( ... )`` array)."""
    found = re.search(r"^packages=\((.*?)\)", script.read_text(), re.S | re.M)
    if found is None:
        raise ValueError(f"{script}: no packages=( ... ) array")
    return {canonicalize_name(re.split(r"[=<>!~\[;]", item, maxsplit=1)[0]) for item in found.group(1).split()}


def write_import_guard(directory: Path, image_file: Path) -> Path:
    """``directory/sitecustomize.py`` allowing the image's packages, those gpu_wheels.sh carries and the tuner."""
    allowed = set(read_image_packages(image_file)) | carried_package_names() | {"tuner"}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "sitecustomize.py"
    path.write_text(GUARD_TEMPLATE.format(allowed=sorted(allowed)))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="Directory of the wheels (./.whl).")
    parser.add_argument("--image", type=Path, default=IMAGE_PACKAGES, help="The image's package list.")
    parser.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    parser.add_argument("--no-project", action="store_true", help="Skip the tuner's own core requirements.")
    parser.add_argument("--max-wheels-mb", type=float, default=50.0)
    parser.add_argument(
        "--import-guard",
        type=Path,
        default=None,
        metavar="DIR",
        help="Only write DIR/sitecustomize.py (module docstring) and exit.",
    )
    args = parser.parse_args(argv)
    if args.import_guard is not None:
        print(f"gpu_wheels_check: import guard in {write_import_guard(args.import_guard, args.image)}")
        return 0
    report = check_wheels(args.wheels, args.image, None if args.no_project else args.pyproject, args.max_wheels_mb)
    for line in report.notes:
        print(f"gpu_wheels_check: {line}")
    for line in report.problems:
        print(f"gpu_wheels_check: PROBLEM: {line}")
    print(
        f"gpu_wheels_check: {'complete' if not report.problems else f'{len(report.problems)} problem(s)'} "
        f"({args.wheels}, image list {args.image.name}"
        f"{'' if args.no_project else ', tuner core requirements included'})"
    )
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
