"""Models: the registry, fetching and decoding items, preprocessing, batching, prediction."""

from inferstream.models.base import LoadedModel, Prediction, TorchModel, imagenet_labels
from inferstream.models.collate import collate
from inferstream.models.decode import DEFAULT_MAX_PIXELS, decode_image
from inferstream.models.errors import ItemError, ModelError, UnknownModelError, WeightsNotFoundError
from inferstream.models.items import DEFAULT_MAX_BYTES, fetch_item
from inferstream.models.preprocess import ImagePreprocessor, Preprocessing
from inferstream.models.registry import ModelSpec, get_model_spec, known_models, load_model
from inferstream.models.sim import SimModel, SimParams
from inferstream.models.weights import WEIGHTS_DIR_ENV

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
    "collate",
    "decode_image",
    "fetch_item",
    "get_model_spec",
    "imagenet_labels",
    "known_models",
    "load_model",
]
