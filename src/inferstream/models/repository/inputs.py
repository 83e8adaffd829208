"""How a repository model's items become its input tensors, by its card's [input].

An `image` item is decoded and preprocessed by `models.preprocess.ImagePreprocessor` (resize,
optional centre crop, mean and std), as torchvision's transforms do on PIL's image. A `tensor`
item is a `.npy` file's bytes, read with `numpy.load(allow_pickle=False)`, or a JSON array (as
a stream's record may hold it; UTF-8, a byte order mark allowed); either
must have exactly the card's shape (the batch dimension not counted), and a `.npy` the card's
dtype. A JSON array's numbers are converted to the card's dtype where each keeps its value in
kind (`json_array_as`): integers to an integer dtype whose range holds them, integers and
floats to a float dtype (rounded to its nearest value, but never overflowing to inf), bools to
any; never floats to integers, and never a silent wraparound.
"""

from __future__ import annotations

import codecs
import io
import json
import math
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
    """The card's image input as the Preprocessing the built-in models use, the image made RGB
    as torchvision's loader makes it (`Image.open(f).convert("RGB")`: transparent pixels keep
    their colour), turned by its EXIF orientation only where the card says so."""
    height, width = spec.size
    return Preprocessing(resize_size=spec.resize or max(height, width), crop_size=height,
                         interpolation=_INTERPOLATIONS[spec.interpolation], mean=spec.mean,
                         std=spec.std, size=(height, width), crop=spec.resize is not None,
                         exif_orientation=spec.exif_orientation, alpha_on_white=False)


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
            if not array.dtype.isnative:  # saved on (or as) the other byte order: same values
                array = array.astype(array.dtype.newbyteorder("="))
            return array
        data = data.removeprefix(codecs.BOM_UTF8)  # a file saved by a Windows editor
        if data.lstrip()[:1] == b"[":
            return self.from_json(data)
        raise ItemError("not a .npy file (numpy.save) nor a JSON array")

    def from_json(self, data: bytes) -> np.ndarray:
        try:
            parsed = json.loads(data, parse_float=_json_float)
        except (ValueError, RecursionError) as exc:
            raise ItemError(f"not a JSON array of numbers: {exc}") from None
        try:
            values = np.asarray(parsed)
        except ValueError:  # numpy's words for it name its own dimensions
            raise ItemError("not a JSON array of one shape: its nested arrays differ in "
                            "length, or an array stands beside a number") from None
        kind = values.dtype.kind
        if kind in "OUS":  # a null, a string or an object among the numbers, or huge integers
            _raise_not_number(np.array(parsed, dtype=object))
        # integers beyond int64's range: numpy holds them as objects, or as float64 beside
        # another integer it cannot hold with them in one integer dtype
        if kind == "O" or (kind == "f" and self.dtype.kind in "iu"):
            values = _python_integers(parsed, values, self.dtype)
        return json_array_as(values, self.dtype)


def _json_float(text: str) -> float:
    """A JSON number with a fraction or an exponent as a float; ItemError for one beyond
    float64's range (`1e400`), which `float` reads as inf without a word."""
    value = float(text)
    if math.isinf(value):
        raise ItemError(f"value {_shown(text)} is beyond float64's range")
    return value


def json_array_as(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A JSON array's values (bools, integers, or floats as numpy read them; Python ints in an
    object array) as `dtype`; ItemError, one line, where that would change a value in kind:
    an integer outside an integer dtype's range, a finite number that overflows a float dtype
    to inf (a NaN or inf in the array stays one), a float to an integer dtype."""
    source = values.dtype.kind
    if source == "b":
        return values.astype(dtype)
    if source in "iuO" and dtype.kind in "iu":
        if not np.can_cast(values.dtype, dtype, "safe"):
            info = np.iinfo(dtype)
            _raise_outside(values, (values < info.min) | (values > info.max), dtype,
                           info.min, info.max)
        return values.astype(dtype)
    if source in "iufO" and dtype.kind == "f":
        return _as_float(values, dtype)
    shown = "integer" if source == "O" else values.dtype
    raise ItemError(f"a JSON array of {shown} values; the model takes {dtype}")


def _python_integers(parsed: object, values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`parsed` as an object array of its Python ints where it holds integers only (exact,
    however large), else the kind error for `values`."""
    exact = np.array(parsed, dtype=object)
    if all(isinstance(value, int) for value in exact.flat):
        return exact
    raise ItemError(f"a JSON array of {values.dtype} values; the model takes {dtype}")


def _raise_not_number(values: np.ndarray) -> None:
    """ItemError naming the first of a JSON array's values (as Python objects) that is not a
    number (bools are), if any: a missing value (null), a string, an object."""
    for place, value in np.ndenumerate(values):
        if not isinstance(value, int | float):
            raise ItemError(f"value {_shown(json.dumps(value))} at {list(place)} is not a "
                            "number")


def _shown(text: str) -> str:
    """A value's JSON text as an item's error names it: at most 32 characters."""
    return text if len(text) <= 32 else f"{text[:29]}..."


def _as_float(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`values` (numbers) as the float `dtype`, rounded to its nearest values; ItemError for
    a finite value that would become inf."""
    largest = float(np.finfo(dtype).max)
    if values.dtype.kind == "O":
        try:
            values = values.astype(np.float64)
        except OverflowError:  # a Python int beyond even float64's range
            too_large = [abs(value) > largest for value in values.flat]
            _raise_outside(values, np.reshape(too_large, values.shape), dtype, -largest,
                           largest)
    with np.errstate(over="ignore"):  # an overflow is reported below, not warned about
        converted = values.astype(dtype)
    if not np.can_cast(values.dtype, dtype, "safe") and np.isinf(converted).any():
        _raise_outside(values, np.isinf(converted) & np.isfinite(values), dtype, -largest,
                       largest)
    return converted


def _raise_outside(values: np.ndarray, outside: np.ndarray, dtype: np.dtype, low: object,
                   high: object) -> None:
    """ItemError naming the first of `values` where `outside` is true, if any."""
    flags = np.asarray(outside, dtype=bool)
    if not flags.any():
        return
    first = int(np.argmax(flags))
    value = values.flat[first]
    shown = str(value.item() if isinstance(value, np.generic) else value)
    if len(shown) > 32:  # a Python int of hundreds of digits: its head and its length
        shown = f"{shown[:12]}... ({len(shown.lstrip('-'))} digits)"
    at = [int(i) for i in np.unravel_index(first, values.shape)]
    raise ItemError(f"value {shown} at {at} is outside {dtype}'s range {low} to {high}")
