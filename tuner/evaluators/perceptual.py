"""Perceptual distance to the reference output: ST-LPIPS (default) and classic LPIPS, AlexNet trunk.

Metrics (unit "1", lower is closer; 0 for identical frames)
-----------------------------------------------------------
``stlpips_alex``  Shift-tolerant LPIPS (Ghildyal & Liu, ECCV 2022; ``stlpips-pytorch``),
                  ``net='alex', variant='shift_tolerant'``. Its whole state dict, the
                  anti-aliased AlexNet trunk (``net.*``) *and* the linear heads
                  (``lin*``), ships in the wheel as
                  ``stlpips_pytorch/weights/vST0.0/alex_shift_tolerant.pth``. The trunk is
                  a custom network (stride-1 first conv + blur-pool), not torchvision's
                  AlexNet, and the package builds it without asking torchvision for
                  weights, so nothing is ever fetched. We build it empty and load that
                  file with a strict key check (the package itself loads with
                  ``strict=False``, which would hide a missing trunk).
``lpips_alex``    Classic LPIPS v0.1 (package ``lpips``). Only its linear heads ship in
                  the wheel (``lpips/weights/v0.1/alex.pth``); the trunk is torchvision's
                  ImageNet AlexNet, whose checkpoint (:func:`alexnet_checkpoint_name`,
                  ``alexnet-owt-7be5be79.pth`` for torchvision 0.29) must already be in
                  ``torch.hub.get_dir()/checkpoints``. Without that file the metric is
                  unavailable, naming the file and the directory. When present, it is
                  loaded from that path explicitly; torchvision is never asked to download.

Both models are built while ``torch.hub.download_url_to_file`` is replaced by a function
that raises, so even a library change that tried to fetch weights could not reach the
network.

Frames: :func:`tuner.evaluators.video.aligned_pair` (first request; another frame count is unavailable,
never truncated; another size bilinearly resized to the reference's only where the spec declares it the same
scene: :func:`tuner.evaluators.video.comparable_reason`), scaled from 0..255 to [-1, 1],
run in batches of :data:`FRAMES_PER_BATCH` frames under ``torch.inference_mode`` in eval
mode; the metric is the mean of the per-frame distances. Models are cached per process
(per metric, device and weights file). Frames whose shorter side is below the network's
minimum (:data:`MIN_SIDE_PX`) make the metric unavailable.

torch is imported only inside functions: :mod:`tuner.evaluators.registry` is imported by the
light coordinator.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.errors import HostError
from tuner.evaluators.base import EvalContext
from tuner.evaluators.video import aligned_pair, comparable_reason
from tuner.results import Direction, Metric

if TYPE_CHECKING:
    import torch

PERCEPTUAL_METRICS: dict[str, tuple[str, Direction]] = {
    "stlpips_alex": ("1", "minimize"),
    "lpips_alex": ("1", "minimize"),
}
"""Metric name -> (unit, better direction) for :func:`perceptual_metrics`."""

MIN_SIDE_PX: dict[str, int] = {"stlpips_alex": 21, "lpips_alex": 31}
"""Smallest frame side (pixels) each network accepts (found by probing the architectures)."""

FRAMES_PER_BATCH = 8
"""Frames per forward pass (bounds memory on large frames)."""

ALEXNET_CHECKPOINT_FALLBACK = "alexnet-owt-7be5be79.pth"
"""torchvision's AlexNet ImageNet checkpoint name (0.29), used if torchvision cannot say."""

_MODELS: dict[tuple[str, str, str, int], torch.nn.Module] = {}


class WeightsUnavailable(HostError, FileNotFoundError):
    """A network's weights are not on this machine (and will not be downloaded)."""


def _package_file(package: str, relative: str) -> Path:
    """A file inside an installed package, located without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise WeightsUnavailable(f"package {package!r} is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / relative


def stlpips_weights_path() -> Path:
    """ST-LPIPS AlexNet shift-tolerant state dict (trunk + linear heads) inside the wheel."""
    return _package_file("stlpips_pytorch", "weights/vST0.0/alex_shift_tolerant.pth")


def lpips_linear_weights_path() -> Path:
    """Classic LPIPS v0.1 AlexNet linear heads inside the ``lpips`` wheel."""
    return _package_file("lpips", "weights/v0.1/alex.pth")


def alexnet_checkpoint_name() -> str:
    """File name torchvision gives its ImageNet AlexNet checkpoint (from the weights URL)."""
    try:
        from torchvision.models import AlexNet_Weights  # type: ignore[import-untyped]

        return str(AlexNet_Weights.IMAGENET1K_V1.url).rsplit("/", 1)[-1]
    except (ImportError, AttributeError):
        return ALEXNET_CHECKPOINT_FALLBACK


def alexnet_checkpoint_path() -> Path:
    """Where torchvision would keep the AlexNet checkpoint: ``torch.hub.get_dir()/checkpoints/``."""
    import torch

    return Path(torch.hub.get_dir()) / "checkpoints" / alexnet_checkpoint_name()


def clear_model_cache() -> None:
    """Forget the per-process model cache (tests; or after new weights appear)."""
    _MODELS.clear()


@contextlib.contextmanager
def _downloads_forbidden() -> Iterator[None]:
    """Make ``torch.hub.download_url_to_file`` raise while building a model."""
    import torch.hub

    def refuse(url: str, *args: Any, **kwargs: Any) -> None:
        raise WeightsUnavailable(f"refusing to download {url}: weights must be local files")

    original = torch.hub.download_url_to_file
    torch.hub.download_url_to_file = refuse  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():  # torchvision's "pretrained is deprecated" noise
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        torch.hub.download_url_to_file = original


def _load_file(path: Path) -> dict[str, torch.Tensor]:
    import torch

    if not path.is_file():
        raise WeightsUnavailable(f"weights file {path} not found")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - a corrupt file is unavailable weights
        raise WeightsUnavailable(f"could not read weights file {path}: {error}") from error
    if not isinstance(state, dict):
        raise WeightsUnavailable(f"weights file {path} holds {type(state).__name__}, not a state dict")
    return state


def _with_lin_aliases(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Both LPIPS packages register each head twice (``linK`` and ``lins.K``); fill the alias."""
    full = dict(state)
    for key, value in state.items():
        match = re.fullmatch(r"lin(\d+)\.(.+)", key)
        if match:
            full[f"lins.{match.group(1)}.{match.group(2)}"] = value
    return full


def _cache_key(metric: str, device: str, weights: Path) -> tuple[str, str, str, int]:
    return metric, device, str(weights), weights.stat().st_mtime_ns


def load_stlpips_alex(device: str = "cpu") -> torch.nn.Module:
    """ST-LPIPS AlexNet (shift-tolerant), all weights from the wheel, eval mode, on ``device``.

    Raises :class:`WeightsUnavailable` when the wheel's weights file is missing.
    """
    weights = stlpips_weights_path()
    if not weights.is_file():
        raise WeightsUnavailable(f"ST-LPIPS weights {weights} are missing from the stlpips-pytorch wheel")
    key = _cache_key("stlpips_alex", device, weights)
    if key not in _MODELS:
        state = _load_file(weights)
        with _downloads_forbidden():
            from stlpips_pytorch import stlpips  # type: ignore[import-untyped]

            model = stlpips.LPIPS(pretrained=False, net="alex", variant="shift_tolerant", verbose=False)
        model.load_state_dict(_with_lin_aliases(state), strict=True)
        _MODELS[key] = model.eval().to(device)
    return _MODELS[key]


def load_lpips_alex(device: str = "cpu") -> torch.nn.Module:
    """Classic LPIPS v0.1 AlexNet: heads from the ``lpips`` wheel, trunk from the local checkpoint.

    Raises :class:`WeightsUnavailable` naming the checkpoint file and directory when
    torchvision's AlexNet checkpoint is not at :func:`alexnet_checkpoint_path`.
    """
    checkpoint = alexnet_checkpoint_path()
    if not checkpoint.is_file():
        raise WeightsUnavailable(
            f"classic LPIPS needs torchvision's AlexNet checkpoint {checkpoint.name} in "
            f"{checkpoint.parent} (no download is attempted); put the file there, or use stlpips_alex"
        )
    key = _cache_key("lpips_alex", device, checkpoint)
    if key not in _MODELS:
        heads = _load_file(lpips_linear_weights_path())
        trunk = _load_file(checkpoint)
        with _downloads_forbidden():
            import lpips  # type: ignore[import-untyped]

            model = lpips.LPIPS(pretrained=False, net="alex", pnet_rand=True, verbose=False)
        state = _with_lin_aliases(heads)
        for name in model.net.state_dict():  # "slice2.3.weight" <- torchvision "features.3.weight"
            source = "features." + name.split(".", 1)[1]
            if source not in trunk:
                raise WeightsUnavailable(f"{checkpoint} has no {source}: not a torchvision AlexNet")
            state[f"net.{name}"] = trunk[source]
        state.update({f"scaling_layer.{k}": v for k, v in model.scaling_layer.state_dict().items()})
        model.load_state_dict(state, strict=True)
        _MODELS[key] = model.eval().to(device)
    return _MODELS[key]


def _as_tensor(frames: np.ndarray, device: str) -> torch.Tensor:
    """(T, H, W, 3) float 0..255 -> (T, 3, H, W) float32 in [-1, 1] on ``device``."""
    import torch

    scaled = np.ascontiguousarray(frames.transpose(0, 3, 1, 2), dtype=np.float32) / 127.5 - 1.0
    return torch.from_numpy(scaled).to(device)


def perceptual_distance(
    model: torch.nn.Module, candidate: np.ndarray, reference: np.ndarray, min_side_px: int = 1, device: str = "cpu"
) -> float:
    """Mean over aligned frames of ``model(candidate_frame, reference_frame)`` (unit 1).

    ``candidate`` / ``reference``: uint8 videos (B, T, H, W, 3) or (T, H, W, 3).
    Raises ValueError when the aligned frames are not RGB or smaller than ``min_side_px``.
    """
    import torch

    cand, ref = aligned_pair(candidate, reference)
    if ref.shape[-1] != 3:
        raise ValueError(f"perceptual metrics need RGB frames, got {ref.shape[-1]} channels")
    if min(ref.shape[1:3]) < min_side_px:
        raise ValueError(
            f"frames of {ref.shape[1]}x{ref.shape[2]} px are below this network's minimum side of {min_side_px} px"
        )
    total = 0.0
    with torch.inference_mode():
        for start in range(0, len(ref), FRAMES_PER_BATCH):
            stop = start + FRAMES_PER_BATCH
            distances = model(_as_tensor(cand[start:stop], device), _as_tensor(ref[start:stop], device))
            total += float(distances.double().sum())
    return total / len(ref)


def stlpips_alex(candidate: np.ndarray, reference: np.ndarray, device: str = "cpu") -> float:
    """ST-LPIPS (AlexNet, shift-tolerant) of two uint8 videos, mean over aligned frames."""
    return perceptual_distance(load_stlpips_alex(device), candidate, reference, MIN_SIDE_PX["stlpips_alex"], device)


def lpips_alex(candidate: np.ndarray, reference: np.ndarray, device: str = "cpu") -> float:
    """Classic LPIPS v0.1 (AlexNet) of two uint8 videos; raises WeightsUnavailable without the trunk."""
    return perceptual_distance(load_lpips_alex(device), candidate, reference, MIN_SIDE_PX["lpips_alex"], device)


def _eval_device(context: EvalContext) -> str:
    """The trial's device (``context.device``)."""
    return context.device or "cpu"


def _measured(name: str, compute: Callable[[], float]) -> Metric:
    unit, direction = PERCEPTUAL_METRICS[name]
    try:
        return Metric(name, float(compute()), unit, direction)
    except (ValueError, WeightsUnavailable) as error:
        return Metric.unavailable(name, unit, direction, str(error))


def perceptual_metrics(output: Any, reference: Any, context: EvalContext) -> list[Metric]:
    """``stlpips_alex`` and ``lpips_alex`` of ``output.video`` against ``reference.video``.

    A quality function (see :mod:`tuner.evaluators.base`). A metric is unavailable, with the
    reason, when a video is missing or not uint8, frames are too small or not RGB, or
    (``lpips_alex``) the AlexNet checkpoint is not on this machine.
    """
    candidate, ref = output.video, reference.video
    missing = comparable_reason(candidate, ref, context.resize_to_reference)
    if missing is not None:
        return [
            Metric.unavailable(name, unit, direction, missing) for name, (unit, direction) in PERCEPTUAL_METRICS.items()
        ]
    device = _eval_device(context)
    return [
        _measured("stlpips_alex", lambda: stlpips_alex(candidate, ref, device)),
        _measured("lpips_alex", lambda: lpips_alex(candidate, ref, device)),
    ]


def warm_up() -> None:
    """Build the ST-LPIPS model once (called by the fork server, so every trial inherits it)."""
    load_stlpips_alex("cpu")
