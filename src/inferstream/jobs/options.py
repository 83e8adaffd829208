"""A job's options as the client checks them before sending and the controller on arrival."""

from __future__ import annotations

import math

from inferstream.jobs.errors import InvalidJobError


def check_job_options(chunk_size: int | None, top_k: int, weight: float = 1.0) -> None:
    """InvalidJobError unless a task holds at least one item, an item gets at least one
    prediction and the job's weight is a positive number; a chunk size of None is not given
    (the policy decides)."""
    if chunk_size is not None and chunk_size < 1:
        raise InvalidJobError("chunk_size", chunk_size, ">= 1")
    if top_k < 1:
        raise InvalidJobError("top_k", top_k, ">= 1")
    if not (0 < weight < math.inf):  # NaN compares false
        raise InvalidJobError("weight", weight, "a positive number")
