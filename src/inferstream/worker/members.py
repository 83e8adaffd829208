"""Many simulated nodes in one process: `inferstream worker --members N`.

Each member is a whole `Worker`: its own worker id (`<id>-<i>`), group member, consumer,
transactional producers, task-control follower, sysinfo publisher and collectors, and its own
model instance. They share the event loop, the imported code and the metrics registry, nothing
else, so N members and N processes make the same group (tests/integration/test_members.py):
a scale study can run 100 nodes where 100 processes of about 600 MB would not fit.

Log lines of a member's tasks begin with `[<worker id>]` (a context variable that the tasks a
member starts inherit).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from inferstream.config import Config

if TYPE_CHECKING:
    from inferstream.serving.metrics import ServingMetrics

Metrics = TypeVar("Metrics", bound="ServingMetrics")

#: The worker id of the member whose task is running (empty outside members mode).
MEMBER: contextvars.ContextVar[str] = contextvars.ContextVar("inferstream_member", default="")


def member_configs(config: Config, base_id: str) -> list[Config]:
    """One Config per member: worker id `<base_id>-<i>`, a static membership id likewise."""
    options = config.worker
    configs = []
    for i in range(options.members):
        instance = f"{options.instance_id}-{i}" if options.instance_id else None
        configs.append(dataclasses.replace(config, worker=dataclasses.replace(
            options, worker_id=f"{base_id}-{i}", instance_id=instance, members=1)))
    return configs


def member_metrics(metrics: Metrics, members: Sequence[Config]) -> list[Metrics]:
    """Each member's own children of the process's `metrics`, whose own series go: the
    process's id (`--worker-id`, else host-pid) is no member of the pool, and showed as a
    worker owning no partition beside the members."""
    each = [metrics.for_worker(member.worker.worker_id) for member in members]
    metrics.drop_own_series()
    return each


class MemberLogFilter(logging.Filter):
    """Puts `[<member>] ` before the message of a record logged by a member's task."""

    def filter(self, record: logging.LogRecord) -> bool:
        member = MEMBER.get()
        if member and not getattr(record, "member", None):
            record.member = member
            record.msg = f"[{member}] {record.msg}"
        return True


def tag_logs() -> None:
    """Tag every handler's records with their member (idempotent)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, MemberLogFilter) for f in handler.filters):
            handler.addFilter(MemberLogFilter())


async def run_members(members: Sequence[Any], on_stop: Callable[[Callable[[], None]], None]
                      ) -> None:
    """Run every member (a `Worker`) to its end, each in a context naming it; `on_stop`
    receives the thread-safe stop of them all (SIGTERM: every member drains)."""
    loop = asyncio.get_running_loop()

    def stop_all() -> None:
        for member in members:
            member.request_stop()

    def stop_soon() -> None:  # from the signal watcher's thread
        loop.call_soon_threadsafe(stop_all)

    on_stop(stop_soon)
    runs = []
    for member in members:
        context = contextvars.copy_context()
        context.run(MEMBER.set, member.worker_id)
        runs.append(loop.create_task(member.run(), context=context))
    await asyncio.gather(*runs)
