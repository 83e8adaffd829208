"""`StallWatch`: what a client waiting for a job says when nothing happens.

A wait that shows nothing looks like a hang. When a job has had no event for `quiet_s`, the
watch says what it waits for, once per stall: a controller to accept the job, a worker of its
model (the controller's PROGRESS events say so: one is starting, or none is), or a live
worker in the job's pool. What the controller says the job waits for is told at once too, each
time it changes. Waiting goes on; only the caller's timeout ends it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from inferstream.schemas.records import JobEventType

if TYPE_CHECKING:
    from inferstream.client.client import JobStatus

log = logging.getLogger(__name__)

#: How long a job may show no event before a waiting client says why it may be stuck.
QUIET_S = 10.0


class StallWatch:
    """Fed every event of a job (`seen`) and every quiet moment (`idle`); `notice` gets a
    line to show the user. `live_workers()` counts the pool's group members (None when
    the group cannot be described)."""

    def __init__(self, job_id: str, pool: str, model: str | None,
                 live_workers: Callable[[], int | None], notice: Callable[[str], None],
                 quiet_s: float = QUIET_S) -> None:
        self.job_id, self.pool, self.model = job_id, pool, model
        self.live_workers = live_workers
        self.notice = notice
        self.quiet_s = quiet_s
        self._accepted = False
        self._done_items = 0
        #: what the job's last PROGRESS event says it waits for (the controller's words)
        self._waiting: str | None = None
        self._since = time.monotonic()
        self._said = False

    def seen(self, status: JobStatus) -> None:
        """An event of the job arrived: it moved, so a new stall may be told again; what it
        waits for now, if the controller says and said otherwise before, is told at once."""
        self._accepted = True
        self._done_items = status.done_items
        self.model = status.model or self.model
        self._since = time.monotonic()
        self._said = False
        waiting = status.reason if status.state == JobEventType.PROGRESS else None
        if waiting is not None and waiting != self._waiting:
            self.notice(f"job {self.job_id} is {waiting}")
        self._waiting = waiting

    def idle(self) -> None:
        """Nothing arrived just now: after `quiet_s` of that, say what the job waits for."""
        quiet_s = time.monotonic() - self._since
        if self._said or quiet_s < self.quiet_s:
            return
        message = self._waiting_for(quiet_s)
        if message is not None:
            self._said = True
            self.notice(message)

    def _waiting_for(self, quiet_s: float) -> str | None:
        if not self._accepted:
            return (f"no controller has accepted job {self.job_id} after {quiet_s:.0f} s: "
                    "is `inferstream controller` running, with the same --topic-prefix?")
        if self._waiting is not None:
            return f"job {self.job_id} has made no progress for {quiet_s:.0f} s: {self._waiting}"
        try:
            workers = self.live_workers()
        except Exception as exc:  # only a hint: never let it end the wait
            log.debug("cannot count the workers of pool %s: %r", self.pool, exc)
            return None
        if workers != 0:
            return None  # busy or loading a model, or unknown: nothing useful to say
        model = self.model or "MODEL"
        start = f"start one with `inferstream worker --pool {self.pool} --model {model}`"
        if self._done_items == 0:
            return (f"no worker in pool {self.pool!r} has taken a task of job {self.job_id} "
                    f"after {quiet_s:.0f} s: the pool has no live worker; {start}")
        return (f"job {self.job_id} has made no progress for {quiet_s:.0f} s: no worker in "
                f"pool {self.pool!r} is alive; {start}")
