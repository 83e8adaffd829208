"""Where a declined task goes next: to a live worker of its pool that may serve its model.

A worker answers a task whose model it does not serve with a TaskDeclined, naming the models
it serves. The controller remembers which worker declined which model (and version: a worker
that declined version 1 of a model may still serve version 2; see `model_ref`), asks the pool's
consumer group which workers are alive and which task partitions each owns (cached for
`ttl_s`), and re-issues the task on a partition of a worker that has not declined the model,
preferring one that has served it. When every live worker has declined it, the task waits for
a worker of its model (`waiting`), and only then its items fail with the reason. Declines are
remembered in memory only: a new replica learns them again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from inferstream.config import Config
from inferstream.kafka.clients import Outgoing
from inferstream.kafka.settings import results_partition
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    Task,
    TaskResult,
    encode_result,
    error_items,
    now_ms,
    serves,
    split_ref,
    task_ref,
)

log = logging.getLogger(__name__)


@dataclass
class PoolView:
    """What the controller knows of the workers of each pool: the models each declined and
    served, as `model_ref` references (with their versions)."""

    #: describes a consumer group: (group id) -> {worker id: [task partitions]}, or raises
    describe: Callable[[str], dict[str, list[int]]]
    ttl_s: float = 2.0
    declined: dict[str, set[str]] = field(default_factory=dict)
    served: dict[str, set[str]] = field(default_factory=dict)
    #: when each worker last answered a task (a result or a decline), in ms
    seen: dict[str, int] = field(default_factory=dict)
    _cache: dict[str, tuple[float, dict[str, list[int]] | None]] = field(default_factory=dict)

    def record_decline(self, worker: str, model: str, served_models: list[str]) -> None:
        self.declined.setdefault(worker, set()).add(model)
        self.served[worker] = set(served_models)
        self.seen[worker] = now_ms()

    def record_result(self, worker: str, model: str) -> None:
        self.served.setdefault(worker, set()).add(model)
        self.declined.get(worker, set()).discard(model)
        self.seen[worker] = now_ms()

    def forget_silent(self, keep: set[str | None], before_ms: int) -> list[str]:
        """Forget the workers not heard from since before `before_ms` but those of `keep`
        (gone: `Deadlines.forget_gone`); returns them."""
        gone = [w for w, at in self.seen.items() if at < before_ms and w not in keep]
        for worker in gone:
            self.declined.pop(worker, None)
            self.served.pop(worker, None)
            self.seen.pop(worker, None)
        return gone

    def members(self, group: str) -> dict[str, list[int]] | None:
        """Live workers of `group` and their partitions; None when the group cannot be
        described right now."""
        now = time.monotonic()
        cached = self._cache.get(group)
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        try:
            found: dict[str, list[int]] | None = self.describe(group)
        except Exception as exc:  # a broker restarting: decide without membership
            log.warning("cannot describe group %s: %r", group, exc)
            found = None
        self._cache[group] = (now, found)
        return found

    def target(self, group: str, model: str, task_id: int, attempt: int,
               partitions: int) -> int | None:
        """The task partition to re-issue a declined task on, or None when no live worker
        of the pool may serve `model`."""
        members = self.members(group)
        if members is None:  # unknown: walk the partitions, give up after each was tried twice
            return None if attempt > 2 * partitions else (task_id + attempt) % partitions
        willing = sorted(w for w, owned in members.items()
                         if owned and model not in self.declined.get(w, set()))
        proven = [w for w in willing if any(serves(m, model) for m in self.served.get(w, ()))]
        chosen = proven or willing
        if not chosen:
            return None
        owned = sorted(members[chosen[(task_id + attempt) % len(chosen)]])
        return owned[(task_id + attempt) % len(owned)]

    def describe_pool(self, group: str) -> str:
        """The pool's workers and the models they serve, for an error message."""
        members = self.members(group) or {}
        if not members:
            return "no live worker"
        return "; ".join(f"{w} serves {', '.join(sorted(self.served.get(w, set()))) or '?'}"
                         for w in sorted(members))


def model_words(ref: str) -> str:
    """A model reference in a message: `model 'NAME'` or `model 'NAME' version N`."""
    name, version = split_ref(ref)
    return f"model {name!r}" + ("" if version is None else f" version {version}")


def failed_result(task: Task, reason: str) -> TaskResult:
    """The outcome of a task no live worker will run: every item an error with `reason` (in
    full on the first item only, where repeating it would not fit in one record)."""
    now = now_ms()
    return TaskResult(job_id=task["job_id"], task_id=task["task_id"], attempt=task["attempt"],
                      worker="controller", model=task["model"], model_version=None,
                      items=error_items(task["items"], reason),
                      started_at=now, finished_at=now, decode_seconds=0.0,
                      inference_seconds=0.0)


def target_of(view: PoolView, config: Config, task: Task,
              partitions: Callable[[str], int]) -> int | None:
    """The task partition to issue a declined `task` again on (as its next attempt), or None
    when no live worker of its pool may serve its model."""
    return view.target(config.worker_group(task["pool"]), task_ref(task), task["task_id"],
                       task["attempt"] + 1, partitions(config.task_topic(task["pool"])))


def unserved(view: PoolView, config: Config, codec: Codec, task: Task,
             partitions: Callable[[str], int]) -> Outgoing:
    """The TaskResult that fails the items of `task`, which no live worker of its pool
    serves, with the reason (the pool's workers and their models)."""
    reason = (f"no live worker of pool {task['pool']!r} serves {model_words(task_ref(task))} "
              f"({view.describe_pool(config.worker_group(task['pool']))})")
    log.warning("job %s task %d fails: %s", task["job_id"], task["task_id"], reason)
    results = config.topic("results")
    failed = encode_result(codec, failed_result(task, reason))
    return Outgoing(results, results_partition(task, partitions(results)),
                    task["job_id"].encode(), failed)
