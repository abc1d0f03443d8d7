"""ST-LPIPS / LPIPS: local weights only, identity, monotone in distortion, honest unavailability."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch

from tuner.evaluators import perceptual
from tuner.evaluators.base import EvalContext
from tuner.evaluators.perceptual import (
    alexnet_checkpoint_path,
    load_lpips_alex,
    load_stlpips_alex,
    lpips_alex,
    perceptual_metrics,
    stlpips_alex,
    stlpips_weights_path,
)
from tuner.evaluators.video import ssim
from tuner.workloads.base import WorkloadOutput


def textured_scene(seed: int = 0, size: int = 128) -> np.ndarray:
    """A natural-looking RGB uint8 image: colour gradients, soft discs, waves and fine texture."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / size
    image = np.stack([60 + 120 * x, 80 + 100 * y, 150 - 80 * x * y], axis=-1)
    for _ in range(6):
        cx, cy = rng.uniform(0.15, 0.85, 2)
        radius = rng.uniform(0.08, 0.25)
        disc = np.clip((radius - np.hypot(x - cx, y - cy)) * size / 2, 0, 1)[..., None]
        image = image * (1 - disc) + rng.uniform(20, 235, 3) * disc
    image += 12 * np.sin(2 * np.pi * (6 * x + 3 * y))[..., None]
    texture = cv2.GaussianBlur(rng.normal(0, 1, (size, size)).astype(np.float32), (0, 0), 1.0)
    image += 14 * (texture / texture.std())[..., None]
    return np.clip(image, 0, 255).astype(np.uint8)


def blurred(image: np.ndarray, sigma: float) -> np.ndarray:
    return cv2.GaussianBlur(image, (0, 0), sigma)


def noisy(image: np.ndarray, sigma: float) -> np.ndarray:
    noise = np.random.default_rng(1).normal(0, sigma, image.shape)
    return np.clip(np.rint(image + noise), 0, 255).astype(np.uint8)


def jpeg(image: np.ndarray, quality: float) -> np.ndarray:
    ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    decoded = cv2.imdecode(encoded, cv2.IMREAD_UNCHANGED)
    assert ok and decoded is not None
    return np.asarray(decoded, dtype=np.uint8)


LADDERS: dict[str, tuple[Callable[[np.ndarray, float], np.ndarray], list[float]]] = {
    "blur": (blurred, [0.6, 1.2, 2.4]),  # Gaussian sigma, px
    "noise": (noisy, [4.0, 12.0, 36.0]),  # Gaussian sigma, 8-bit levels
    "jpeg": (jpeg, [80.0, 30.0, 5.0]),  # JPEG quality (lower = stronger)
}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any socket connection or torch hub download fails loudly; the model cache starts empty."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a network access was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    perceptual.clear_model_cache()
    yield
    perceptual.clear_model_cache()


@pytest.fixture
def hub_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """torch.hub's directory moved to an empty tmp dir (no AlexNet checkpoint there)."""
    directory = tmp_path / "hub"
    monkeypatch.setattr(torch.hub, "_hub_dir", str(directory))
    return directory


def test_importing_the_evaluators_does_not_import_torch() -> None:
    code = "import sys, tuner.evaluators.perceptual, tuner.evaluators.video; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_stlpips_weights_trunk_included_come_from_the_wheel(no_network: None) -> None:
    shipped = torch.load(stlpips_weights_path(), map_location="cpu", weights_only=True)
    assert Path(perceptual.__file__).parent != stlpips_weights_path().parent
    assert "stlpips_pytorch" in stlpips_weights_path().parts
    model = load_stlpips_alex()
    assert not model.training
    state = model.state_dict()
    trunk_keys = [key for key in shipped if key.startswith("net.")]
    assert len(trunk_keys) >= 10
    for key, value in shipped.items():
        assert torch.equal(state[key], value), key


def test_identical_frames_have_zero_stlpips(no_network: None) -> None:
    video = np.stack([textured_scene(seed) for seed in range(3)])
    assert abs(stlpips_alex(video, video)) < 1e-6


@pytest.mark.parametrize("distortion", sorted(LADDERS))
def test_stronger_distortion_raises_stlpips_and_lowers_ssim(distortion: str) -> None:
    image = textured_scene()
    apply, strengths = LADDERS[distortion]
    distances, similarities = [], []
    for strength in strengths:
        candidate, reference = apply(image, strength)[None], image[None]
        distances.append(stlpips_alex(candidate, reference))
        similarities.append(ssim(candidate, reference))
    assert all(a < b for a, b in zip(distances, distances[1:])), distances
    assert all(a > b for a, b in zip(similarities, similarities[1:])), similarities
    assert distances[0] > 0 and similarities[0] < 1


def test_perceptual_metrics_shape_and_lpips_unavailable_without_checkpoint(no_network: None, hub_dir: Path) -> None:
    reference = np.stack([textured_scene(seed, size=64) for seed in range(2)])
    output = WorkloadOutput(video=noisy(reference, 12.0))
    metrics = {m.name: m for m in perceptual_metrics(output, WorkloadOutput(video=reference), EvalContext())}
    assert [(m.name, m.unit, m.direction) for m in metrics.values()] == [
        ("stlpips_alex", "1", "minimize"),
        ("lpips_alex", "1", "minimize"),
    ]
    assert metrics["stlpips_alex"].available and (metrics["stlpips_alex"].value or 0.0) > 0
    lpips_metric = metrics["lpips_alex"]
    assert lpips_metric.value is None
    assert "alexnet-owt-7be5be79.pth" in (lpips_metric.reason or "")
    assert str(hub_dir / "checkpoints") in (lpips_metric.reason or "")
    assert not hub_dir.exists()  # nothing was fetched or created


def test_lpips_loads_exactly_the_local_checkpoint(no_network: None, hub_dir: Path) -> None:
    from torchvision.models import alexnet  # type: ignore[import-untyped]

    torch.manual_seed(1234)
    saved = alexnet(weights=None).state_dict()
    checkpoint = alexnet_checkpoint_path()
    assert checkpoint == hub_dir / "checkpoints" / "alexnet-owt-7be5be79.pth"
    checkpoint.parent.mkdir(parents=True)
    torch.save(saved, checkpoint)

    model: Any = load_lpips_alex()
    assert torch.equal(model.net.slice1[0].weight, saved["features.0.weight"])
    assert torch.equal(model.net.slice5[0].weight, saved["features.10.weight"])
    heads = torch.load(perceptual.lpips_linear_weights_path(), map_location="cpu", weights_only=True)
    assert torch.equal(model.lin0.model[1].weight, heads["lin0.model.1.weight"])

    reference = np.stack([textured_scene(seed, size=48) for seed in range(2)])
    distance = lpips_alex(noisy(reference, 20.0), reference)
    assert math.isfinite(distance) and distance > 0
    assert abs(lpips_alex(reference, reference)) < 1e-6


def test_frames_below_network_minimum_are_unavailable(no_network: None) -> None:
    video = WorkloadOutput(video=np.stack([textured_scene(size=16)]))
    metrics = {m.name: m for m in perceptual_metrics(video, video, EvalContext())}
    assert metrics["stlpips_alex"].value is None
    assert "minimum side of 21 px" in (metrics["stlpips_alex"].reason or "")


def test_missing_video_is_unavailable() -> None:
    video = WorkloadOutput(video=np.stack([textured_scene(size=32)]))
    metrics = perceptual_metrics(WorkloadOutput(video=None), video, EvalContext())
    assert [m.reason for m in metrics] == ["the workload produced no video"] * 2
