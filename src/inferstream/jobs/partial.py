"""Output files written beside their final path until they are whole, then renamed into place.

A writer names its partial file `PATH.tmp-HOST-PID`. One killed with SIGKILL (or whose host
lost power) cannot remove it, so the next writer of the same path on the same host removes
those of processes that are gone: `submit --output`, `results --output` and their npz
variant used to leave one behind for good with each such kill. A partial file of another host
(an output folder shared over the network) or of a process still running is left alone.
"""

from __future__ import annotations

import os

from inferstream.jobs.errors import OutputPathError
from inferstream.leftovers import claim


def partial_path(path: str) -> str:
    """Where this process writes the file that is to replace `path` until it is whole; any
    partial file of `path` that a process of this host no longer running left is removed."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(os.path.dirname(path), claim(folder, f"{name}.tmp-"))


def spool_prefix(folder: str) -> str:
    """The prefix of a temporary folder of this process in `folder` (see `partial_path`);
    those of processes gone are removed."""
    return claim(folder, ".inferstream-npz-") + "-"


def check_writable(path: str) -> None:
    """OutputPathError naming `path` unless a file can be written there: before a job's
    results are read, and before a partial file or spool beside it is named after it."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise OutputPathError(path, f"{path} is a directory")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise OutputPathError(path, f"{path}: cannot write in {folder}")
