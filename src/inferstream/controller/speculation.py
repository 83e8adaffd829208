"""Speculation on a budget: when a late task of a live, healthy worker goes elsewhere.

LATE's rules (Zaharia et al., OSDI 2008) on `deadlines`' estimates. A worker is slow with a
model when the median per-item time of its last `RECENT` results of it (after `MIN_RESULTS`:
a few results are not evidence) is `migration_slack` times the median of its peers' medians
(where no peer has one, what a task was given): at tiny per-item times a whole pool reads
3-15x its first results (batches that waited for one process's GIL), and none is slower than
its peers; and a worker known to be slow when its tasks were given its speed is still slower
than the idle peers that would take them at the job's end. It must stay slow `SLOW_FOR_S`. A late
task of a live worker is issued again only where it would finish `speculation_floor_s` sooner:
its time left is as long as its worker has been silent, and, of a slow worker, at least the
items ahead of it and its own at the worker's median; the target's is its queue and the task
at its speed. A time, not a ratio, so per-item noise, which moves seconds only across thousands
of items, never pays, and a worker that answers as fast as its peers keeps its tasks.

A re-issued task that its worker may be running (the oldest outstanding one of its partition:
a worker takes a partition's tasks in order, and skips a superseded attempt it has not taken
yet) is a speculative copy; a pool holds at most `speculation_cap` of its slots (the task
partitions its live workers own) in copies at once, at least one. The tasks queued behind it
move without a copy and are not counted. A task whose worker is unhealthy, or an adopted one
past its deadline, is not speculation: it goes at once, uncapped.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from inferstream.controller.outstanding import Outstanding
from inferstream.policy.view import model_figure
from inferstream.schemas.records import now_ms, task_ref

#: Results per worker and model whose median is the worker's per-item time for speculation.
RECENT = 25
#: Results of a model a worker must have sent before it counts as slow with it.
MIN_RESULTS = 5
#: Weight of the newest result in a worker's smoothed seconds per item.
OBSERVED_ALPHA = 0.2
#: Seconds a worker must stay slow before its tasks go: on a loaded host a member that one
#: process's GIL starves for a few seconds reads 3-4x its peers, and catches up.
SLOW_FOR_S = 5.0
#: Why a task is late: its worker is slower than its peers (speculation), it is past its
#: deadline on a live worker (speculation), its worker is unhealthy or gone (not).
SLOW, OVERDUE, LOST = "slow", "overdue", "lost"


class Target(NamedTuple):
    """Where a late task would go: a worker, a partition of it, and when it would finish the
    task there (seconds from now)."""

    worker: str
    partition: int
    finish_s: float


class RecentTimes:
    """The per-item times of each worker's last `RECENT` results, by model, and all its
    results' smoothed (`smoothed`)."""

    def __init__(self, clock: Callable[[], int] = now_ms) -> None:
        self.clock = clock
        self._times: dict[str, dict[str, deque[float]]] = {}
        #: seconds per item each worker's results showed, smoothed, by worker and model
        self._smoothed: dict[str, dict[str, float]] = {}
        #: when each worker's last result came, in ms
        self.last_ms: dict[str, int] = {}

    def add(self, worker: str, model: str, per_item_s: float) -> None:
        times = self._times.setdefault(worker, {})
        times.setdefault(model, deque(maxlen=RECENT)).append(per_item_s)
        self.last_ms[worker] = self.clock()
        seen = self._smoothed.setdefault(worker, {})
        known = seen.get(model)
        seen[model] = per_item_s if known is None else (
            OBSERVED_ALPHA * per_item_s + (1 - OBSERVED_ALPHA) * known)

    def smoothed(self, worker: str, model: str) -> float | None:
        """The seconds per item `worker`'s results of `model` showed; None before one."""
        return model_figure(model, self._smoothed.get(worker, {}))

    def pooled(self, model: str) -> float | None:
        """The median of the workers' smoothed figures of `model`, or of every model where
        none has one of it; None before any result."""
        seen = [s for s in (self.smoothed(w, model) for w in self._smoothed) if s is not None]
        every = [s for figures in self._smoothed.values() for s in figures.values()]
        return statistics.median(seen or every) if seen or every else None

    def forget(self, worker: str) -> None:
        """Drop `worker`'s times, smoothed speeds and last result's time (a worker gone:
        each process has an id of its own, so they grew with every restart)."""
        for figures in (self._times, self._smoothed, self.last_ms):
            figures.pop(worker, None)

    def median(self, worker: str, model: str) -> float | None:
        """The median per-item time of `worker`'s recent results of `model` (a `model_ref`);
        None before `MIN_RESULTS` of them."""
        times = model_figure(model, self._times.get(worker, {}))
        if times is None or len(times) < MIN_RESULTS:
            return None
        return statistics.median(times)


class CopyBudget:
    """The speculative copies outstanding, by pool, against each pool's cap."""

    def __init__(self, share: float) -> None:
        self.share = share
        #: (job id, task id) of each copy outstanding -> its pool
        self._copies: dict[tuple[str, int], str] = {}

    def cap(self, slots: int) -> int:
        """Copies a pool of `slots` slots may hold at once: `share` of them, at least one."""
        return max(1, int(self.share * slots))

    def held(self) -> Mapping[str, int]:
        """Copies outstanding by pool."""
        counts: dict[str, int] = {}
        for pool in self._copies.values():
            counts[pool] = counts.get(pool, 0) + 1
        return counts

    def add(self, key: tuple[str, int], pool: str) -> None:
        self._copies[key] = pool

    def discard(self, key: tuple[str, int]) -> None:
        self._copies.pop(key, None)


class Speculation:
    """Whether a late task of a live worker is worth issuing again elsewhere now."""

    def __init__(self, floor_s: float, cap: float, clock: Callable[[], int] = now_ms) -> None:
        self.floor_s = floor_s
        self.recent = RecentTimes(clock)
        self.copies = CopyBudget(cap)
        #: `medians`' answers in this pass, by worker and model
        self._medians: dict[tuple[str | None, str], tuple[float | None, float]] = {}
        #: each worker's own recent median in this pass, by worker and model: a pass over a
        #: pool of W workers needs W of them, not W x W
        self._own: dict[tuple[str, str], float | None] = {}
        #: since when each worker has been slow with each model, in ms
        self._slow_since: dict[tuple[str | None, str], int] = {}

    def forget(self, worker: str) -> None:
        """Drop what is known of `worker`, its recent times and since when its tasks ran slow
        (a worker gone an hour: `Deadlines.forget_gone`)."""
        self.recent.forget(worker)
        for key in [k for k in self._slow_since if k[0] == worker]:
            del self._slow_since[key]

    def begin(self) -> None:
        """A pass over the outstanding tasks begins: the medians are worked out anew."""
        self._medians.clear()
        self._own.clear()

    def worth(self, entry: Outstanding, rule: str, at_ms: int, target: Target,
              queue: tuple[int, bool] | None, held: dict[str, int], slots: int
              ) -> tuple[str, bool] | None:
        """What to add to the reason of issuing `entry` (late by `rule`) again on `target`,
        and whether that makes a copy; None: not worth it at `at_ms`. Its time left: as long
        as its worker has been silent (since its last result, or since the task was issued),
        and, of a `SLOW` worker, at least the items ahead of it and its own at the worker's
        recent median. A worker that keeps answering and is no slower than its peers is
        waited for: the deadline it passed was short (at tiny per-item times model time is
        a fraction of a task's cost), and its queue drains as theirs do. `queue`: `Queues`'
        figures of it; `held`: copies outstanding by pool, counted on here; `slots`: the
        task partitions the pool's live workers own."""
        ahead, running = queue if queue is not None else (entry.items, True)
        pool, owner = entry.task["pool"], entry.owner or ""
        per_item = self.recent.median(owner, task_ref(entry.task)) if rule == SLOW else None
        silent_s = (at_ms - max(entry.issued_ms, self.recent.last_ms.get(owner, 0))) / 1000
        saved = max(ahead * (per_item or 0.0), silent_s) - target.finish_s
        if saved < self.floor_s:
            return None
        if running:
            if held.get(pool, 0) >= self.copies.cap(slots):
                return None
            held[pool] = held.get(pool, 0) + 1
        return f", {saved:.1f} s sooner on {target.worker}", running

    def slow(self, worker: str | None, model: str, given: float | None, slack: float,
             members: Mapping[str, object] | None, at_ms: int) -> str | None:
        """How `worker` is slow with `model`, where its recent median per-item time has been
        more than `slack` times its peers' median (`members` but it), or, where no peer has
        shown one, than what the task was `given`, for `SLOW_FOR_S` at `at_ms`; else None."""
        observed, peers = self.medians(worker, model, members)
        usual, whose = (peers, "its peers'") if peers else (given, "what the task was given")
        if observed is None or not usual or observed <= slack * usual:
            self._slow_since.pop((worker, model), None)
            return None
        since = self._slow_since.setdefault((worker, model), at_ms)
        if at_ms - since < SLOW_FOR_S * 1000:
            return None
        return f"takes {observed * 1000:.0f} ms per item, {observed / usual:.1f}x {whose}"

    def medians(self, worker: str | None, model: str, members: Mapping[str, object] | None
                ) -> tuple[float | None, float]:
        """`worker`'s recent median per-item time of `model` (None before `MIN_RESULTS`),
        and the median of the pool's `members`' other than its (0 where none has one); kept
        until the next `begin`: a pass asks for every task."""
        known = self._medians.get((worker, model))
        if known is None:
            others = [self._own_median(w, model) for w in members or () if w != worker]
            peers = [m for m in others if m is not None]
            known = self._medians[(worker, model)] = (
                self._own_median(worker or "", model),
                statistics.median(peers) if peers else 0.0)
        return known

    def _own_median(self, worker: str, model: str) -> float | None:
        if (worker, model) not in self._own:
            self._own[(worker, model)] = self.recent.median(worker, model)
        return self._own[(worker, model)]


class Queues:
    """For each outstanding task: the items of its worker's tasks issued before it and its
    own, and whether its worker may be running it (the oldest of its partition: a worker takes
    a partition's tasks in order). Worked out at the first question: most passes ask none."""

    def __init__(self, tasks: Iterable[Outstanding]) -> None:
        self._tasks = tasks
        self._found: dict[tuple[str, int], tuple[int, bool]] | None = None

    def get(self, key: tuple[str, int]) -> tuple[int, bool] | None:
        if self._found is None:
            self._found = self._work_out()
        return self._found.get(key)

    def _work_out(self) -> dict[tuple[str, int], tuple[int, bool]]:
        ahead: dict[tuple[str, str | None], int] = {}
        partitions: set[tuple[str, int]] = set()
        found = {}
        for entry in sorted(self._tasks, key=lambda t: t.issued_ms):
            pool = entry.task["pool"]
            ahead[(pool, entry.owner)] = ahead.get((pool, entry.owner), 0) + entry.items
            found[entry.key] = (ahead[(pool, entry.owner)],
                                (pool, entry.partition) not in partitions)
            partitions.add((pool, entry.partition))
        return found
