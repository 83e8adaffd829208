"""Task deadlines and migration: a task that its worker is late with is issued again, elsewhere.

When the controller issues a task it sets the task's deadline: the work queued before it on
the same worker (the items of this controller's unfinished tasks on that worker's partitions,
its own included) at the worker's per-item time from the policy (its capacity; the pool's
median when the worker is unknown), times `migration_slack`, plus `migration_floor_s`. A task
past its deadline, or whose worker the policy marks unhealthy, is re-issued with attempt + 1
on a partition of the healthy worker of its model that would finish it first; a task that has
used `max_attempts` fails its items with the reason instead. The first committed result of a
task wins (`JobState.record_result`); later ones are dropped and counted. Without a policy
for the pool (sysinfo not running) nothing has a deadline: there is no honest estimate.

Tasks that an earlier owner of the job's partition issued are not tracked by a replica that
takes the job over (it knows which are outstanding, not their items or partitions).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from inferstream.schemas.records import Task, serves
from inferstream.streams.controller.declines import PoolView
from inferstream.streams.policy.assignment import WorkerPolicy

log = logging.getLogger(__name__)

#: Seconds a description of a pool's workers is used for.
MEMBERS_TTL_S = 2.0

#: The policy's workers of a pool (share, health, capacity), None without a policy.
PoolPolicy = Callable[[str], dict[str, WorkerPolicy] | None]


def no_pool_policy(_pool: str) -> dict[str, WorkerPolicy] | None:
    return None


@dataclass
class Outstanding:
    """An issued task this controller waits for."""

    task: Task
    encoded: bytes
    home: int
    partition: int
    owner: str | None
    deadline_ms: int | None

    @property
    def key(self) -> tuple[str, int]:
        return self.task["job_id"], self.task["task_id"]

    @property
    def items(self) -> int:
        return len(self.task["items"])


@dataclass(frozen=True)
class Late:
    """A task to issue again (on `partition`) or, with `partition` None, to fail."""

    outstanding: Outstanding
    reason: str
    partition: int | None


class Deadlines:
    """The outstanding tasks of the jobs this controller owns, by (job id, task id)."""

    def __init__(self, pools: PoolView, policy: PoolPolicy, group_of: Callable[[str], str],
                 slack: float, floor_s: float, max_attempts: int) -> None:
        self.pools = pools
        self.policy = policy
        self.group_of = group_of
        self.slack = slack
        self.floor_s = floor_s
        self.max_attempts = max_attempts
        self._tasks: dict[tuple[str, int], Outstanding] = {}
        #: items outstanding by (pool, worker) and by (pool, partition)
        self._by_owner: dict[tuple[str, str | None], int] = {}
        self._by_partition: dict[tuple[str, int], int] = {}
        self._member_cache: dict[str, tuple[float, dict[str, list[int]] | None]] = {}
        #: results dropped because their task had been done already (a late attempt)
        self.dropped_late = 0

    def __len__(self) -> int:
        return len(self._tasks)

    def issued(self, task: Task, encoded: bytes, home: int, partition: int,
               now_ms: int) -> None:
        owners = self._owners(task["pool"])
        owner = owners.get(partition) if owners else None
        entry = Outstanding(task, encoded, home, partition, owner, None)
        self._add(entry)
        entry.deadline_ms = self._deadline(entry, now_ms)

    def done(self, job_id: str, task_id: int) -> None:
        entry = self._tasks.get((job_id, task_id))
        if entry is not None:
            self._remove(entry)

    def forget_job(self, job_id: str) -> None:
        for entry in [t for t in self._tasks.values() if t.task["job_id"] == job_id]:
            self._remove(entry)

    def forget_homes(self, homes: set[int]) -> None:
        for entry in [t for t in self._tasks.values() if t.home in homes]:
            self._remove(entry)

    def _add(self, entry: Outstanding) -> None:
        self._remove(entry)
        self._tasks[entry.key] = entry
        pool = entry.task["pool"]
        owner, part = (pool, entry.owner), (pool, entry.partition)
        self._by_owner[owner] = self._by_owner.get(owner, 0) + entry.items
        self._by_partition[part] = self._by_partition.get(part, 0) + entry.items

    def _move(self, entry: Outstanding, owner: str) -> None:
        self._remove(entry)
        entry.owner = owner
        self._add(entry)

    def _remove(self, entry: Outstanding) -> None:
        known = self._tasks.pop(entry.key, None)
        if known is None:
            return
        pool = known.task["pool"]
        self._by_owner[(pool, known.owner)] -= known.items
        self._by_partition[(pool, known.partition)] -= known.items

    def late(self, now_ms: int) -> list[Late]:
        """Tasks past their deadline or on an unhealthy worker, with where each goes next;
        they leave the table (the caller issues them again through `issued`)."""
        found = []
        unhealthy = self._unhealthy()
        owners: dict[str, dict[int, str] | None] = {}
        for entry in list(self._tasks.values()):
            pool = entry.task["pool"]
            if entry.owner is not None and entry.owner in unhealthy.get(pool, ()):
                if pool not in owners:
                    owners[pool] = self._owners(pool)
                now_owner = (owners[pool] or {}).get(entry.partition)
                if now_owner is not None and now_owner not in unhealthy[pool]:
                    self._move(entry, now_owner)  # the group moved the partition already
                    continue
            if entry.owner is not None and entry.owner in unhealthy.get(pool, ()):
                reason = f"worker {entry.owner} is not healthy"
            elif entry.deadline_ms is not None and now_ms > entry.deadline_ms:
                reason = (f"past its deadline on {entry.owner or 'its worker'} "
                          f"({(now_ms - entry.deadline_ms) / 1000:.1f}s late)")
            else:
                continue
            self._remove(entry)
            if entry.task["attempt"] >= self.max_attempts:
                found.append(Late(entry, f"{reason}, and it has used its {self.max_attempts} "
                                  "attempts", None))
                continue
            target = self._target(entry)
            if target is None:  # nowhere better: keep waiting on the same worker
                self._add(entry)
                entry.deadline_ms = self._deadline(entry, now_ms)
                continue
            found.append(Late(entry, reason, target))
        return found

    # -- estimates --------------------------------------------------------------------------
    def _members(self, pool: str) -> dict[str, list[int]] | None:
        """The pool's workers and their partitions, asked at most every `MEMBERS_TTL_S`
        (a cache of its own: the decline path's must not answer from an early, empty one)."""
        now = time.monotonic()
        cached = self._member_cache.get(pool)
        if cached is not None and now - cached[0] < MEMBERS_TTL_S:
            return cached[1]
        try:
            found: dict[str, list[int]] | None = self.pools.describe(self.group_of(pool))
        except Exception as exc:  # a broker restarting: no owners known for now
            log.debug("cannot describe the workers of pool %s: %r", pool, exc)
            found = None
        self._member_cache[pool] = (now, found)
        return found

    def _owners(self, pool: str) -> dict[int, str] | None:
        members = self._members(pool)
        if members is None:
            return None
        return {p: worker for worker, parts in members.items() for p in parts}

    def _per_item_s(self, pool: str, worker: str | None) -> float | None:
        workers = self.policy(pool)
        if not workers:
            return None
        known = workers.get(worker) if worker is not None else None
        if known is not None and known.capacity_items_per_s > 0:
            return 1.0 / known.capacity_items_per_s
        rates = [w.capacity_items_per_s for w in workers.values() if w.capacity_items_per_s > 0]
        return 1.0 / statistics.median(rates) if rates else None

    def _backlog(self, pool: str, worker: str | None, partition: int) -> int:
        """Items of the outstanding tasks queued on `worker` (or on `partition` when the
        worker is unknown)."""
        if worker is not None:
            return self._by_owner.get((pool, worker), 0)
        return self._by_partition.get((pool, partition), 0)

    def _deadline(self, entry: Outstanding, now_ms: int) -> int | None:
        pool = entry.task["pool"]
        per_item = self._per_item_s(pool, entry.owner)
        if per_item is None:
            return None
        work_s = self._backlog(pool, entry.owner, entry.partition) * per_item
        return now_ms + int((work_s * self.slack + self.floor_s) * 1000)

    def _unhealthy(self) -> dict[str, set[str]]:
        pools = {t.task["pool"] for t in self._tasks.values()}
        found = {}
        for pool in pools:
            workers = self.policy(pool) or {}
            found[pool] = {w for w, p in workers.items() if not p.healthy}
        return found

    def _target(self, entry: Outstanding) -> int | None:
        """A partition of the healthy worker other than the late one that serves the task's
        model and would finish it first (its backlog at its per-item time)."""
        pool = entry.task["pool"]
        members = self._members(pool)
        workers = self.policy(pool) or {}
        if not members:
            return None
        best: tuple[float, int] | None = None
        for worker, parts in sorted(members.items()):
            policy = workers.get(worker)
            if worker == entry.owner or not parts or (policy is not None and not policy.healthy):
                continue
            if not self._may_serve(worker, entry.task["model"]):
                continue
            per_item = self._per_item_s(pool, worker) or 1.0
            finish = (self._backlog(pool, worker, -1) + entry.items) * per_item
            partition = sorted(parts)[entry.task["task_id"] % len(parts)]
            if best is None or finish < best[0]:
                best = (finish, partition)
        return None if best is None else best[1]

    def _may_serve(self, worker: str, model: str) -> bool:
        if model in self.pools.declined.get(worker, set()):
            return False
        served = self.pools.served.get(worker)
        return served is None or any(serves(m, model) for m in served)
