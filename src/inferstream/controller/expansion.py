"""Turning a job's input into items, lazily and in a fixed order, then cutting items into tasks.

Inputs are local paths (files, or directories walked recursively in sorted order), `file://`
and `http(s)://` URIs, `@LIST` text files naming one item per line, and inline items. The
order is deterministic so that a controller that takes over a half-expanded job can skip the
items already issued and carry on with the same task ids.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass

from inferstream.jobs.errors import InputError
from inferstream.jobs.inputs import list_names, walk_files
from inferstream.models.items import item_name
from inferstream.schemas.records import Job, TaskItem

#: A task's items stay below this many inline bytes, whatever the chunk size.
TASK_BYTES_CAP = 8 * 1024 * 1024
URI_SCHEMES = ("http://", "https://", "file://")


@dataclass(frozen=True)
class Item:
    index: int
    name: str
    data: bytes | None = None

    def as_record(self) -> TaskItem:
        return TaskItem(index=self.index, name=self.name, data=self.data)


def check_inputs(job: Job) -> None:
    """Reject what cannot be expanded at all: unreadable directories and list files.

    A missing plain path is not a rejection: it becomes an item with a per-item error, as
    an unreadable file does.
    """
    for entry in job["inputs"]:
        if entry.startswith("@"):
            path = entry[1:]
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                raise InputError(f"cannot read list file {path}")
        elif not entry.startswith(URI_SCHEMES) and os.path.isdir(entry):
            try:
                with os.scandir(entry):
                    pass
            except OSError as exc:
                raise InputError(f"cannot read directory {entry}: {exc.strerror}") from exc


def iter_names(inputs: Iterable[str]) -> Iterator[str]:
    """Every item name the inputs stand for, in a deterministic order."""
    for entry in inputs:
        if entry.startswith("@"):
            yield from list_names(entry[1:])
        elif entry.startswith(URI_SCHEMES) or not os.path.isdir(entry):
            yield entry
        else:
            yield from map(item_name, walk_files(entry, _unreadable_item))


def _unreadable_item(folder: str, _error: OSError) -> list[str]:
    """A subfolder that cannot be listed is an item, so that it gets an error outcome
    instead of vanishing."""
    return [folder]


def iter_items(job: Job) -> Iterator[Item]:
    """Every item of the job, numbered from 0: inline items first, then named inputs."""
    index = 0
    for inline in job["inline_items"]:
        yield Item(index, inline["name"], inline["data"])
        index += 1
    for name in iter_names(job["inputs"]):
        yield Item(index, name)
        index += 1


def cut_tasks(items: Iterable[Item], chunk_size: int,
              bytes_cap: int = TASK_BYTES_CAP) -> Iterator[list[Item]]:
    """Group items into tasks of `chunk_size` items, fewer where inline bytes reach the cap."""
    chunk: list[Item] = []
    size = 0
    for item in items:
        item_size = len(item.data or b"") + len(item.name)
        if chunk and (len(chunk) >= chunk_size or size + item_size > bytes_cap):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += item_size
    if chunk:
        yield chunk


class JobExpansion:
    """A resumable cursor over a job's tasks: `next_tasks(n)` gives up to n more.

    It reads one task ahead, so `finished` is True as soon as the last task is taken and
    `next_size` is the size of the task that comes next; an input that cannot be read to its
    end finishes it too, `error` saying why. Of the `skip_tasks` first tasks, it
    keeps the items of those in `keep` in `kept` (a takeover's outstanding tasks)."""

    def __init__(self, job: Job, skip_tasks: int = 0, keep: Container[int] = ()) -> None:
        #: why the job's input could not be read to its end (a list file gone since the job
        #: was accepted, or not UTF-8 text): the cut ends there and the job fails with it
        self.error: str | None = None
        self._chunks = cut_tasks(self._read(iter_items(job)), max(1, job["chunk_size"]))
        self.next_task_id = 0
        self.items_issued = 0
        self.kept: dict[int, list[Item]] = {}
        self._ahead = next(self._chunks, None)
        for _ in range(skip_tasks):
            task_id = self.next_task_id
            chunk = self._take()
            if chunk is not None and task_id in keep:
                self.kept[task_id] = chunk

    def _read(self, items: Iterator[Item]) -> Iterator[Item]:
        try:
            yield from items
        except (OSError, InputError) as exc:
            why = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) else str(exc)
            self.error = f"its input cannot be read to its end: {why}"

    @property
    def finished(self) -> bool:
        return self._ahead is None

    @property
    def next_size(self) -> int:
        """Items of the next task (0 when finished)."""
        return len(self._ahead or ())

    def _take(self) -> list[Item] | None:
        chunk = self._ahead
        if chunk is None:
            return None
        self.next_task_id += 1
        self.items_issued += len(chunk)
        self._ahead = next(self._chunks, None)
        return chunk

    def next_tasks(self, limit: int) -> list[tuple[int, list[Item]]]:
        """Up to `limit` (task_id, items) pairs; `finished` turns True with the last."""
        out: list[tuple[int, list[Item]]] = []
        while len(out) < limit and not self.finished:
            task_id = self.next_task_id
            chunk = self._take()
            if chunk is not None:
                out.append((task_id, chunk))
        return out
