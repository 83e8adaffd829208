"""A task's result that would not fit in one Kafka record.

A task's `TaskResult` is one record on the results topic, which takes records of up to 16 MiB
(`kafka.topics.LARGE_MESSAGE_BYTES`: the topics' `max.message.bytes` and the worker's producers'
`max_request_size`, both set from it). A model with large outputs can answer a task with
more: a segmentation model's masks, an autoencoder's images, or an embedding model's vectors
in tasks sized for its speed. Sent as it is, that record fails every transaction it is part
of, so each worker that took the task would give its partition up after its commit attempts,
and take it again, and fail again.

`result_records` sends such a result in pieces (the claim-check pattern, kept inside Kafka):
its whole encoding cut into `ResultChunk` records of one `chunk_id`, then the TaskResult with
its summary, its item counts, the chunks' id and number, and no item, all to the job's
partition in the task's transaction. The controller counts that TaskResult as any other and
skips the chunks; the readers of the items (`jobs.output.keep_result`) put them together.

A result is cut into at most `MAX_CHUNKS` pieces (254 MiB: the worker holds about three
times that while it sends it, its outputs, their encoding and the pieces, and a reader
decodes it at once). `fitted` keeps a larger result's items
in order while their outputs fit and turns each item after into an error that says why and
what to do (a smaller `--chunk-size`): one result per task, as always, and a task that ends.
Where that reason on every item would itself not fit, the first error holds it in full and
the others point to it (`records.results.error_items`).
"""

from __future__ import annotations

import logging
import sys
import uuid

from inferstream.kafka.limits import RECORD_HEADROOM, size_text
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    ItemResult,
    TaskItem,
    TaskResult,
    encode_result,
    encode_stub,
    error_items,
)

log = logging.getLogger(__name__)

#: Room left in a record for its key, headers and batch framing (aiokafka's estimate adds
#: under a hundred bytes to the value).
HEADROOM = RECORD_HEADROOM
#: The most bytes a TaskResult's encoding may take in one record.
RESULT_BYTES_CAP = LARGE_MESSAGE_BYTES - HEADROOM
#: The most records a result too large for one is cut into, and so the most bytes its whole
#: encoding may take.
MAX_CHUNKS = 16
#: Room left in a ResultChunk's record for its fields beside the data and the job id (the
#: chunk id, the task id, the index, their lengths).
CHUNK_FIELDS_BYTES = 1024
#: `error_items`' budget that repeats the reason on every item, whatever its length.
ALWAYS_REPEAT = sys.maxsize
#: The most an Avro string's length prefix grows when the full reason replaces a pointer.
LENGTH_PREFIX_BYTES = 8


def result_records(codec: Codec, result: TaskResult, encoded: bytes,
                   cap: int | None = None, chunks: int = MAX_CHUNKS) -> list[bytes]:
    """The records of the results topic that carry `result` (`encoded`): `encoded` alone
    where it fits in `cap` bytes (`RESULT_BYTES_CAP`); else its ResultChunks of at most
    `cap` bytes each, at most `chunks` of them (the items past those made errors, `fitted`),
    and its TaskResult."""
    cap = RESULT_BYTES_CAP if cap is None else cap
    if len(encoded) <= cap:
        return [encoded]
    step = cap - CHUNK_FIELDS_BYTES - len(result["job_id"].encode())
    result, encoded = fitted(codec, result, encoded, chunks * step,
                             holds="a task's result takes in all")
    if len(encoded) <= cap:  # its items made errors: the rest fits in one record
        return [encoded]
    chunk_id = uuid.uuid4().hex
    pieces = [codec.encode("ResultChunk", {
        "job_id": result["job_id"], "task_id": result["task_id"], "chunk_id": chunk_id,
        "index": index, "data": encoded[start:start + step]})
        for index, start in enumerate(range(0, len(encoded), step))]
    log.info("the result of job=%s task=%d takes %d bytes: sent in %d chunks", result["job_id"],
             result["task_id"], len(encoded), len(pieces))
    return [*pieces, encode_stub(codec, result, chunk_id, len(pieces))]


def fitted(codec: Codec, result: TaskResult, encoded: bytes, cap: int,
           holds: str = "a result record holds") -> tuple[TaskResult, bytes]:
    """`result` and `encoded` (its encoding) where that fits in `cap` bytes; else `result`
    with the items from the first that does not fit on made errors, and its encoding;
    `holds` says what the cap is in their reason."""
    if len(encoded) <= cap:
        return result, encoded
    items = result["items"]
    names = [TaskItem(index=item["index"], name=item["name"], data=None) for item in items]
    empty = _size(codec, result, [])
    sizes = [_size(codec, result, [item]) - empty for item in items]
    reason = _reason(len(encoded), cap, empty, sizes, holds)
    # the reason on every error where they all fit, else in full on the first one only
    repeat_bytes = ALWAYS_REPEAT
    error_sizes = _error_sizes(codec, result, names, reason, repeat_bytes, empty)
    if empty + sum(error_sizes) > cap:
        repeat_bytes = 0
        error_sizes = _error_sizes(codec, result, names, reason, repeat_bytes, empty)
    # with every item an error, the record fits; the reason in full moves to the first
    # error, whichever item that is: room for it (and its longer length prefix) kept aside,
    # and for the item counts, longer than the 0s of `empty`
    room = (cap - empty - sum(error_sizes) - len(reason.encode()) - LENGTH_PREFIX_BYTES
            - _counts_growth(len(items)))
    kept = 0  # the first items, in order, while each one's output fits
    while kept < len(items) and sizes[kept] - error_sizes[kept] <= room:
        room -= sizes[kept] - error_sizes[kept]
        kept += 1
    log.warning("the result of job=%s task=%d takes %d bytes, over the %d %s: its first %d "
                "of %d items kept, the rest made errors", result["job_id"], result["task_id"],
                len(encoded), cap, holds, kept, len(items))
    result = TaskResult(**{**result, "items": [*items[:kept], *error_items(
        names[kept:], reason, repeat_bytes)]})
    return result, encode_result(codec, result)


def _size(codec: Codec, result: TaskResult, items: list[ItemResult]) -> int:
    return len(encode_result(codec, TaskResult(**{**result, "items": items})))


def _counts_growth(items: int) -> int:
    """The most bytes a result's two item counts take beyond their 0s: each is at most
    `items`, an Avro int (a zigzag varint of 7 bits a byte)."""
    return 2 * (max(1, -(-(2 * items).bit_length() // 7)) - 1)


def _error_sizes(codec: Codec, result: TaskResult, names: list[TaskItem], reason: str,
                 repeat_bytes: int, empty: int) -> list[int]:
    """What each of `names` adds to the record as an error (`error_items`' way)."""
    return [_size(codec, result, [error]) - empty
            for error in error_items(names, reason, repeat_bytes)]


def _reason(total: int, cap: int, empty: int, sizes: list[int], holds: str) -> str:
    largest = max(sizes)
    if largest > cap - empty:
        return (f"output too large: one item's output takes {size_text(largest)}, over the "
                f"{size_text(cap)} {holds}")
    fit = max(1, (cap - empty) // largest)
    return (f"output too large: this task's outputs take {size_text(total)}, over the "
            f"{size_text(cap)} {holds}; submit the job with --chunk-size {fit} or less")
