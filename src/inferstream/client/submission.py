"""What `Client.submit` sends: its arguments checked before anything is sent, input names
made absolute, an inline job's files read."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from typing import Any

from inferstream.config.core import TOPIC_SAFE
from inferstream.jobs.errors import InlineTooLargeError, InputError, InvalidJobError, short_repr
from inferstream.jobs.ids import check_job_id
from inferstream.jobs.inputs import list_names, walk_files
from inferstream.jobs.options import check_job_options
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES
from inferstream.models.items import file_uri_path, item_name
from inferstream.schemas.records import InlineItem

INPUTS_RULE = "a list of paths (str or pathlib.Path) or URIs (for one, a list of one)"


def check_submission(model: object, inputs: object, pool: object, output_path: object,
                     job_id: str | None, options: tuple[Any, Any, Any, Any]) -> None:
    """InvalidJobError for what `submit` cannot send as asked: a str would be split into
    one input per character, an id with a space or newline breaks every line naming it, a
    model, pool or path of another type would fail in Python's words."""
    if not isinstance(model, str) or not model:
        raise InvalidJobError("model", model, "a model's name, NAME or NAME:VERSION")
    if isinstance(inputs, str | bytes | bytearray) or not isinstance(inputs, list | tuple):
        raise InvalidJobError("inputs", inputs, INPUTS_RULE, shown=(
            f"{short_repr(inputs)} (an iterator: pass a list of it, list(...))"
            if isinstance(inputs, Iterator) else None))
    wrong = next((i for i, entry in enumerate(inputs) if not _is_name(entry)), None)
    if wrong is not None:  # which entry: the list may be long
        raise InvalidJobError("inputs", inputs, INPUTS_RULE,
                              shown=f"inputs[{wrong}] = {short_repr(inputs[wrong])}")
    if pool is not None and not (isinstance(pool, str) and TOPIC_SAFE.fullmatch(pool)):
        raise InvalidJobError("pool", pool, "a pool's name: letters, digits, '.', '_', '-'")
    if output_path is not None and not _is_name(output_path):
        raise InvalidJobError("output_path", output_path, "a path (a str or pathlib.Path)")
    if job_id is not None:
        check_job_id(job_id)
    check_job_options(*options)


def _is_name(entry: object) -> bool:
    """A non-empty str, or a `pathlib.Path` (any os.PathLike of a str): a list of Paths was
    refused as no "list of paths"."""
    if isinstance(entry, os.PathLike):
        entry = os.fspath(entry)
    return isinstance(entry, str) and entry != ""


def absolute(entry: str | os.PathLike[str]) -> str:
    """Paths become absolute (the controller and workers run elsewhere), and a file's name
    that is not UTF-8 a `file://` URI (`item_name`); URIs stay as named. InputError for a
    folder or list file whose name is not UTF-8: a job's record cannot hold it."""
    entry = os.fspath(entry)
    if "://" in entry:
        return entry
    path = os.path.abspath(entry.removeprefix("@"))
    name = item_name(path)
    if name == path:
        return "@" + path if entry.startswith("@") else path
    if entry.startswith("@") or os.path.isdir(path):
        raise InputError(f"cannot send the name {name.removeprefix('file://')}: it is not "
                         "UTF-8 (rename the folder or list file)")
    return name


def read_inline(inputs: Sequence[str | os.PathLike[str]]) -> list[InlineItem]:
    """The files' bytes, each named as a path input's item would be (its absolute path, or
    the `file://` URI given); InputError naming a file that cannot be read,
    InlineTooLargeError as soon as the files pass what a job's record holds, before the rest
    are read (a folder of gigabytes was read whole into memory, then refused)."""
    items: list[InlineItem] = []
    room = max_bytes = LARGE_MESSAGE_BYTES
    for entry in inputs:
        for name, path in inline_names(os.fspath(entry)):
            data = _read_file(path, room)
            if data is None:
                raise InlineTooLargeError(
                    f"inline files are over {max_bytes} bytes by {name}, the limit of a job: "
                    "submit paths on a shared filesystem or split the job")
            room -= len(data)
            items.append(InlineItem(name=name, data=data))
    return items


def inline_names(entry: str) -> Iterator[tuple[str, str]]:
    """(item name, local path) of each file that input `entry` stands for: a file, a
    folder's files, a `file://` URI's file, or the files an `@LIST` file names (a line
    relative to the current folder); InputError for an http(s) URI, which only a worker
    fetches (these were read as relative paths, `cannot read /here/http:/...`). A list's
    lines are items as the inputs are: a URI in one is sent, or refused, as one given alone."""
    if entry.startswith("@"):
        for name in _list_names(os.path.abspath(entry[1:])):
            yield (name, _file_uri_path(name)) if "://" in name else (
                os.path.abspath(name), os.path.abspath(name))
    elif "://" in entry:
        yield entry, _file_uri_path(entry)
    else:
        yield from ((item_name(path), path) for path in inline_files(os.path.abspath(entry)))


def _list_names(path: str) -> Iterator[str]:
    try:
        yield from list_names(path)
    except OSError as exc:
        raise InputError(f"cannot read list file {path}: {exc.strerror}") from exc


def _file_uri_path(uri: str) -> str:
    """The local path of a `file://` URI; InputError for another one."""
    path = file_uri_path(uri) if uri.lower().startswith("file://") else None
    if path is None:
        raise InputError(f"{uri} is no local file to send inline: submit it without "
                         "--inline (inline=False), the workers fetch it")
    return path


def _read_file(name: str, room: int) -> bytes | None:
    """The bytes of file `name`, None where they are more than `room`; InputError where it
    cannot be read or is no regular file (opening a FIFO blocked the submission for ever,
    and a device such as /dev/zero read until memory ran out)."""
    try:
        info = os.stat(name)  # first: opening a FIFO blocks
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"cannot read {name}: not a regular file")
        if info.st_size > room:
            return None
        with open(name, "rb") as handle:
            data = handle.read(room + 1)  # a file that grew since stays within the bound
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror}") from exc
    return data if len(data) <= room else None


def inline_files(path: str) -> Iterator[str]:
    """The files under `path` (itself where it is not a folder), every subfolder's too,
    linked ones included (once each), in the order the controller's walk of a path input
    takes them (`jobs.walk`); InputError naming a folder that cannot be read, which the
    walk of a path input makes an item with an error."""
    if not os.path.isdir(path):
        yield path
        return

    def refuse(folder: str, exc: OSError) -> list[str]:
        raise InputError(f"cannot read {folder}: {exc.strerror}") from exc

    yield from walk_files(path, refuse)


def whoami() -> str:
    try:
        return os.getlogin()
    except OSError:
        return str(os.getuid())
