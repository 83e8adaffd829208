"""A sysinfo replica the cluster refuses after its start (an ACL removed): one line and exit 2,
as a worker or controller says it, not Faust's crash (three tracebacks, exit 1) and a restart.

Faust (faust-streaming 0.15) crashes the app on aiokafka's authorization error, logging it
with a traceback from each service it crashes, and its worker exits 1: the supervisor then
restarted the replica, whose consumer, refused its group at the join, waited for ever without
a word (seen with `inferstream sysinfo` as a principal whose group ACL was deleted); a policy
round refused its topic failed, with a traceback, every `policy_interval_s` for ever. Here the
crash's (or the round's) reason becomes `not_authorized`'s line, which the supervisor says as
its last without starting another replica (no restart brings an ACL), and those tracebacks are
left out of the log while the replica runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from inferstream.config import Config
from inferstream.kafka.errors import AuthorizationError
from inferstream.kafka.preflight import plural
from inferstream.kafka.refusals import not_authorized

ROLE = "sysinfo"
#: aiokafka's errors for a request the cluster's ACLs refused
REFUSALS = (GroupAuthorizationFailedError, TopicAuthorizationFailedError,
            TransactionalIdAuthorizationFailed, ClusterAuthorizationFailedError)
#: mode's own line after a crash, before it raises the crash's reason again
_CRASH_LINE = "We experienced a crash"


def refused_by_acl(exc: BaseException | None) -> BaseException | None:
    """aiokafka's authorization error that `exc` is or was raised from (Faust's producer
    raises ProducerSendError from it), else None."""
    seen: list[BaseException] = []
    while exc is not None and not any(exc is s for s in seen):
        if isinstance(exc, REFUSALS):
            refused: BaseException = exc
            return refused
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return None


def refusal(config: Config, reason: BaseException | None) -> AuthorizationError | None:
    """The one-line error for a Faust app that crashed of `reason`, where the cluster
    refused it; None for any other reason (or none)."""
    reason = refused_by_acl(reason)
    if isinstance(reason, GroupAuthorizationFailedError):
        return not_authorized(config, ROLE, f"use group {config.sysinfo_app_id()}")
    if isinstance(reason, TopicAuthorizationFailedError):
        names = reason.args[0] if reason.args else None
        if isinstance(names, str) and names:
            names = {names}
        if isinstance(names, (set, frozenset, list, tuple)) and names:
            return not_authorized(config, ROLE, f"use {plural(list(names), 'topic')} "
                                                f"{', '.join(sorted(names))}")
        return not_authorized(config, ROLE, "use one of its topics")
    if isinstance(reason, REFUSALS):
        return not_authorized(config, ROLE, f"do what it needs ({type(reason).__name__})")
    return None


class _QuietRefusals(logging.Filter):
    """Drops the log records of an authorization error (each with its traceback), and
    mode's crash line after one: the replica's last line says what was refused. The
    crash's aftermath (a crashed thread's stop meets its closed event loop) keeps its line
    without a traceback."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and refused_by_acl(record.exc_info[1]) is not None:
            self.refused = True
            return False
        if self.refused:
            record.exc_info, record.exc_text = None, None
        return not (self.refused and _CRASH_LINE in record.getMessage())


@contextmanager
def quiet_refusals() -> Iterator[None]:
    """While it lasts, the root logger's handlers leave out the records of a refusal."""
    quiet = _QuietRefusals()
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)
