"""A result too large for one record put together again, and the readers `keep_result` feeds.

A worker writes such a result as ResultChunks and then its TaskResult, which names their id
and number and holds no item (`worker.oversize`). `ResultPieces` keeps the pieces as they
come, in any order, until a result's TaskResult and every piece are in. `keep_result` reads a
record of the results topic into a `ResultKeeper`: the `ResultSpool` keeps each task's first
result, as a job's output takes it; `WholeResults` keeps every one, as the readers that count
all committed results (the chaos verifier, the benchmarks) take them.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from inferstream.schemas import Codec
from inferstream.schemas.records import TaskResult, read_record

#: What stands for a piece: its bytes, or where the spool wrote them.
P = TypeVar("P")
#: A result whole: its task id and its pieces, in order.
Whole = tuple[int, list[P]]


class ResultKeeper(Protocol):
    """Where `keep_result` puts what it reads of the results topic."""

    codec: Codec

    def add(self, task_id: int, value: bytes) -> bool: ...

    def add_chunked(self, task_id: int, chunk_id: str, chunks: int) -> bool: ...

    def add_chunk(self, chunk_id: str, index: int, data: bytes) -> bool: ...


class ResultPieces(Generic[P]):
    """The pieces of results in chunks, by chunk id, each result's until it is whole (pieces
    whose TaskResult never comes stay)."""

    def __init__(self) -> None:
        self._pieces: dict[str, dict[int, P]] = {}  # chunk id -> index -> piece
        self._chunked: dict[str, tuple[int, int]] = {}  # chunk id -> (task id, pieces)

    def add_chunk(self, chunk_id: str, index: int, piece: P) -> Whole[P] | None:
        """Keep piece `index` of `chunk_id`; the result it made whole, if it did."""
        self._pieces.setdefault(chunk_id, {})[index] = piece
        return self._whole(chunk_id)

    def add_chunked(self, task_id: int, chunk_id: str, chunks: int) -> Whole[P] | None:
        """Note that the result of `task_id` is in `chunks` pieces of `chunk_id`; the
        result, if its pieces are all in."""
        self._chunked[chunk_id] = (task_id, chunks)
        return self._whole(chunk_id)

    def _whole(self, chunk_id: str) -> Whole[P] | None:
        pieces = self._pieces.get(chunk_id, {})
        task_id, chunks = self._chunked.get(chunk_id, (-1, -1))
        if chunks < 0 or any(index not in pieces for index in range(chunks)):
            return None
        del self._chunked[chunk_id]
        self._pieces.pop(chunk_id, None)
        return task_id, [pieces[index] for index in range(chunks)]


class WholeResults:
    """Every TaskResult `keep_result` reads, whole: each attempt of each task (where the
    `ResultSpool` keeps only a task's first), a result in pieces once its last record is in.
    `take` hands them out; the pieces wait in memory."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self._pieces: ResultPieces[bytes] = ResultPieces()
        self._whole: list[bytes] = []

    def add(self, task_id: int, value: bytes) -> bool:
        self._whole.append(value)
        return True

    def add_chunked(self, task_id: int, chunk_id: str, chunks: int) -> bool:
        return self._keep(self._pieces.add_chunked(task_id, chunk_id, chunks))

    def add_chunk(self, chunk_id: str, index: int, data: bytes) -> bool:
        return self._keep(self._pieces.add_chunk(chunk_id, index, data))

    def _keep(self, whole: Whole[bytes] | None) -> bool:
        if whole is not None:
            self._whole.append(b"".join(whole[1]))
        return whole is not None

    def take(self) -> list[TaskResult]:
        """The results made whole since the last call, decoded, in the order they were."""
        values, self._whole = self._whole, []
        return [read_record(self.codec, value, TaskResult) for value in values]
