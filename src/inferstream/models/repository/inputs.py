"""How a repository model's items become its input tensors, by its card's [input].

An `image` item is decoded and preprocessed by `models.preprocess.ImagePreprocessor` (resize,
optional centre crop, mean and std). A `tensor` item is a `.npy` file's bytes, read with
`numpy.load(allow_pickle=False)`, or a JSON array (as a stream's record may hold it); either
must have exactly the card's shape (the batch dimension not counted), and a `.npy` the card's
dtype (a JSON array's numbers are converted to it where no precision is lost in kind).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image

from inferstream.models.device_decode import synthetic_jpeg
from inferstream.models.errors import ItemError
from inferstream.models.preprocess import ImagePreprocessor, Preprocessing
from inferstream.models.repository.card import InputSpec

_NPY_MAGIC = b"\x93NUMPY"
_INTERPOLATIONS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}


def input_preprocessor(spec: InputSpec, max_pixels: int) -> Callable[[bytes], torch.Tensor]:
    """One item's bytes to the model's input tensor (CPU); thread-safe; ItemError for a bad
    item."""
    if spec.kind == "tensor":
        return TensorPreprocessor(spec.shape, spec.dtype)
    return ImagePreprocessor(image_preprocessing(spec), max_pixels=max_pixels)


def image_preprocessing(spec: InputSpec) -> Preprocessing:
    """The card's image input as the Preprocessing the built-in models use."""
    height, width = spec.size
    return Preprocessing(resize_size=spec.resize or max(height, width), crop_size=height,
                         interpolation=_INTERPOLATIONS[spec.interpolation], mean=spec.mean,
                         std=spec.std, size=(height, width), crop=spec.resize is not None)


def synthetic_data(spec: InputSpec) -> bytes:
    """One item of the card's input kind, for the check and calibration: a photo-sized JPEG,
    or a `.npy` of zeros of the card's shape and dtype."""
    if spec.kind == "image":
        return synthetic_jpeg()
    out = io.BytesIO()
    np.save(out, np.zeros(spec.shape, dtype=spec.dtype), allow_pickle=False)
    return out.getvalue()


def synthetic_description(spec: InputSpec) -> str:
    """What `synthetic_data` makes, in words, for a line that names it."""
    if spec.kind == "image":
        return "a JPEG photo"
    return f"a .npy of zeros, {list(spec.shape)} {spec.dtype}"


class TensorPreprocessor:
    """`.npy` bytes or a JSON array to a tensor of one shape and dtype."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape = shape
        self.dtype = np.dtype(dtype)

    def __call__(self, data: bytes) -> torch.Tensor:
        array = self.read(data)
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ItemError(f"a tensor of shape {list(array.shape)} {array.dtype}; the model "
                            f"takes {list(self.shape)} {self.dtype}")
        # A copy: torch shares a numpy array's memory and refuses a read-only one.
        return torch.from_numpy(np.array(array, copy=True))

    def read(self, data: bytes) -> np.ndarray:
        if data.startswith(_NPY_MAGIC):
            try:
                array: np.ndarray = np.load(io.BytesIO(data), allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise ItemError(f"unreadable .npy: {exc}") from None
            return array
        if data.lstrip()[:1] == b"[":
            return self.from_json(data)
        raise ItemError("not a .npy file (numpy.save) nor a JSON array")

    def from_json(self, data: bytes) -> np.ndarray:
        try:
            values = np.asarray(json.loads(data))
        except (ValueError, RecursionError) as exc:
            raise ItemError(f"not a JSON array of numbers: {exc}") from None
        if values.dtype.kind not in "biuf" or not np.can_cast(values.dtype, self.dtype,
                                                               "same_kind"):
            raise ItemError(f"a JSON array of {values.dtype} values; the model takes "
                            f"{self.dtype}")
        return values.astype(self.dtype)
