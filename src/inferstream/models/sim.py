"""Simulated models (`sim:ms=N[,jitter=F]`): they spend N ms per item asleep, not computing.

They stand in for GPU nodes in scale and fault tests: many can share one CPU, and each
returns the same prediction for the same bytes wherever and however often it runs.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from dataclasses import dataclass

import torch

from inferstream.models.base import LoadedModel, Prediction, check_top_k, imagenet_labels
from inferstream.schemas.records import SIM_PREFIX

_HASH_MASK = (1 << 63) - 1  # fits a signed int64 tensor


@dataclass(frozen=True)
class SimParams:
    """Per-item time `ms` in milliseconds and its uniform relative `jitter` (0.1 = ±10%)."""

    ms: float
    jitter: float = 0.0


def parse_sim_name(name: str) -> SimParams:
    """Parse `sim:ms=N[,jitter=F]`; ValueError says what is wrong."""
    if not name.startswith(SIM_PREFIX):
        raise ValueError(f"not a simulated model name: {name!r}")
    fields: dict[str, float] = {}
    for part in name[len(SIM_PREFIX) :].split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("ms", "jitter"):
            raise ValueError(f"expected ms=N or jitter=F, got {part!r}")
        fields[key.strip()] = float(value)
    if "ms" not in fields:
        raise ValueError("ms=N is required")
    params = SimParams(**fields)
    if not (0 <= params.ms < math.inf and 0 <= params.jitter <= 1):
        raise ValueError("need ms >= 0 and 0 <= jitter <= 1")
    return params


class SimModel(LoadedModel):
    """A LoadedModel whose items are opaque bytes and whose inference is a sleep."""

    def __init__(self, name: str, params: SimParams):
        self.name = name
        self.params = params
        self.device = torch.device("cpu")
        self.labels = imagenet_labels()
        self.version = "sim"
        self._rng = random.Random()  # noqa: S311 - jitter, not security

    def fetch(self, name: str, data: bytes | None = None, **_: object) -> bytes:
        """The inline data, else the item name's UTF-8 bytes: no I/O at all."""
        return data if data is not None else name.encode()

    def preprocess(self, data: bytes) -> torch.Tensor:
        """A one-element int64 tensor holding a stable hash of `data`."""
        digest = hashlib.blake2b(data, digest_size=8).digest()
        return torch.tensor([int.from_bytes(digest, "big") & _HASH_MASK], dtype=torch.int64)

    def synthetic_item(self) -> torch.Tensor:
        return self.preprocess(b"calibration")

    def predict(self, batch: torch.Tensor, top_k: int) -> list[Prediction]:
        """Sleep ms x batch size (± jitter), then predict from each item's hash."""
        k = check_top_k(top_k, len(self.labels))
        hashes = [int(h) for h in batch.reshape(len(batch), -1)[:, 0].tolist()]
        time.sleep(self._delay_s(len(hashes)))
        return [self._prediction(h, k) for h in hashes]

    def _delay_s(self, items: int) -> float:
        spread = self._rng.uniform(-self.params.jitter, self.params.jitter)
        return max(0.0, self.params.ms * items * (1.0 + spread) / 1000.0)

    def _prediction(self, item_hash: int, k: int) -> Prediction:
        # Consecutive class ids are distinct for any k <= 1000; halving scores sum to < 1.
        first = item_hash % len(self.labels)
        ids = [(first + i) % len(self.labels) for i in range(k)]
        return [(c, self.labels[c], 0.5 ** (i + 1)) for i, c in enumerate(ids)]
