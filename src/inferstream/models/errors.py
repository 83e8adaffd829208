"""Errors of the model registry and of the per-item data path."""

from __future__ import annotations

from collections.abc import Iterable

from inferstream.errors import InferstreamError
from inferstream.schemas.records import SIM_SYNTAX


class ModelError(InferstreamError):
    """A model cannot be named, built or loaded."""


class UnknownModelError(ModelError):
    """The name is not in the registry; `known` lists the names that are."""

    def __init__(self, name: str, known: Iterable[str], detail: str | None = None):
        self.name = name
        self.known = tuple(known)
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"unknown model {name!r}{why}; known models: {', '.join(self.known)}, {SIM_SYNTAX}"
        )


class WeightsNotFoundError(ModelError):
    """No weights file was found; `searched` lists every place looked at, in order."""

    def __init__(self, model: str, searched: Iterable[str]):
        self.model = model
        self.searched = tuple(searched)
        places = "\n  ".join(self.searched)
        super().__init__(
            f"no weights for model {model!r}; searched:\n  {places}\n"
            "put the file in one of those places (or in $INFERSTREAM_WEIGHTS_DIR), name it "
            "with `inferstream worker --weights FILE` (weights=FILE in Python), "
            "or use `inferstream worker --random-weights` for benchmarks"
        )


class ItemError(InferstreamError):
    """One input item cannot be fetched or decoded; `reason` is short and human-readable.

    The worker turns it into a per-item error result and carries on with the batch.
    """

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
