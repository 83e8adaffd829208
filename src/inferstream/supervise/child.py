"""What a supervised child does for its supervisor: follow it (a drain when it dies), say
that its start-up is over, and serve the restart counter the supervisor's count starts."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as CounterMetric

from inferstream.supervise.environ import RESTARTS, RUNNING_FD, SUPERVISOR_PID, decode_restarts
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


def note_running() -> None:
    """Tell the supervisor, if any, that start-up is over: a failure from now on is retried,
    whatever its exit status. Once; later calls do nothing."""
    fd = os.environ.pop(RUNNING_FD, None)
    if fd is None:
        return
    try:
        os.write(int(fd), b"r")
        os.close(int(fd))
    except (OSError, ValueError) as exc:  # the supervisor then sees a child still starting
        log.debug("cannot tell the supervisor that start-up is over: %s", exc)


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
