"""The supervising parent of the long-running roles: a process that dies of what it cannot
handle itself (a native abort inside a client library, a segfault, the OOM killer) is started
again with backoff and resumes from Kafka (DESIGN.md, guarantee 5).

`parent.Supervisor` runs the role as its child and passes the stop signals on; `policy`
decides whether and when a child that ended is started again; `child` is the child's side
(its start-up over, the restart counter), `environ` what the two say through the
environment. `cli` hands a supervised command to `supervise` unless `restart = off`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from inferstream.config import Config


def supervise(role: str, command: Sequence[str], config: Config) -> NoReturn:
    """Become the supervisor of `command` (the role's process): a fresh process, without
    what the start-up checks loaded (Kafka clients: about 35 MiB), of the same pid (what
    systemd, Docker and Kubernetes signal). Does not return."""
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [  # noqa: S606 - the same interpreter, no shell
        sys.executable, "-m", "inferstream.supervise", "--role", role,
        "--grace-s", str(config.stop_grace_s), "--delay-s", str(config.restart_delay_s),
        "--max-delay-s", str(config.restart_max_delay_s), "--log-level", level, "--",
        *command])
