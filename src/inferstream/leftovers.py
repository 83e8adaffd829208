"""What a process killed with SIGKILL leaves in a folder, removed by the next one of its kind.

Files and folders that a process makes for itself are named PREFIX + HOST-PID[-ANYTHING]
(`claim`), and `remove_abandoned` removes those of this host whose process is gone. Used
for partial output files (`jobs.partial`), the sysinfo app's tables folder and the
supervisor's folder for its child's TMPDIR (`supervise.parent`). Entries of
another host (a folder shared over the network) and of processes still running are left.
A zombie (killed, not yet reaped by its parent) still counts as running.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from contextlib import suppress

log = logging.getLogger(__name__)


def claim(folder: str, prefix: str) -> str:
    """`prefix` + HOST-PID: the name of what this process makes in `folder`, once those
    that processes gone left there under `prefix` are removed."""
    remove_abandoned(folder, prefix)
    return f"{prefix}{socket.gethostname()}-{os.getpid()}"


def remove_abandoned(folder: str, prefix: str) -> None:
    """Remove the entries of `folder` named `prefix` + HOST-PID or + HOST-PID-ANYTHING where
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
