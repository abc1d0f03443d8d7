"""Optional parts of the tuner: which pip extra brings which module, and the one line naming it.

``pip install tuner`` (the core) runs, validates and inspects studies with the latency,
memory, PSNR/SSIM and text metrics. What only some commands or metrics need is an
extra (``pyproject.toml``; docs/install.md), so a model's own environment need not take it:

==========  =====================================================  ===============================
extra       modules                                                needed by
==========  =====================================================  ===============================
serve       fastapi, uvicorn                                       ``tuner serve``
postgres    psycopg                                                ``postgresql://`` storages
perceptual  stlpips_pytorch, lpips, IPython, torchsummary,         ``stlpips_alex``, ``lpips_alex``
            torchvision
media       cv2, av                                                flicker, warping, seam and
                                                                   lip-sync metrics; video
                                                                   containers (``.mp4``) as outputs
==========  =====================================================  ===============================

A missing module of an extra is said in one line that names the extra and the
``pip install`` that brings it (:func:`missing_extra_message`,
:func:`unavailable_reason`); a module not in :data:`EXTRA_OF_MODULE` is not an extra's
and gets no such line (None). A package of the core a host lacks all the same (an install
with ``--no-deps``, a checkout on ``PYTHONPATH``) is named with the core's own requirement
(:class:`MissingPackage`: ``pip install 'mlflow<4,>=3.0'``). Whether a module is installed is
asked with ``importlib.util.find_spec``: nothing here imports the heavy modules themselves; a
namespace package (a plain folder of that name on the path, such as the ``mlflow/`` store
folder of a checkout) is not an installed module.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable

from tuner.errors import HostError

EXTRA_OF_MODULE: dict[str, str] = {
    "fastapi": "serve",
    "uvicorn": "serve",
    "starlette": "serve",  # fastapi's own dependency
    "psycopg": "postgres",
    "stlpips_pytorch": "perceptual",
    "lpips": "perceptual",
    "IPython": "perceptual",  # imported by stlpips-pytorch without being declared
    "torchsummary": "perceptual",  # likewise
    "torchvision": "perceptual",  # imported only by lpips / stlpips-pytorch
    "diffusers": "models",
    "transformers": "models",
    "accelerate": "models",
    "cv2": "media",
    "av": "media",
}
"""Top-level module name -> the extra that installs it."""

FAMILY_MODULES: dict[str, tuple[str, ...]] = {
    "flicker": ("cv2",),
    "warping": ("cv2",),
    "seam": ("cv2",),
    "lipsync": ("cv2",),
}
"""Evaluator family -> the optional modules all of its metrics import."""

METRIC_MODULES: dict[str, tuple[str, ...]] = {
    "stlpips_alex": ("stlpips_pytorch", "IPython", "torchsummary", "torchvision"),
    "lpips_alex": ("lpips", "torchvision"),
}
"""Metric -> the optional modules it imports, where its family's metrics differ (perceptual)."""

VIDEO_CONTAINER_MODULES: tuple[str, ...] = ("cv2", "av")
"""What reading a video container output needs: OpenCV for the frames, PyAV for its audio track."""


class MissingExtra(HostError, ModuleNotFoundError):
    """A module of an extra is not installed; ``str()`` is the one line naming the extra.

    ``module``: the top-level module that is missing; ``extra``: the extra that installs it;
    ``needed_by``: what wanted it (``tuner serve``, ``PostgreSQL storage``, ...).
    """

    def __init__(self, module: str, extra: str, needed_by: str) -> None:
        self.module, self.extra, self.needed_by = module, extra, needed_by
        super().__init__(
            f"{needed_by} needs the '{extra}' extra (no module named '{module}'): {install_command(extra)}", name=module
        )


def install_command(extra: str) -> str:
    """The command that installs ``extra`` beside what is there: ``pip install 'tuner[extra]'``."""
    return f"pip install 'tuner[{extra}]'"


def missing_module(error: BaseException) -> str | None:
    """The top-level module an extra provides whose absence caused ``error`` (its cause or context
    chain included), or None when no :class:`ModuleNotFoundError` of such a module is in it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            top = current.name.partition(".")[0]
            if top in EXTRA_OF_MODULE:
                return top
        current = current.__cause__ or current.__context__
    return None


def missing_extra(error: BaseException, needed_by: str) -> MissingExtra | None:
    """``error`` as a :class:`MissingExtra` of ``needed_by``, or None when no extra's module is missing."""
    module = missing_module(error)
    return None if module is None else MissingExtra(module, EXTRA_OF_MODULE[module], needed_by)


def missing_extra_message(error: BaseException, needed_by: str) -> str | None:
    """One line: ``tuner serve needs the 'serve' extra (no module named 'fastapi'): pip install
    'tuner[serve]'``; None when ``error`` is not the absence of an extra's module."""
    found = missing_extra(error, needed_by)
    return None if found is None else str(found)


def unavailable_reason(what: str, module: str) -> str:
    """Why a metric is unavailable when ``module`` is missing: ``{what} unavailable: install the
    'perceptual' extra: pip install 'tuner[perceptual]' (no module named 'stlpips_pytorch')``."""
    extra = EXTRA_OF_MODULE.get(module.partition(".")[0])
    if extra is None:
        return f"{what} unavailable: no module named '{module}'"
    return f"{what} unavailable: install the '{extra}' extra: {install_command(extra)} (no module named '{module}')"


class MissingPackage(HostError, ModuleNotFoundError):
    """A package of the tuner's core is not installed; ``str()`` is the one line naming it and the
    command that installs it as the core requires it (:func:`core_requirement`)."""

    def __init__(self, module: str, needed_by: str) -> None:
        self.module, self.needed_by = module, needed_by
        super().__init__(
            f"{needed_by} needs the '{module}' package, a requirement of the tuner's core (no module "
            f"named '{module}'): pip install '{core_requirement(module)}'",
            name=module,
        )


def core_requirement(distribution: str) -> str:
    """The tuner's core requirement of ``distribution`` as its installed metadata states it
    (``mlflow<4,>=3.0``); the bare name when the tuner's metadata does not name it."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        requirements = requires("tuner") or []
    except PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        name = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]
        if ";" not in requirement and name.lower().replace("_", "-") == distribution.lower().replace("_", "-"):
            return requirement.strip()  # the core's (an extra's requirement carries its marker after ';')
    return distribution


def missing_package(module: str, needed_by: str) -> MissingPackage | None:
    """:class:`MissingPackage` of ``needed_by`` when core module ``module`` is not installed, else None."""
    return None if is_installed(module) else MissingPackage(module, needed_by)


def is_installed(module: str) -> bool:
    """Whether ``module`` can be found (``find_spec``; not imported). A finder that refuses it counts as
    absent, and so does a namespace package: a bare folder of that name on the path (no ``__init__``)
    is not the module — the ``mlflow/`` store folder beside a checkout would otherwise pass for MLflow."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    return spec is not None and not (spec.origin in (None, "namespace") and spec.submodule_search_locations)


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The modules of ``modules`` that are not installed, in order."""
    return [m for m in modules if not is_installed(m)]


def quality_modules(metric: str, family: str) -> tuple[str, ...]:
    """The optional modules metric ``metric`` of evaluator family ``family`` imports (none: ``()``)."""
    return METRIC_MODULES.get(metric) or FAMILY_MODULES.get(family, ())


def quality_metric_installed(metric: str) -> bool:
    """Whether the optional modules quality metric ``metric`` imports are installed (its family's, else none)."""
    from tuner.spec.metrics import QUALITY_FAMILIES

    family = next((f.name for f in QUALITY_FAMILIES if metric in f.metrics), "")
    return not missing_modules(quality_modules(metric, family))
