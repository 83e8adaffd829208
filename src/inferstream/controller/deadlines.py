"""Task deadlines and migration: a task that its worker is late with is issued again, elsewhere.

When the controller issues a task it notes the work queued before it on the same worker (the
items of this controller's unfinished tasks on that worker's partitions, its own included)
and the worker's seconds per item of the task's model: from the policy's rate of that model on
the worker (its capacity where the policy has no figure of the model), else from the model
time per item of the worker's own results of that model, else the pool's median for the
model. The task is late once that work at that speed, times `migration_slack`, plus
`migration_floor_s`, has passed; the speed is frozen when first known, so a worker that slows
down does not stretch the deadlines of what it holds. It is also late when the worker that
owns its partition now shows, in the median of its recent results, `migration_slack` times its
peers' (or, where none has results, the seconds per item the task was given): a worker slowed
down, or a slower one took the partition over. A late task is re-issued with attempt + 1 on a
partition of the healthy worker that serves its model (its results or the policy say so;
within the model's range of partitions, where the pool has ranges) and would finish it first,
counting the tasks re-issued to it in the same pass, where `speculation` says that is worth it
(a task of an unhealthy worker: at once); a task that has used `max_attempts` fails its items
with the reason instead. The first committed result of a task wins (`JobState.record_result`);
later ones are dropped and counted.

A replica that takes a job over knows from the ledger which of its tasks are outstanding, not
their partitions: `adopted` tracks them (their items cut again by the issuer) as if the pool's
live workers held the outstanding items of the pool evenly, at the pool's median speed, and a
late one is issued again above the highest attempt the ledger recorded for its job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from inferstream.controller.declines import PoolView
from inferstream.controller.outstanding import Late, Outstanding
from inferstream.controller.speculation import LOST, OVERDUE, SLOW, Queues, Speculation, Target
from inferstream.policy.view import (
    PolicyView,
    WorkerPolicy,
    median_rate,
    model_range,
)
from inferstream.schemas.records import Task, now_ms, serves, task_ref

log = logging.getLogger(__name__)

#: Seconds a description of a pool's workers is used for.
MEMBERS_TTL_S = 2.0
#: The partition of a task that an earlier owner of its job issued: not known here.
UNKNOWN_PARTITION = -1
#: A worker silent this long (ms), no member of a pool now and holding none of its tasks, is
#: forgotten (`forget_gone`), as the workers' announcements forget it; checked every minute.
#: Each worker process has an id of its own (host-pid): a controller that ran for months
#: kept the figures of every worker it ever heard from.
FORGET_WORKERS_AFTER_MS = 3_600_000
FORGET_CHECK_MS = 60_000

class Deadlines:
    """The outstanding tasks of the jobs this controller owns, by (job id, task id)."""

    def __init__(self, pools: PoolView, policy: PolicyView, group_of: Callable[[str], str],
                 slack: float, floor_s: float, max_attempts: int, *,
                 speculation_floor_s: float, speculation_cap: float,
                 clock: Callable[[], int] = now_ms) -> None:
        self.pools = pools
        self.policy = policy
        self.group_of = group_of
        self.slack = slack
        self.floor_s = floor_s
        self.max_attempts = max_attempts
        self.speculation = Speculation(speculation_floor_s, speculation_cap, clock)
        self._tasks: dict[tuple[str, int], Outstanding] = {}
        #: items outstanding by (pool, worker) and by (pool, partition)
        self._by_owner: dict[tuple[str, str | None], int] = {}
        self._by_partition: dict[tuple[str, int], int] = {}
        self._member_cache: dict[str, tuple[float, dict[str, list[int]] | None]] = {}
        self._pass_candidates: dict[tuple[str, str], list[tuple[str, list[int], float]]] = {}
        self._forgot_ms = 0

    def __len__(self) -> int:
        return len(self._tasks)

    def issued(self, task: Task, home: int, partition: int, now_ms: int) -> None:
        owner = (_owners(self._members(task["pool"])) or {}).get(partition)
        entry = Outstanding(task, home, partition, owner, now_ms)
        self._add(entry)
        entry.backlog_items = self._backlog(task["pool"], owner, partition)
        entry.per_item_s = self._per_item_s(task["pool"], owner, task_ref(task))

    def adopted(self, tasks: list[Task], home: int, now_ms: int) -> None:
        """Tasks that an earlier owner of their job issued, on partitions not known here:
        each waits as if the pool's live workers shared the items of all such tasks of the
        pool evenly, at the pool's median speed."""
        entries = [Outstanding(task, home, UNKNOWN_PARTITION, None, now_ms) for task in tasks]
        for entry in entries:
            self._add(entry)
        for entry in entries:
            pool = entry.task["pool"]
            workers = len(self._members(pool) or ()) or 1
            shared = -(-self._by_partition[(pool, UNKNOWN_PARTITION)] // workers)
            entry.backlog_items = max(entry.items, shared)
            entry.per_item_s = self._per_item_s(pool, None, task_ref(entry.task))

    def done(self, job_id: str, task_id: int) -> None:
        entry = self._tasks.get((job_id, task_id))
        self.speculation.copies.discard((job_id, task_id))
        if entry is not None:
            self._remove(entry)

    def forget_job(self, job_id: str) -> None:
        for entry in [t for t in self._tasks.values() if t.task["job_id"] == job_id]:
            self.done(*entry.key)

    def forget_homes(self, homes: set[int]) -> None:
        for entry in [t for t in self._tasks.values() if t.home in homes]:
            self.done(*entry.key)

    def forget_gone(self, now_ms: int) -> None:
        """Forget the workers gone (`FORGET_WORKERS_AFTER_MS`), every `FORGET_CHECK_MS`."""
        if now_ms - self._forgot_ms < FORGET_CHECK_MS:
            return
        self._forgot_ms = now_ms
        keep = {t.owner for t in self._tasks.values()}.union(
            *(self._members(pool) or () for pool in list(self._member_cache)))
        for worker in self.pools.forget_silent(keep, now_ms - FORGET_WORKERS_AFTER_MS):
            self.speculation.forget(worker)
        self._by_owner = {k: n for k, n in self._by_owner.items() if n or k[1] in keep}

    def _add(self, entry: Outstanding) -> None:
        self._remove(entry)
        self._tasks[entry.key] = entry
        pool = entry.task["pool"]
        owner, part = (pool, entry.owner), (pool, entry.partition)
        self._by_owner[owner] = self._by_owner.get(owner, 0) + entry.items
        self._by_partition[part] = self._by_partition.get(part, 0) + entry.items

    def attempt(self, job_id: str, task_id: int) -> int | None:
        """The attempt of the task issued here that is waited for; None: none is known."""
        entry = self._tasks.get((job_id, task_id))
        return entry.task["attempt"] if entry and entry.partition != UNKNOWN_PARTITION else None

    def _remove(self, entry: Outstanding) -> None:
        known = self._tasks.pop(entry.key, None)
        if known is None:
            return
        pool = known.task["pool"]
        self._by_owner[(pool, known.owner)] -= known.items
        self._by_partition[(pool, known.partition)] -= known.items

    def late(self, now_ms: int) -> list[Late]:
        """Tasks that are late, with where each goes next; they leave the table (the caller
        issues them again through `issued`). Each task is first put with the worker that
        owns its partition now (the group may have moved it)."""
        found = []
        #: items re-issued to each worker in this pass, not in its backlog yet: without
        #: them every late task of a pass went to the one worker that looked idlest
        planned: dict[str, int] = {}
        unhealthy = self._unhealthy()
        self.speculation.begin()
        self._follow_owners()
        queued = Queues(self._tasks.values())
        held = dict(self.speculation.copies.held())
        self._pass_candidates.clear()
        for entry in list(self._tasks.values()):
            verdict = self._lateness(entry, unhealthy.get(entry.task["pool"], set()), now_ms)
            if verdict is None:
                continue
            reason, rule = verdict
            if entry.task["attempt"] >= self.max_attempts:
                self.done(*entry.key)
                found.append(Late(entry, f"{reason}, and it has used its {self.max_attempts} "
                                  "attempts", None))
                continue
            target = self._target(entry, planned)
            worth = ("", False) if target is None or rule == LOST else self.speculation.worth(
                entry, rule, now_ms, target, queued.get(entry.key), held,
                sum(map(len, (self._members(entry.task["pool"]) or {}).values())))
            if worth is None:  # not sooner elsewhere by the floor, or the cap is reached
                continue
            late = self._reissue(entry, reason + worth[0], target, now_ms)
            if late is None:
                continue
            if worth[1]:  # a copy of a task its worker may be running
                self.speculation.copies.add(entry.key, entry.task["pool"])
            if target is not None:
                planned[target.worker] = planned.get(target.worker, 0) + entry.items
            found.append(late)
        return found

    def _reissue(self, entry: Outstanding, reason: str, target: Target | None,
                 now_ms: int) -> Late | None:
        """`entry` to `target`'s partition, else placed (adopted) or waited for anew (None)."""
        self._remove(entry)
        if target is None and entry.owner is not None:  # nowhere better: wait on it anew
            self._add(entry)
            entry.issued_ms = now_ms
            entry.per_item_s = self._per_item_s(entry.task["pool"], entry.owner,
                                                task_ref(entry.task))
            return None
        self.speculation.copies.discard(entry.key)
        return Late(entry, reason, target.partition if target else None, unplaced=not target)

    def _follow_owners(self) -> None:
        pools = {t.task["pool"] for t in self._tasks.values()}
        owners = {pool: _owners(self._members(pool)) for pool in pools}
        for entry in list(self._tasks.values()):
            now_owner = (owners[entry.task["pool"]] or {}).get(entry.partition)
            if now_owner is not None and now_owner != entry.owner:
                self._remove(entry)
                entry.owner = now_owner
                self._add(entry)

    def _lateness(self, entry: Outstanding, unhealthy: set[str],
                  now_ms: int) -> tuple[str, str] | None:
        """Why `entry` is late and by which rule (see `speculation`): its worker is unhealthy
        (`LOST`), runs `slack` times slower than its peers (`SLOW`), or the deadline passed
        (`OVERDUE`; `LOST` where its worker is unknown)."""
        if entry.owner is not None and entry.owner in unhealthy:
            return f"worker {entry.owner} is not healthy", LOST
        model = task_ref(entry.task)
        if entry.per_item_s is None:  # no estimate when it was issued: the first one
            entry.per_item_s = self._per_item_s(entry.task["pool"], entry.owner, model)
        slow = self.speculation.slow(entry.owner, model, entry.per_item_s, self.slack,
                                     self._members(entry.task["pool"]), now_ms)
        if slow is not None:
            return f"worker {entry.owner} {slow}", SLOW
        deadline = entry.deadline_ms(self.slack, self.floor_s)
        if deadline is None and entry.owner is None:
            # Adopted with no speed known (no policy, no result yet): the task may be held
            # for a model no live worker serves, which no result will ever answer.
            deadline = entry.issued_ms + int(self.floor_s * max(self.slack, 1.0) * 1000)
        if deadline is None or now_ms <= deadline:
            return None
        return (f"past its deadline on {entry.owner or 'its worker'} "
                f"({(now_ms - deadline) / 1000:.1f}s late)"), OVERDUE if entry.owner else LOST

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

    def observe(self, worker: str, model: str, items: int, inference_seconds: float) -> None:
        """A result of `worker` by `model` (a `model_ref`): its model time per item (what the
        sysinfo app's rates are made of too), smoothed, for pools without a policy."""
        if items <= 0 or inference_seconds <= 0:
            return
        self.speculation.recent.add(worker, model, inference_seconds / items)

    def observed(self, worker: str, model: str) -> float | None:
        """The seconds per item `worker`'s results of `model` showed; None before one."""
        return self.speculation.recent.smoothed(worker, model)

    def _per_item_s(self, pool: str, worker: str | None, model: str,
                    workers: Mapping[str, WorkerPolicy] | None = None) -> float | None:
        """The worker's seconds per item of `model`: from the policy's rate, else from its
        results; for a worker known to neither, the pool's median for the model (policy) or
        the workers' results' (of the model where any showed it). `workers`: the pool's
        policy, where the caller has it already."""
        workers = (self.policy.workers(pool) if workers is None else workers) or {}
        known = workers.get(worker) if worker is not None else None
        if known is not None and known.rate_for(model) > 0:
            return 1.0 / known.rate_for(model)
        observed = self.observed(worker, model) if worker is not None else None
        if observed is not None:
            return observed
        rate = median_rate(workers.values(), model)
        if rate is not None:
            return 1.0 / rate
        return self.speculation.recent.pooled(model)

    def target_per_item_s(self, pool: str, worker: str, model: str,
                          workers: Mapping[str, WorkerPolicy] | None = None) -> float | None:
        """The seconds per item to plan new work of `model` on `worker` with: the slower of
        what the policy says and what its results show. The policy's rates lag a slowdown by
        its sampling window, and new work must not go to a worker that just slowed down."""
        known = self._per_item_s(pool, worker, model, workers)
        observed = self.observed(worker, model)
        if known is None or observed is None:
            return known if observed is None else observed
        return max(known, observed)

    def members(self, pool: str) -> dict[str, list[int]] | None:
        """The pool's live workers and the task partitions each owns (None: not known now)."""
        return self._members(pool)

    def outstanding(self, pool: str) -> list[Outstanding]:
        """The outstanding tasks of `pool`'s jobs."""
        return [t for t in self._tasks.values() if t.task["pool"] == pool]

    def queued(self, pool: str, partition: int) -> int:
        """Items of this controller's outstanding tasks on `partition` of `pool`'s topic."""
        return self._by_partition.get((pool, partition), 0)

    def _backlog(self, pool: str, worker: str | None, partition: int) -> int:
        """Items of the tasks queued on `worker` (on `partition` where the worker is unknown)."""
        if worker is not None:
            return self._by_owner.get((pool, worker), 0)
        return self._by_partition.get((pool, partition), 0)

    def _unhealthy(self) -> dict[str, set[str]]:
        pools = {t.task["pool"] for t in self._tasks.values()}
        found: dict[str, set[str]] = {}
        for pool in pools:
            workers = self.policy.workers(pool) or {}
            found[pool] = {w for w, p in workers.items() if not p.healthy}
        return found

    def _target(self, entry: Outstanding, planned: dict[str, int]) -> Target | None:
        """The healthy worker other than the late one that serves the task's model and would
        finish it first (its backlog and the items `planned` for it, at the slower of its
        per-item time and its recent results' median), a partition of it (within the model's
        range of partitions when the policy gives the pool ranges)."""
        pool, best = entry.task["pool"], None
        for worker, parts, per_item in self._candidates(pool, entry.task["model"],
                                                        task_ref(entry.task)):
            if worker == entry.owner:
                continue
            queued = self._backlog(pool, worker, -1) + planned.get(worker, 0)
            finish = (queued + entry.items) * per_item
            partition = parts[entry.task["task_id"] % len(parts)]
            if best is None or finish < best.finish_s:
                best = Target(worker, partition, finish)
        return best

    def _candidates(self, pool: str, model: str, ref: str) -> list[tuple[str, list[int], float]]:
        """The pool's healthy workers that serve `ref` (`model` with its version), each with
        its partitions (sorted, within the model's range) and its seconds per item; figured
        once a pass of `late`, which thousands of late tasks can call for the same model."""
        if (pool, ref) in self._pass_candidates:
            return self._pass_candidates[(pool, ref)]
        members, workers = self._members(pool) or {}, self.policy.workers(pool) or {}
        try:
            within = model_range(model, self.policy.model_ranges(pool)) if members else None
        except Exception:  # a policy table that cannot answer: any partition
            within = None
        found = []
        for worker, owned in sorted(members.items()):
            policy = workers.get(worker)
            parts = sorted(p for p in owned if within is None or p in within)
            if not parts or (policy is not None and not policy.healthy) or not _serves(
                    self.pools, worker, ref, policy):
                continue
            found.append((worker, parts, max(self.target_per_item_s(pool, worker, ref) or 1.0,
                                             self.speculation.recent.median(worker, ref) or 0.0)))
        self._pass_candidates[(pool, ref)] = found
        return found


def _serves(pools: PoolView, worker: str, model: str, policy: WorkerPolicy | None) -> bool:
    """Whether `worker` is known to run `model` (a `model_ref`, with its version): its
    results show it, or the policy lists the model among those it serves (a worker that
    joined during the job), and it has not declined it. A task is never moved to a
    worker that would decline it."""
    if model in pools.declined.get(worker, set()):
        return False
    known = [*pools.served.get(worker, ()), *(policy.models if policy else ())]
    return any(serves(m, model) for m in known)


def _owners(members: dict[str, list[int]] | None) -> dict[int, str] | None:
    return None if members is None else {p: w for w, parts in members.items() for p in parts}
