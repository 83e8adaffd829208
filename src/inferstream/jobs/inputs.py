"""How a job's inputs name its items: folders walked and `@LIST` files read, the same way by
the controller's expansion of a path input and by the client reading an inline one, so that
an input gives the same items, in the same order, either way."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from inferstream.jobs.errors import InputError

#: What a folder that cannot be listed stands for: the controller makes it an item (its
#: error becomes the item's outcome), the client refuses an inline job by raising.
Unreadable = Callable[[str, OSError], Iterable[str]]


def walk_files(root: str, unreadable: Unreadable) -> Iterator[str]:
    """The files under `root`, recursively, each folder's entries sorted by name (a
    subfolder's files where its name sorts), hidden files left out. Linked subfolders are
    walked too, each real folder once: a link to a folder above it (a loop) or to one walked
    already adds nothing, where following it again and again ended the walk in "Too many
    levels of symbolic links" and failed the whole job. Every other entry is a file, one
    that cannot be read too (a dangling link, a FIFO): it gets an error outcome, or refuses
    an inline job, where it vanished from a path input's items."""
    yield from _walk(root, set(), unreadable)


def _walk(folder: str, walked: set[str], unreadable: Unreadable) -> Iterator[str]:
    """`walk_files` of `folder`, unless its real folder is in `walked` (which it joins).
    Hidden folders are walked as before (only hidden files are left out)."""
    real = os.path.realpath(folder)
    if real in walked:
        return
    walked.add(real)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        yield from unreadable(folder, exc)
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=True):
            yield from _walk(entry.path, walked, unreadable)
        elif not entry.name.startswith("."):
            yield entry.path


def list_names(path: str) -> Iterator[str]:
    """The names in list file `path`, one a line, stripped of the spaces around it; blank
    lines and lines starting with `#` are skipped. A byte order mark at the start (Windows
    editors write one) is no part of the first name, which it made a missing file.
    InputError where it is not UTF-8 text (a UnicodeDecodeError ended the controller's
    round, and the controller with it); OSError where it cannot be opened."""
    with open(path, encoding="utf-8-sig") as lines:
        try:
            for line in lines:
                name = line.strip()
                if name and not name.startswith("#"):
                    yield name
        except UnicodeDecodeError as exc:
            raise InputError(f"list file {path} is not UTF-8 text ({exc.reason})") from None
