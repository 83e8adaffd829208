"""Models: the registry, fetching and decoding items, preprocessing, batching, prediction.

Names that need torch (or PIL, numpy) are imported on first use, so that the controller and
the client, which check model names but run no model, never load torch: `names` and `errors`
are torch-free. `collate` is imported from `inferstream.models.collate` itself (a lazy name
cannot share its submodule's name).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from inferstream.models.errors import ItemError, ModelError, UnknownModelError, WeightsNotFoundError
from inferstream.models.names import SimParams, check_model_name, known_models

if TYPE_CHECKING:
    from inferstream.models.base import LoadedModel, TorchModel, imagenet_labels
    from inferstream.models.decode import DEFAULT_MAX_PIXELS, decode_image
    from inferstream.models.items import DEFAULT_MAX_BYTES, fetch_item
    from inferstream.models.outputs import Prediction
    from inferstream.models.preprocess import ImagePreprocessor, Preprocessing
    from inferstream.models.registry import ModelSpec, get_model_spec, load_model
    from inferstream.models.sim import SimModel
    from inferstream.models.weights import WEIGHTS_DIR_ENV

#: name -> the submodule that defines it, imported when the name is first used
_LAZY = {
    **dict.fromkeys(("LoadedModel", "TorchModel", "imagenet_labels"), "base"),
    "Prediction": "outputs",
    **dict.fromkeys(("DEFAULT_MAX_PIXELS", "decode_image"), "decode"),
    **dict.fromkeys(("DEFAULT_MAX_BYTES", "fetch_item"), "items"),
    **dict.fromkeys(("ImagePreprocessor", "Preprocessing"), "preprocess"),
    **dict.fromkeys(("ModelSpec", "get_model_spec", "load_model"), "registry"),
    "SimModel": "sim",
    "WEIGHTS_DIR_ENV": "weights",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and only those names

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_PIXELS",
    "WEIGHTS_DIR_ENV",
    "ImagePreprocessor",
    "ItemError",
    "LoadedModel",
    "ModelError",
    "ModelSpec",
    "Prediction",
    "Preprocessing",
    "SimModel",
    "SimParams",
    "TorchModel",
    "UnknownModelError",
    "WeightsNotFoundError",
    "check_model_name",
    "decode_image",
    "fetch_item",
    "get_model_spec",
    "imagenet_labels",
    "known_models",
    "load_model",
]
