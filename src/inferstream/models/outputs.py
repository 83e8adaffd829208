"""What a model answers for one item, by the kind its card declares (issue 27).

A classifier answers a `Prediction` (top-k (class id, label, probability), `models.base`), an
embedding model an `Embedding`, any other model `Tensors`. torch-free: the serving path turns
these into result records, and readers of results never load torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Prediction = list[tuple[int, str, float]]
"""Top-k (class id, label, probability) of one item, most probable first."""

OutputKind = Literal["classification", "embedding", "tensor"]
OUTPUT_KINDS: tuple[OutputKind, ...] = ("classification", "embedding", "tensor")


@dataclass(frozen=True)
class Embedding:
    """One item's vector (float32 values), L2-normalised where the card asks."""

    vector: tuple[float, ...]


@dataclass(frozen=True)
class NamedTensor:
    """One output tensor of one item: `data` is its values, C order, little-endian, of
    numpy `dtype` (e.g. `float32`) and `shape`."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes


@dataclass(frozen=True)
class Tensors:
    """The named output tensors of one item, in the model's output order."""

    tensors: tuple[NamedTensor, ...]


ItemOutput = Prediction | Embedding | Tensors
"""What `LoadedModel.predict` answers for one item."""
