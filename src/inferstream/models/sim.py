"""Simulated models (`records.SIM_SYNTAX`): a batch of n items sleeps (`batch_ms` + n x `ms`)
x `slower` ms, not computing; `as=alexnet|googlenet` takes the two times from one GPU's
published throughput (`names.GPU_PROFILES`); with `slow_after`, the items after the first K
take `slow_factor` x as long; with `embedding=D`, each item's answer is a vector of D
floats instead of top-k predictions.

They stand in for GPU nodes in scale and fault tests: many can share one CPU, and each
returns the same prediction (or vector) for the same bytes wherever and however often it
runs.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Sequence

import numpy as np
import torch

from inferstream.models.base import LoadedModel, check_top_k, imagenet_labels
from inferstream.models.names import SimParams, parse_sim_name
from inferstream.models.outputs import Embedding, ItemOutput, Prediction

__all__ = ["SimModel", "SimParams", "parse_sim_name"]

log = logging.getLogger(__name__)

_HASH_MASK = (1 << 63) - 1  # fits a signed int64 tensor


class SimModel(LoadedModel):
    """A LoadedModel whose items are opaque bytes and whose inference is a sleep."""

    def __init__(self, name: str, params: SimParams):
        self.name = name
        self.params = params
        self.device = torch.device("cpu")
        self.labels = imagenet_labels()
        self.version = "sim"
        self._rng = random.Random()  # noqa: S311 - jitter, not security
        #: items this model has predicted (calibration batches included)
        self.items_processed = 0

    def fetch(self, name: str, data: bytes | None = None, **_: object) -> bytes:
        """The inline data, else the item name's UTF-8 bytes: no I/O at all, only a sleep of
        `decode_ms` (x `slower`) where that is given."""
        if self.params.decode_ms:
            time.sleep(self.params.decode_ms * self.params.slower / 1000)
        return data if data is not None else name.encode()

    def fetch_may_wait(self, name: str, data: bytes | None = None) -> bool:
        """A sim item's fetch reads nothing; it waits only where `decode_ms` makes it sleep."""
        return self.params.decode_ms > 0

    def preprocess(self, data: bytes) -> torch.Tensor:
        """A one-element int64 tensor holding a stable hash of `data`."""
        digest = hashlib.blake2b(data, digest_size=8).digest()
        # through numpy: a third of torch.tensor's time, which was a sim item's largest cost
        return torch.from_numpy(np.array([int.from_bytes(digest, "big") & _HASH_MASK],
                                         dtype=np.int64))

    def synthetic_item(self) -> torch.Tensor:
        return self.preprocess(b"calibration")

    def predict(self, batch: torch.Tensor, top_k: int) -> Sequence[ItemOutput]:
        """Sleep ms x batch size (± jitter), then predict (or embed) from each item's hash."""
        k = check_top_k(top_k, len(self.labels))
        hashes = [int(h) for h in batch.reshape(len(batch), -1)[:, 0].tolist()]
        delay_s = self._delay_s(len(hashes))
        if delay_s > 0:  # sleep(0) still gives up the GIL, to 8 other members' threads
            time.sleep(delay_s)
        if self.params.embedding:
            return [sim_embedding(h, self.params.embedding) for h in hashes]
        return [self._prediction(h, k) for h in hashes]

    def _delay_s(self, items: int) -> float:
        p = self.params
        spread = self._rng.uniform(-p.jitter, p.jitter)
        batch_ms = (p.batch_ms if items else 0.0) + self._item_ms(items)
        return max(0.0, batch_ms * p.slower * (1.0 + spread) / 1000.0)

    def _item_ms(self, items: int) -> float:
        """The ms that the next `items` items take, `slow_factor` x for those past
        `slow_after`; counts them as processed."""
        p = self.params
        before = self.items_processed
        self.items_processed += items
        if p.slow_after is None:
            return p.ms * items
        slow = min(items, max(0, self.items_processed - p.slow_after))
        if slow and before <= p.slow_after:
            log.info("model %s slows down %gx after %d items", self.name, p.slow_factor,
                     p.slow_after)
        return p.ms * (items - slow + slow * p.slow_factor)

    def _prediction(self, item_hash: int, k: int) -> Prediction:
        # Consecutive class ids are distinct for any k <= 1000; halving scores sum to < 1.
        first = item_hash % len(self.labels)
        ids = [(first + i) % len(self.labels) for i in range(k)]
        return [(c, self.labels[c], 0.5 ** (i + 1)) for i, c in enumerate(ids)]


def sim_embedding(item_hash: int, size: int) -> Embedding:
    """The vector of `size` standard normal float32 values that an item's hash seeds."""
    generator = torch.Generator().manual_seed(item_hash)
    return Embedding(tuple(torch.randn(size, generator=generator).tolist()))
