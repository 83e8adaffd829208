"""`ResultSpool`: a job's first result of each task, kept on disk until read in task order.

A job's results arrive in commit order, its output goes in task order, and a large job's
results do not fit in memory (about 2 KB an item decoded: 2.4 GB for 1.2 million images). The
spool writes each task's first record, still encoded, to an unnamed temporary file and keeps
only where it lies, so reading a job back costs a few bytes of memory per task.

A result too large for one record comes as ResultChunks and then its TaskResult, which names
their id and number (`worker.oversize`): the spool keeps the pieces as they come
(`jobs.pieces`), and the result is its task's once its TaskResult and every piece are in (the
first result whole wins: pieces a worker that died left without their TaskResult are never
one).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from types import TracebackType
from typing import IO

from inferstream.jobs.pieces import ResultPieces, Whole
from inferstream.schemas import Codec
from inferstream.schemas.records import TaskResult, read_record

#: Where bytes lie in the spool's file: (offset, length).
Span = tuple[int, int]


class ResultSpool:
    """First-wins store of encoded TaskResults by task id; use as a context manager."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="inferstream-results-")
        self._where: dict[int, list[Span]] = {}  # task id -> its encoding's pieces, in order
        self._end = 0
        self._next = 0  # the tasks below it were kept, and handed out by `ready`
        self._pieces: ResultPieces[Span] = ResultPieces()

    def __len__(self) -> int:
        """How many tasks' results were kept, handed out or not."""
        return len(self._where) + self._next

    def add(self, task_id: int, value: bytes) -> bool:
        """Keep `value` as the result of `task_id` unless one was kept already."""
        if self._kept(task_id):
            return False
        self._where[task_id] = [self._write(value)]
        return True

    def add_chunk(self, chunk_id: str, index: int, data: bytes) -> bool:
        """Keep piece `index` of the result in chunks `chunk_id`; whether that made one
        whole that is its task's first."""
        return self._keep_whole(self._pieces.add_chunk(chunk_id, index, self._write(data)))

    def add_chunked(self, task_id: int, chunk_id: str, chunks: int) -> bool:
        """Keep the result of `task_id` that is in `chunks` pieces of `chunk_id` once they
        are all in (unless one was kept already); whether it is kept now."""
        return self._keep_whole(self._pieces.add_chunked(task_id, chunk_id, chunks))

    def _keep_whole(self, whole: Whole[Span] | None) -> bool:
        if whole is None or self._kept(whole[0]):
            return False
        self._where[whole[0]] = whole[1]
        return True

    def _kept(self, task_id: int) -> bool:
        return task_id < self._next or task_id in self._where

    def _write(self, data: bytes) -> Span:
        self._file.seek(self._end)
        self._file.write(data)
        self._end += len(data)
        return self._end - len(data), len(data)

    def ready(self) -> Iterator[TaskResult]:
        """The kept results of tasks 0, 1, 2 ... up to the first task not kept yet, each
        handed out once: what can be written in task order before the rest arrive (task ids
        count from 0)."""
        while self._next in self._where:
            spans = self._where.pop(self._next)
            self._next += 1
            yield self._read(spans)

    def in_task_order(self) -> Iterator[TaskResult]:
        """The kept results `ready` has not handed out, decoded one at a time, by task id."""
        for task_id in sorted(self._where):
            yield self._read(self._where[task_id])

    def _read(self, spans: list[Span]) -> TaskResult:
        value = bytearray()
        for offset, length in spans:
            self._file.seek(offset)
            value += self._file.read(length)
        return read_record(self.codec, bytes(value), TaskResult)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultSpool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
