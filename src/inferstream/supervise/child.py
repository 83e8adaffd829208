"""What a supervised child does for its supervisor: follow it (a drain when it dies), say
that its start-up is over or that the cluster refused it, and serve the restart counter the
supervisor's count starts."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as CounterMetric

from inferstream.supervise.environ import (
    REFUSED,
    RESTARTS,
    RUNNING,
    RUNNING_FD,
    SUPERVISOR_PID,
    decode_restarts,
)
from inferstream.supervise.policy import REASONS

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def supervised() -> bool:
    """Whether this process is a supervisor's child."""
    return SUPERVISOR_PID in os.environ


def follow_supervisor() -> bool:
    """Be sent SIGTERM (a drain) when the supervisor dies, on Linux; False if it is gone."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    return str(os.getppid()) == os.environ.get(SUPERVISOR_PID)


class _SupervisorPipe:
    """Where the child tells its supervisor how it fares: one line per message (`environ`).
    Taken from the environment at first use, so that no process started from here
    inherits it."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._taken = False
        self.said_running = False

    def tell(self, message: bytes) -> bool:
        """Whether the supervisor, if any, was told `message`."""
        if not self._taken:
            self._taken = True
            fd = os.environ.pop(RUNNING_FD, None)
            self._fd = int(fd) if fd is not None and fd.isdigit() else None
        if self._fd is None:
            return False
        try:
            os.set_inheritable(self._fd, False)
            os.write(self._fd, message + b"\n")
        except OSError as exc:  # the supervisor then sees a child still starting
            log.debug("cannot tell the supervisor %r: %s", message[:1], exc)
            return False
        return True


_PIPE = _SupervisorPipe()


def note_running() -> None:
    """Tell the supervisor, if any, that start-up is over: a failure from now on is retried,
    whatever its exit status. Once; later calls do nothing."""
    if not _PIPE.said_running:
        _PIPE.said_running = True
        _PIPE.tell(RUNNING)


def note_refused(line: str) -> bool:
    """Tell the supervisor, if any, that the cluster refused this process a credential or
    an ACL, as `line` says: it says the line itself and does not start the role again (no
    restart brings an ACL). Whether a supervisor was told."""
    return _PIPE.tell(REFUSED + " ".join(line.split()).encode("utf-8", "replace"))


def count_restarts(registry: CollectorRegistry, role: str) -> CounterMetric:
    """`inferstream_process_restarts_total` of `role`: the restarts before this process, so
    the count goes on across them; 0 for every reason where none was supervised."""
    counter = CounterMetric(
        "inferstream_process_restarts_total",
        "Times the supervising parent restarted this role's process, by how the previous "
        "one ended (a signal's name, or exit)", ["role", "reason"], registry=registry)
    counts = decode_restarts(os.environ.get(RESTARTS, ""))
    for reason in REASONS:
        counter.labels(role, reason).inc(counts[reason])
    return counter
