"""Bounded aiokafka stops: the one place that works around aiokafka clients whose `stop()`
misbehaves while the cluster is away, at a process's shutdown.

* A consumer's stop may end in a CancelledError of its own: its fetcher's `close` cancels the
  fetch requests under way and awaits each, and one in its retry back-off after a failed
  fetch (`aiokafka/consumer/fetcher.py`, `_proc_fetch_request`) ends cancelled
  (https://github.com/aio-libs/aiokafka/issues/647, still in aiokafka 0.14). Faust's consumer
  thread stops its consumer the same way (`sysinfo.faust_stop`).
* A stop may wait for the cluster: a producer's for its buffered records, a consumer's for
  its group coordinator (https://github.com/aio-libs/aiokafka/issues/659,
  https://github.com/aio-libs/aiokafka/issues/1013).

Either would turn a graceful stop into a traceback and exit 1 (and, for a supervised role, a
restart). A consumer that could not leave its group is removed from it by the group's session
timeout; a producer's unsent records were not the process's to keep (its commits come first).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from aiokafka.errors import KafkaError

log = logging.getLogger(__name__)


async def stop_client(stop: Awaitable[object], timeout_s: float) -> BaseException | None:
    """Await `stop` (a client's `stop()`) for at most `timeout_s`: None once it stopped, else
    what ended it for the caller to log: TimeoutError (cancelled then), a KafkaError or
    OSError, or the stop's own CancelledError. Cancelling the caller cancels the stop too;
    any other error propagates (a bug, not the cluster)."""
    task = asyncio.ensure_future(stop)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_retrieved)
        return TimeoutError(f"no answer within {timeout_s:g}s")
    if task.cancelled():
        return asyncio.CancelledError("its stop ended cancelled, aiokafka#647")
    error = task.exception()
    if error is None or isinstance(error, KafkaError | OSError | TimeoutError):
        return error
    raise error


async def stop_or_warn(stop: Awaitable[object], timeout_s: float, what: str) -> bool:
    """`stop_client`, and one WARNING starting with `what` ("group G not left: ...") where the
    client did not stop; whether it stopped."""
    error = await stop_client(stop, timeout_s)
    if error is None:
        return True
    log.warning("%s: the cluster did not answer (%s)", what, str(error) or repr(error))
    return False


def _retrieved(task: asyncio.Future[object]) -> None:
    """A stop given up on ends later: its outcome is nobody's, and no error to log at exit."""
    if not task.cancelled():
        task.exception()
