"""The interface the worker drives, whatever the model: fetch, preprocess, predict."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import lru_cache
from importlib import resources

import torch

from inferstream.models.collate import collate
from inferstream.models.device_decode import DeviceDecoder, is_encoded
from inferstream.models.errors import ModelError
from inferstream.models.items import DEFAULT_MAX_BYTES, fetch_item
from inferstream.models.outputs import ItemOutput

NUM_IMAGENET_CLASSES = 1000


class LoadedModel(ABC):
    """A model ready to serve: its `preprocess` runs on a thread pool, `predict` on batches.

    `name` is the registry name, `labels[class_id]` the class names.
    """

    name: str
    device: torch.device
    labels: tuple[str, ...]
    #: version of the weights or code (a weights file name, `random`); None where unknown
    version: str | None = None

    def fetch(
        self,
        name: str,
        data: bytes | None = None,
        *,
        http_timeout_s: float = 10.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> bytes:
        """The item's bytes (see `fetch_item`); ItemError with a reason when unreachable."""
        return fetch_item(name, data, http_timeout_s=http_timeout_s, max_bytes=max_bytes)

    def fetch_may_wait(self, name: str, data: bytes | None = None) -> bool:
        """Whether fetching this item may wait on I/O (a file, a download); only an item that
        cannot may decode on the worker's event loop (`serving.decoding`). A model whose
        `fetch` reads elsewhere says so here too."""
        return data is None

    @abstractmethod
    def preprocess(self, data: bytes) -> torch.Tensor:
        """One item's bytes to a CPU tensor; thread-safe; ItemError for a bad item."""

    @abstractmethod
    def predict(self, batch: torch.Tensor, top_k: int) -> Sequence[ItemOutput]:
        """The output of each row of a collated batch (a classifier's: its top-k predictions)."""

    def predict_items(self, items: Sequence[torch.Tensor], top_k: int) -> list[ItemOutput | str]:
        """The output of each of `preprocess`'s outputs, or why the item is bad (a str: where
        the last of its decoding happens in the batch, `models.device_decode`). Items of one
        shape and dtype run in one batch: a handler's preprocess may make items of several
        (a text's length), which no batch stacks."""
        groups: dict[tuple[tuple[int, ...], torch.dtype], list[int]] = {}
        for index, item in enumerate(items):
            groups.setdefault((tuple(item.shape), item.dtype), []).append(index)
        if len(groups) == 1:
            return list(self.predict(collate(items, self.device), top_k))
        outputs: list[ItemOutput | str] = [""] * len(items)
        for indexes in groups.values():
            batch = collate([items[i] for i in indexes], self.device)
            for index, output in zip(indexes, self.predict(batch, top_k), strict=True):
                outputs[index] = output
        return outputs

    def synthetic_item(self) -> torch.Tensor:
        """One preprocessed item of the model's input shape, for calibration (ModelError
        where the model cannot make one)."""
        raise ModelError(f"{self.name} has no synthetic input")


def check_top_k(top_k: int, num_classes: int) -> int:
    """`top_k` capped at the number of classes; ValueError below 1."""
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    return min(top_k, num_classes)


class TorchModel(LoadedModel):
    """An image classifier (an nn.Module in eval mode) with its preprocessing.

    `forward` is what `predict` calls on a batch made ready by `to_inputs`: the module itself
    until `models.forward.prepare_forward` sets a compiled one, a precision and a memory
    format (float32 and contiguous until then).
    """

    def __init__(
        self,
        name: str,
        module: torch.nn.Module,
        preprocessor: Callable[[bytes], torch.Tensor],
        device: torch.device,
        labels: tuple[str, ...],
        *,
        input_shape: tuple[int, ...] = (3, 224, 224),
        version: str | None = None,
    ):
        self.name = name
        self.module = module.eval().to(device)
        self.preprocessor = preprocessor
        self.device = device
        self.labels = labels
        self.input_shape = input_shape
        self.version = version
        self.forward: Callable[[torch.Tensor], torch.Tensor] = self.module
        self.dtype = torch.float32
        self.memory_format = torch.contiguous_format
        #: set where JPEGs are decoded on the model's device (`models.device_decode`)
        self.decoder: DeviceDecoder | None = None

    def preprocess(self, data: bytes) -> torch.Tensor:
        if self.decoder is not None:
            return self.decoder.encode_item(data)
        return self.preprocessor(data)

    def predict_items(self, items: Sequence[torch.Tensor], top_k: int) -> list[ItemOutput | str]:
        if self.decoder is None or not any(is_encoded(item) for item in items):
            return super().predict_items(items, top_k)
        ready = self.decoder.ready(items)
        good = [item for item in ready if not isinstance(item, str)]
        predictions = iter(self.predict(torch.stack(good), top_k) if good else [])
        return [item if isinstance(item, str) else next(predictions) for item in ready]

    def synthetic_item(self) -> torch.Tensor:
        """A mid-grey image of the preprocessed shape (CHW)."""
        return torch.full(self.input_shape, 0.5)

    def to_inputs(self, batch: torch.Tensor) -> torch.Tensor:
        """A collated batch on the device, in the model's precision and memory format."""
        # Only a pinned source makes a non-blocking copy safe and asynchronous.
        inputs = batch.to(self.device, non_blocking=batch.is_pinned())
        return inputs.to(dtype=self.dtype, memory_format=self.memory_format)

    def predict(self, batch: torch.Tensor, top_k: int) -> Sequence[ItemOutput]:
        """Run the batch on the device under inference_mode; softmax; top-k."""
        k = check_top_k(top_k, len(self.labels))
        with torch.inference_mode():
            logits = self.forward(self.to_inputs(batch))
            scores, ids = torch.softmax(logits.float(), dim=1).topk(k, dim=1)
            score_rows, id_rows = scores.cpu().tolist(), ids.cpu().tolist()
        return [
            [(c, self.labels[c], s) for c, s in zip(id_row, score_row, strict=True)]
            for id_row, score_row in zip(id_rows, score_rows, strict=True)
        ]


@lru_cache(maxsize=1)
def imagenet_labels() -> tuple[str, ...]:
    """The 1,000 ImageNet-1k class names by class id (0 is "tench", 281 "tabby"), in the
    index order every model here predicts."""
    text = resources.files("inferstream.models").joinpath("imagenet_classes.txt").read_text("utf-8")
    labels = tuple(line for line in text.splitlines() if line)
    if len(labels) != NUM_IMAGENET_CLASSES:
        raise ModelError(f"imagenet_classes.txt holds {len(labels)} names, not 1000")
    return labels
