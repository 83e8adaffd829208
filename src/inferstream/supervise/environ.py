"""What a supervisor tells its child through the environment: that it is supervised, where
to say that its start-up is over or that the cluster refused it, and the restarts before it."""

from __future__ import annotations

from collections import Counter

from inferstream.supervise.policy import REASONS

#: The supervisor's pid: set in its child only, which then runs the role instead of
#: supervising it.
SUPERVISOR_PID = "INFERSTREAM_SUPERVISOR_PID"
#: The pipe where the child writes a line of each message below.
RUNNING_FD = "INFERSTREAM_SUPERVISOR_FD"
#: The message of a child whose start-up is over.
RUNNING = b"r"
#: The start of the message of a child the cluster refused (a credential or an ACL): the
#: rest is the line that says so.
REFUSED = b"x "
#: The restarts before this child, by reason: `SIGABRT=2,exit=1`.
RESTARTS = "INFERSTREAM_SUPERVISOR_RESTARTS"


def encode_restarts(restarts: Counter[str]) -> str:
    return ",".join(f"{reason}={count}" for reason, count in sorted(restarts.items()))


def decode_restarts(text: str) -> Counter[str]:
    """`encode_restarts`'s counts; unreadable parts are skipped."""
    found: Counter[str] = Counter()
    for part in text.split(","):
        reason, _, count = part.partition("=")
        if reason in REASONS and count.isdigit():
            found[reason] = int(count)
    return found
