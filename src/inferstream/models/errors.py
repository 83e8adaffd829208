"""Errors of the model registry and of the per-item data path, and `error_line`: an exception
as the one line a reason or a check shows (a TorchScript traceback's last line)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from inferstream.errors import InferstreamError
from inferstream.schemas.records import SIM_SYNTAX

#: The most characters of an error's line that a reason keeps (`error_line`).
REASON_CHARS = 200
#: A line of a traceback that names its exception: `builtins.ValueError: message`.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception)): ")


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
        places = ", ".join(self.searched)
        super().__init__(  # one line, as every mistake of a user's is
            f"no weights for model {model!r} (searched {places}): "
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


def error_line(exc: BaseException) -> str:
    """`exc` in one line of at most `REASON_CHARS` characters: `Type: line`.

    The line is the first non-blank one of the message, but where the message holds a
    traceback (TorchScript's: `Traceback of TorchScript ...`, then the code, then
    `builtins.ValueError: feature 0 out of range`) its last one, which names the exception
    raised in the model's code: that exception's type and message, its module left out.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if any(line.startswith("Traceback") for line in lines):
        named = _EXCEPTION_LINE.match(lines[-1])
        if named is not None:
            return f"{named.group(1)}: {lines[-1][named.end():]}"[:REASON_CHARS]
        return f"{type(exc).__name__}: {lines[-1]}"[:REASON_CHARS]
    return f"{type(exc).__name__}: {lines[0]}"[:REASON_CHARS]
