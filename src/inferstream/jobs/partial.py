"""Output files written beside their final path until they are whole, then renamed into place.

A writer names its partial file `PATH.tmp-HOST-PID`. One killed with SIGKILL (or whose host
lost power) cannot remove it, so the next writer of the same path on the same host removes
those of processes that are gone: `submit --output`, `results --output` and their npz
variant used to leave one behind for good with each such kill. A partial file of another host
(an output folder shared over the network) or of a process still running is left alone.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from contextlib import suppress

log = logging.getLogger(__name__)


def _marker() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def partial_path(path: str) -> str:
    """Where this process writes the file that is to replace `path` until it is whole; any
    partial file of `path` that a process of this host no longer running left is removed."""
    folder, name = os.path.split(os.path.abspath(path))
    remove_abandoned(folder, f"{name}.tmp-")
    return f"{path}.tmp-{_marker()}"


def spool_prefix(folder: str) -> str:
    """The prefix of a temporary folder of this process in `folder` (see `partial_path`);
    those of processes gone are removed."""
    remove_abandoned(folder, ".inferstream-npz-")
    return f".inferstream-npz-{_marker()}-"


def remove_abandoned(folder: str, prefix: str) -> None:
    """Remove the entries of `folder` named PREFIX-HOST-PID or PREFIX-HOST-PID-ANYTHING where
    HOST is this host and no process PID runs here."""
    mine = f"{prefix}{socket.gethostname()}-"
    with suppress(OSError):
        for name in os.listdir(folder):
            owner = _owner(name[len(mine):]) if name.startswith(mine) else None
            if owner is not None and not _running(owner):
                found = os.path.join(folder, name)
                log.info("removing %s, left by process %d that is gone", found, owner)
                with suppress(OSError):
                    if os.path.isdir(found):
                        shutil.rmtree(found)
                    else:
                        os.remove(found)


def _owner(rest: str) -> int | None:
    """The PID that `rest` (PID or PID-ANYTHING) starts with."""
    digits = rest.split("-", 1)[0]
    return int(digits) if digits.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
