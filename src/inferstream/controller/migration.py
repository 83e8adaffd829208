"""Moving late tasks: each is issued again where `deadlines` says it would be done first, and
the workers are told to skip the attempt they hold; a task out of attempts fails its items.

The rules for when a task is late and where it goes are `deadlines`'; this is what the
controller writes about it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from inferstream.config import Config
from inferstream.controller.declines import failed_result
from inferstream.controller.issuing import TaskIssuer
from inferstream.controller.ledger import JobState
from inferstream.controller.outbox import Outbox
from inferstream.controller.waiting import ModelWaits
from inferstream.schemas import Codec
from inferstream.schemas.records import Task, TaskControlReason, encode_result

log = logging.getLogger(__name__)


class Migration:
    """Checks for late tasks at most every `migration_check_s`; none with a slack of 0."""

    def __init__(self, config: Config, codec: Codec, issuer: TaskIssuer,
                 waits: ModelWaits) -> None:
        self.config = config
        self.waits = waits
        self.options = config.controller
        self.codec = codec
        self.issuer = issuer
        self.deadlines = issuer.deadlines
        self._checked_ms = 0

    def migrate(self, out: Outbox, now: int, jobs: Mapping[str, JobState]) -> None:
        """Issue the late tasks of `jobs` again elsewhere, telling workers to skip the
        attempt they hold; fail those out of attempts. `now`: the time in ms."""
        if (self.options.migration_slack <= 0 or not len(self.deadlines)
                or now - self._checked_ms < self.options.migration_check_s * 1000):
            return
        self._checked_ms = now
        for late in self.deadlines.late(now):
            task, home = late.outstanding.task, late.outstanding.home
            state = jobs.get(task["job_id"])
            if state is None:
                continue
            if late.unplaced:  # adopted from an earlier owner: placed as if declined
                again = self.waits.place(state, task, out, now, why=late.reason,
                                         kind="migrated")
                if again is not None:
                    out.control(home, task["job_id"], task["task_id"], again["attempt"],
                                TaskControlReason.MIGRATED)
                continue
            if late.partition is None:
                self._fail(state, task, home, late.reason, out)
                continue
            again = self.issuer.again(state, task, late.partition, out, now, why=late.reason,
                                      kind="migrated")
            out.control(home, task["job_id"], task["task_id"], again["attempt"],
                        TaskControlReason.MIGRATED)

    def _fail(self, state: JobState, task: Task, home: int, why: str, out: Outbox) -> None:
        """Fail the items of `task`, out of attempts, as an attempt of its own: its late
        worker may still commit the attempt it holds (its job goes on), and the results
        topic holds no (job, task, attempt) twice; the workers skip that one if not begun.
        The job remembers it (`JobState.failed`): a decline of the late attempt, read before
        the failure, issued the failure's attempt as a task too."""
        reason = f"task {task['task_id']} {why}"
        log.warning("job %s: %s: its items fail", task["job_id"], reason)
        failed = failed_result(Task(**{**task, "attempt": task["attempt"] + 1}), reason)
        out.add(home, out.topics.results, home, task["job_id"].encode(),
                encode_result(self.codec, failed))
        out.control(home, task["job_id"], task["task_id"], failed["attempt"],
                    TaskControlReason.MIGRATED)
        state.failed[task["task_id"]] = failed["attempt"]
