"""Moving late tasks: each is issued again where `deadlines` says it would be done first, and
the workers are told to skip the attempt they hold; a task out of attempts fails its items.

The rules for when a task is late and where it goes are `deadlines`'; this is what the
controller writes about it.
"""

from __future__ import annotations

import logging
from collections.abc import Container

from inferstream.config import Config
from inferstream.controller.declines import failed_result
from inferstream.controller.issuing import TaskIssuer
from inferstream.controller.outbox import Outbox
from inferstream.schemas import Codec
from inferstream.schemas.records import Task, TaskControlReason

log = logging.getLogger(__name__)


class Migration:
    """Checks for late tasks at most every `migration_check_s`; none with a slack of 0."""

    def __init__(self, config: Config, codec: Codec, issuer: TaskIssuer) -> None:
        self.config = config
        self.options = config.controller
        self.codec = codec
        self.issuer = issuer
        self.deadlines = issuer.deadlines
        self._checked_ms = 0

    def migrate(self, out: Outbox, now: int, jobs: Container[str]) -> None:
        """Issue the late tasks of `jobs` again elsewhere, telling workers to skip the
        attempt they hold; fail those out of attempts. `now`: the time in ms."""
        if (self.options.migration_slack <= 0 or not len(self.deadlines)
                or now - self._checked_ms < self.options.migration_check_s * 1000):
            return
        self._checked_ms = now
        for late in self.deadlines.late(now):
            task, home = late.outstanding.task, late.outstanding.home
            if task["job_id"] not in jobs:
                continue
            if late.partition is None:
                reason = f"task {task['task_id']} {late.reason}"
                log.warning("job %s: %s: its items fail", task["job_id"], reason)
                out.add(home, out.topics.results, home, task["job_id"].encode(),
                        self.codec.encode("TaskResult", failed_result(task, reason)))
                continue
            self._reissue(task, home, late.partition, late.reason, now, out)

    def _reissue(self, task: Task, home: int, partition: int, reason: str, now: int,
                 out: Outbox) -> None:
        again = Task(**{**task, "attempt": task["attempt"] + 1, "issued_at": now})
        encoded = self.codec.encode("Task", again)
        out.add(home, self.config.task_topic(task["pool"]), partition, task["job_id"].encode(),
                encoded)
        out.control(home, task["job_id"], task["task_id"], again["attempt"],
                    TaskControlReason.MIGRATED)
        self.issuer.track(again, encoded, home, partition, now)
        out.count(home, ("tasks_reissued", task["pool"], "migrated"))
        log.info("job %s task %d %s: re-issued as attempt %d on partition %d", task["job_id"],
                 task["task_id"], reason, again["attempt"], partition)
