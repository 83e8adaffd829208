"""A job's options as the client checks them before sending and the controller on arrival."""

from __future__ import annotations

import math
import numbers

from inferstream.jobs.errors import InvalidJobError

#: The range of Avro's int, which a Job record's whole-number options are.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def check_job_options(chunk_size: int | None, top_k: int, weight: float = 1.0,
                      priority: int = 0) -> None:
    """InvalidJobError unless a task holds at least one item, an item gets at least one
    prediction, the job's weight is a positive number and its priority an integer; a chunk
    size of None is not given (the policy decides). A value of the wrong type (`"5"`, 1.5)
    is refused here too, not turned into another or left to the Avro encoder."""
    for option, value in (("chunk_size", chunk_size), ("top_k", top_k),
                          ("priority", priority)):
        if value is not None:
            _check_integer(option, value)
    if chunk_size is not None and chunk_size < 1:
        raise InvalidJobError("chunk_size", chunk_size, ">= 1")
    if top_k < 1:
        raise InvalidJobError("top_k", top_k, ">= 1")
    if (isinstance(weight, bool) or not isinstance(weight, numbers.Real)
            or not (0 < weight < math.inf)):  # NaN compares false
        raise InvalidJobError("weight", weight, "a positive number")


def _check_integer(option: str, value: object) -> None:
    """InvalidJobError unless `value` is a whole number (an int, numpy's too, not a bool)
    that an Avro int holds."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidJobError(option, value, "an integer")
    if not INT_MIN <= int(value) <= INT_MAX:
        raise InvalidJobError(option, value, f"an integer from {INT_MIN} to {INT_MAX}")
