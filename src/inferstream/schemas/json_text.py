"""JSON text that any parser reads: NaN and +-inf written as null.

Python's `json` writes a non-finite float as the bare word `NaN` or `Infinity`, which is not
JSON (JavaScript's `JSON.parse` and other strict parsers reject the whole line), and a model
can answer such scores or embedding values. An encoder made by `strict_encoder` raises
instead (`allow_nan=False`, checked in C only for a float that is not finite), and `encode`
then writes the value again with those floats replaced by null: the all-finite value, the
common one, costs no more than before.
"""

from __future__ import annotations

import json
import math
from typing import Any


def strict_encoder(**options: Any) -> json.JSONEncoder:
    """A `json.JSONEncoder` of `options` that raises ValueError on NaN and +-inf; one per
    caller, made once (`json.dumps` with options makes one per call)."""
    return json.JSONEncoder(allow_nan=False, **options)


def encode(encoder: json.JSONEncoder, value: Any) -> str:
    """`value` as JSON text by `encoder` (one of `strict_encoder`), its non-finite floats
    as null."""
    try:
        return encoder.encode(value)
    except ValueError:  # NaN or +-inf somewhere (or a circular value: raised again below)
        return encoder.encode(finite(value))


def finite(value: Any) -> Any:
    """`value` with every float that is not finite, in its dicts, lists and tuples, as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value
