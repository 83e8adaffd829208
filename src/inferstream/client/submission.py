"""What `Client.submit` sends: its arguments checked before anything is sent, input names
made absolute, an inline job's files read."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from inferstream.config.core import TOPIC_SAFE
from inferstream.jobs.errors import InputError, InvalidJobError
from inferstream.jobs.ids import check_job_id
from inferstream.jobs.options import check_job_options
from inferstream.schemas.records import InlineItem


def check_submission(model: object, inputs: object, pool: object, output_path: object,
                     job_id: str | None, options: tuple[Any, Any, Any, Any]) -> None:
    """InvalidJobError for what `submit` cannot send as asked: a str would be split into
    one input per character, an id with a space or newline breaks every line naming it, a
    model, pool or path of another type would fail in Python's words."""
    if not isinstance(model, str) or not model:
        raise InvalidJobError("model", model, "a model's name, NAME or NAME:VERSION")
    if isinstance(inputs, str | bytes | bytearray) or not isinstance(inputs, list | tuple) \
            or not all(isinstance(entry, str) and entry for entry in inputs):
        raise InvalidJobError("inputs", inputs, "a list of paths or URIs (for one, a list "
                              "of one)")
    if pool is not None and not (isinstance(pool, str) and TOPIC_SAFE.fullmatch(pool)):
        raise InvalidJobError("pool", pool, "a pool's name: letters, digits, '.', '_', '-'")
    if output_path is not None and not isinstance(output_path, str):
        raise InvalidJobError("output_path", output_path, "a path (a str)")
    if job_id is not None:
        check_job_id(job_id)
    check_job_options(*options)


def absolute(entry: str) -> str:
    """Paths become absolute (the controller and workers run elsewhere); URIs stay as named."""
    if "://" in entry:
        return entry
    if entry.startswith("@"):
        return "@" + os.path.abspath(entry[1:])
    return os.path.abspath(entry)


def read_inline(inputs: list[str]) -> list[InlineItem]:
    """The files' bytes, each named by its absolute path (as a path input would be);
    InputError naming a file that cannot be read."""
    items = []
    for path in inputs:
        for name in inline_files(os.path.abspath(path)):
            try:
                with open(name, "rb") as handle:
                    items.append(InlineItem(name=name, data=handle.read()))
            except OSError as exc:
                raise InputError(f"cannot read {name}: {exc.strerror}") from exc
    return items


def inline_files(path: str) -> Iterator[str]:
    """The files under `path` (itself where it is not a folder), every subfolder's too,
    linked ones included (once each) as the controller's walk of a path input takes them;
    InputError naming a folder that cannot be read, where `os.walk` would skip it."""
    if not os.path.isdir(path):
        yield path
        return

    def refuse(exc: OSError) -> None:
        raise InputError(f"cannot read {exc.filename}: {exc.strerror}") from exc

    walked: set[str] = set()
    for root, dirs, files in os.walk(path, onerror=refuse, followlinks=True):
        real = os.path.realpath(root)
        if real in walked:  # a link to a folder walked already, or one above it
            dirs.clear()
            continue
        walked.add(real)
        dirs.sort()
        yield from (os.path.join(root, f) for f in sorted(files) if not f.startswith("."))


def whoami() -> str:
    try:
        return os.getlogin()
    except OSError:
        return str(os.getuid())
