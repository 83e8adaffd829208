"""`TaskControls`: the compacted task-control topic, followed into what a worker may skip.

The controller writes an entry when a job finishes (completed, failed, cancelled: key
`<job>`) and when it re-issues a task elsewhere (migrated: key `<job>/<task>`, with the
attempt now current). A worker asks `skip_reason(task)` for every task record it takes;
a task of a finished job, or an attempt that another has superseded, is committed with no
result instead of being run. The controller drops any result of those anyway (the first
committed result of a task wins), so a worker that has not read an entry yet only wastes
the work. Entries older than `retain_s` are forgotten, so the table stays bounded.
"""

from __future__ import annotations

import logging
import threading

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.follower import TopicFollower
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import Task, TaskControl, now_ms, read_record

log = logging.getLogger(__name__)

#: Entries applied between two prunes of the forgotten ones.
PRUNE_EVERY = 1000


class TaskControls(TopicFollower):
    def __init__(self, config: Config, clients: KafkaClients = REAL_CLIENTS,
                 codec: Codec | None = None, retain_s: float = 24 * 3600.0) -> None:
        super().__init__(config, config.topic("task-control"), "task-control", clients)
        self.codec = codec or Codec.for_config(config)
        self.retain_s = retain_s
        self._jobs: dict[str, TaskControl] = {}
        self._tasks: dict[tuple[str, int], TaskControl] = {}
        self._lock = threading.Lock()
        self._applied = 0

    def skip_reason(self, task: Task) -> str | None:
        """Why `task` need not run (its job finished, or a later attempt exists); None
        when it must."""
        with self._lock:
            job = self._jobs.get(task["job_id"])
            current = self._tasks.get((task["job_id"], task["task_id"]))
        if job is not None:
            return f"job {task['job_id']} {job['reason'].lower()}"
        if current is not None and task["attempt"] < current["attempt"]:
            return (f"task {task['job_id']}/{task['task_id']} attempt {task['attempt']} "
                    f"superseded by attempt {current['attempt']}")
        return None

    def job_ended(self, job_id: str) -> str | None:
        """Why no answer of job `job_id` is wanted any longer (it completed, failed or was
        cancelled); None while it runs."""
        with self._lock:
            job = self._jobs.get(job_id)
        return None if job is None else f"job {job_id} {job['reason'].lower()}"

    def apply(self, key: bytes | None, value: bytes) -> None:
        try:
            control = read_record(self.codec, value, TaskControl)
        except (SchemaError, ValueError) as exc:
            log.warning("undecodable task-control record key=%r: %s", key, exc)
            return
        with self._lock:
            if control["task_id"] < 0:
                self._jobs[control["job_id"]] = control
            else:
                task = (control["job_id"], control["task_id"])
                known = self._tasks.get(task)
                if known is None or known["attempt"] < control["attempt"]:
                    self._tasks[task] = control
            self._applied += 1
            if self._applied % PRUNE_EVERY == 0:
                self._prune()

    def _prune(self) -> None:
        horizon = now_ms() - self.retain_s * 1000
        self._jobs = {k: c for k, c in self._jobs.items() if c["at"] >= horizon}
        self._tasks = {k: c for k, c in self._tasks.items() if c["at"] >= horizon}
