"""What a trial ran with: its environment (allow-listed, less secrets), runtime, packages, project commit and weights.

Captured by the worker (:mod:`tuner.runner.worker`) at the end of every trial it
reports, *after* the measurement (loading cuDNN or hashing weights never shows in a
trial's latency or peak memory), and stored per trial by
:func:`tuner.storage.records.result_attributes` as the user attributes ``env`` and
``runtime``. :func:`git_state` and :func:`package_versions` also give a study its
``provenance`` attribute at creation (:func:`tuner.study.studies.study_attributes`).

* the ``env`` record is :func:`tuner.runner.recorded_env.recorded_environment`: only the
  allow-listed variables (and the spec's ``record_env``), secrets masked; nothing else.
* :func:`trial_runtime` -- ``{"python", "platform", "packages", "torch", "driver", "git",
  "weights", "unavailable"}``; a fact that cannot be found is ``None`` and
  ``unavailable[key]`` says why (no GPU, no git checkout, torch not imported...).

Costs (2-core CPU host, no GPU; measured for issue 15): package versions from
distribution metadata 25 ms; ``git rev-parse`` + ``git status`` 10 ms -- both read once
per process for imported code, and by the fork server before it forks workers
(:func:`warm_cache`); a program's checkout (command / http workloads) every trial;
``torch.backends.cudnn.version()`` 100 ms the first time in a process (it loads
libcudnn), so torch facts are cached per process; sha256 of weights about
1 GB/s, cached per file (path, size, mtime) in the process and in the JSON file the
caller names (the study directory's ``weights_sha256.json``), so a fresh worker
per trial hashes a checkpoint once per study. ``torch.utils.collect_env`` is not
used: ``get_env_info()`` takes 0.36 s here (it runs ``pip list``, ``lscpu``,
``nvidia-smi``), and every fact it would add that matters here is read directly.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from tuner.secrets import redact_text

INFERENCE_PACKAGES: tuple[str, ...] = ("torch", "torchvision", "numpy", "optuna", "tuner")
"""Distributions whose versions every record names (``None`` when not installed)."""
GIT_TIMEOUT_S = 5.0
HASH_CHUNK_BYTES = 8 * 1024 * 1024


def git_state(directory: Path) -> dict[str, Any]:
    """``{"repository", "commit", "dirty", "reason"}`` of the git checkout holding ``directory``.

    ``commit`` is ``git rev-parse HEAD``; ``dirty`` is True when a tracked file differs
    from it (``git status --porcelain --untracked-files=no``; untracked files do not
    count). Outside a repository, without git, or on any git error: ``commit``,
    ``dirty`` and ``repository`` are None and ``reason`` says why. Never raises.
    """

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            raise RuntimeError((done.stderr.strip().splitlines() or [f"git exited {done.returncode}"])[-1])
        return done.stdout.strip()

    try:
        top, commit = git("rev-parse", "--show-toplevel", "HEAD").splitlines()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as error:
        return {
            "repository": None,
            "commit": None,
            "dirty": None,
            "reason": f"no git commit for {directory}: {redact_text(str(error))}",
        }
    return {"repository": top, "commit": commit, "dirty": dirty, "reason": None}


def _distribution_of(module: str) -> str | None:
    """The installed distribution that provides top-level package ``module``, if any.

    A distribution named like the package first (23 ms for five); a package whose source is not
    in a ``site-packages`` / ``dist-packages`` directory is a checkout, not an installed
    distribution (its git state says what it is); only the rest needs the scan of every installed
    distribution's file list (``packages_distributions``: 0.3-1.4 s here)."""
    import importlib.util

    top = module.split(".")[0]
    if _version(top) is not None:
        return top
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    origin = str(found.origin or "") if found is not None else ""
    if not any(part in ("site-packages", "dist-packages") for part in Path(origin).parts):
        return None
    names = _packages_distributions().get(top) or []
    return names[0] if names else None


@lru_cache(maxsize=1)
def _packages_distributions() -> Mapping[str, list[str]]:
    import importlib.metadata

    return importlib.metadata.packages_distributions()


def _version(distribution: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_versions(modules: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Installed versions of :data:`INFERENCE_PACKAGES` and of the distributions providing ``modules``
    (a workload's ``module:Name`` module; left out when no installed distribution provides it).
    Read from distribution metadata once per process (the code a process runs is what it imported,
    so a later install does not change it): nothing is imported."""
    return dict(_package_versions(tuple(INFERENCE_PACKAGES), tuple(modules)))


@lru_cache(maxsize=16)
def _package_versions(named: tuple[str, ...], modules: tuple[str, ...]) -> Mapping[str, str | None]:
    versions = {name: _version(name) for name in named}
    for module in modules:
        distribution = _distribution_of(module)
        if distribution is not None and distribution not in versions:
            versions[distribution] = _version(distribution)
    return versions


@lru_cache(maxsize=16)
def _imported_source_git(directory: str) -> Mapping[str, Any]:
    return git_state(Path(directory))


def imported_source_git(module: str) -> dict[str, Any]:
    """:func:`git_state` of the checkout holding ``module``'s source, once per process: the code of an
    imported module does not change after its import, so a worker forked from a process that imported
    it reports the state at that import (see :func:`warm_cache`)."""
    return dict(_imported_source_git(str(source_directory(module))))


def warm_cache(modules: list[str]) -> None:
    """Read the package versions and git state of the imported ``modules`` now, so processes forked
    from this one (the fork server's trial workers) inherit them instead of paying ~35 ms a trial."""
    for module in modules:
        if module in sys.modules:
            package_versions((module,))
            imported_source_git(module)


@lru_cache(maxsize=1)
def _torch_build() -> dict[str, Any]:
    """Facts of the imported torch that cannot change within a process (cached)."""
    import torch

    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001 - a broken cuDNN install is a fact, not a failure
        cudnn = None
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cuda_available": bool(torch.cuda.is_available()),
    }


def torch_runtime() -> dict[str, Any]:
    """Facts of the torch this process imported (see module docs).

    ``{"version", "cuda", "cudnn", "cuda_available", "threads", "interop_threads"}``:
    ``cuda`` is ``torch.version.cuda`` (the CUDA runtime torch was built with; None for a
    CPU build), ``cudnn`` ``torch.backends.cudnn.version()`` (None when torch has none).
    The build facts are cached per process; the thread counts are read at each call, since
    a warm worker or the workload may change them between trials.
    Call only when torch is already imported.
    """
    import torch

    return {**_torch_build(), "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads()}


def driver_version() -> tuple[str | None, str | None]:
    """(NVIDIA driver version from NVML, None) or (None, why it is unknown)."""
    from tuner.gpu import NvmlUnavailable, nvml_session

    try:
        with nvml_session() as pynvml:
            version = pynvml.nvmlSystemGetDriverVersion()
            return (version.decode() if isinstance(version, bytes) else str(version)), None
    except NvmlUnavailable as error:
        return None, f"NVML: {error}"
    except Exception as error:  # noqa: BLE001 - pynvml raises its own error tree
        return None, f"NVML: {type(error).__name__}: {error}"


_hashes: dict[tuple[str, int, int], str] = {}


def sha256_file(path: Path, cache_file: Path | None = None) -> str:
    """Hex sha256 of ``path``'s bytes (the tuner's one file hash: weights, the reference output).

    Without ``cache_file`` the file is read every time (what verifying a published or fetched
    file needs). With it (a workload's declared weights), the digest is remembered per (resolved
    path, size, mtime) in this process and in the JSON file ``cache_file`` (written atomically;
    a broken cache is ignored)."""
    resolved = path.resolve()
    if cache_file is None:
        return _read_sha256(resolved)
    stat = resolved.stat()
    key = (str(resolved), stat.st_size, stat.st_mtime_ns)
    if key in _hashes:
        return _hashes[key]
    cache_key = f"{key[0]}|{key[1]}|{key[2]}"
    try:
        stored: dict[str, str] = dict(json.loads(cache_file.read_text()))
    except (OSError, ValueError, TypeError):
        stored = {}
    digest = stored.get(cache_key)
    if not isinstance(digest, str):
        digest = _read_sha256(resolved)
        try:
            stored[cache_key] = digest
            temporary = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps(stored, sort_keys=True))
            temporary.replace(cache_file)
        except OSError:
            pass  # a cache that cannot be written costs a re-hash, nothing else
    _hashes[key] = digest
    return digest


def _read_sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            hasher.update(chunk)
    return hasher.hexdigest()


def weights_record(
    declared: Mapping[str, Path], cache_file: Path | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """``({name: {"path", "bytes", "sha256"}}, {name: why not})`` for a workload's declared weights."""
    record: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for name, path in sorted(declared.items()):
        try:
            resolved = Path(path).resolve()
            record[name] = {
                "path": str(resolved),
                "bytes": resolved.stat().st_size,
                "sha256": sha256_file(resolved, cache_file),
            }
        except OSError as error:
            problems[f"weights.{name}"] = f"cannot hash {path}: {error}"
    return record, problems


def source_directory(module: str) -> Path:
    """The directory of ``module``'s file when it is imported and has one, else the working directory."""
    loaded = sys.modules.get(module)
    file = getattr(loaded, "__file__", None)
    return Path(file).resolve().parent if file else Path.cwd()


def module_directory(module: str) -> Path:
    """The directory of ``module``'s source, located without running it (its parent packages are
    imported, as ``tuner validate`` does); the working directory when it cannot be found."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):
        found = None
    origin = found.origin if found is not None else None
    return Path(origin).resolve().parent if origin and origin not in ("built-in", "frozen") else Path.cwd()


def workload_module(target: str, factory: str | None) -> str | None:
    """The user's module behind a workload: the python adapter's factory module, a ``class:`` target's
    module, or None for a command / http workload (the program's checkout is the working directory)."""
    if factory:
        return factory.partition(":")[0]
    return None if target.startswith("tuner.adapters.") else target.partition(":")[0]


def study_provenance(target: str, factory: str | None) -> dict[str, Any]:
    """What a study records when it is created (attribute ``provenance``): the git state of the workload's
    source (the working directory for a command / http workload), package versions, Python."""
    module = workload_module(target, factory)
    directory = module_directory(module) if module else Path.cwd()
    return {
        "git": git_state(directory),
        "packages": package_versions((module,) if module else ()),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def trial_runtime(
    modules: tuple[str, ...], declared_weights: Mapping[str, Path], cache_file: Path | None = None
) -> dict[str, Any]:
    """The runtime facts of this trial (see module docs). ``modules``: the workload's own modules, the
    first one's source directory decides the git checkout. Never raises; what fails is unavailable."""
    unavailable: dict[str, str] = {}
    torch_facts: dict[str, Any] | None = None
    if "torch" in sys.modules:
        try:
            torch_facts = torch_runtime()
        except Exception as error:  # noqa: BLE001
            unavailable["torch"] = f"{type(error).__name__}: {error}"
    else:
        unavailable["torch"] = (
            "the workload did not import torch in the worker (a command or http workload runs "
            "its model in another process; a python one may not use torch)"
        )
    if torch_facts is not None:
        for key, why in (("cuda", "a CPU-only torch build"), ("cudnn", "torch has no cuDNN")):
            if torch_facts[key] is None:
                unavailable[f"torch.{key}"] = why
    driver, reason = driver_version()
    if reason is not None:
        unavailable["driver"] = reason
    # an imported module's checkout once per process; a program's (the working directory) every trial
    git = imported_source_git(modules[0]) if modules else git_state(Path.cwd())
    if git["reason"] is not None:
        unavailable["git"] = git["reason"]
    weights, problems = weights_record(declared_weights, cache_file)
    unavailable.update(problems)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(modules),
        "torch": torch_facts,
        "driver": driver,
        "git": git,
        "weights": weights,
        "unavailable": unavailable,
    }
