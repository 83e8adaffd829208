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
    for option, value, lowest in (("chunk_size", chunk_size, 1), ("top_k", top_k, 1),
                                  ("priority", priority, INT_MIN)):
        if value is not None:
            _check_integer(option, value, lowest)
    if (isinstance(weight, bool) or not isinstance(weight, numbers.Real)
            or not (0 < weight < math.inf)):  # NaN compares false
        raise InvalidJobError("weight", weight, "a positive number")


def _check_integer(option: str, value: object, lowest: int) -> None:
    """InvalidJobError unless `value` is a whole number (an int, numpy's too, not a bool)
    from `lowest` up to what an Avro int holds (">= 1" where only that is wrong)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidJobError(option, value, "an integer")
    if int(value) < lowest and lowest == 1:
        raise InvalidJobError(option, value, ">= 1")
    if not lowest <= int(value) <= INT_MAX:
        raise InvalidJobError(option, value, f"an integer from {lowest} to {INT_MAX}")
