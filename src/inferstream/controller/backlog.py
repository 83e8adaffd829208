"""Each pool's backlog: the work waiting, in seconds of one worker, and the workers to clear it.

The controller paces tasks onto the task topics (`pacing`), so a topic's lag stays at about
`issue_ahead_s` of work whatever waits behind it: a scaler reads these figures instead. The
work waiting is every item of the active jobs this replica holds, issued or not, that no
counted result answered, times the pool's seconds per item of the job's model. That is one
worker's at the pool's measured speed: the median of the policy's rates of the model on the
pool's workers, else of the live workers' own results; for a model none of them measured, the
last figure this replica measured for it, else `backlog_item_s`.

The figures are this replica's share: the seconds of every replica add up to the pool's. The
desired workers are ceil(seconds / `backlog_target_s`), at least 1 while anything waits (a pool
with no worker has no measured speed, and zero workers would never start one), 0 when nothing
waits, at most the pool's task partitions (a worker more would own none). Summed over the
replicas they are never below what the pool needs, and above it by at most one worker per
replica holding work (each rounds its share up); the cap on the sum belongs in the query
(docs/metrics.md gives it).

The items of a job whose inputs are not expanded yet (a directory, a list file) are counted
here, at most `COUNT_STEP` names a round, so that a huge directory never holds a round up;
until its count ends a job's figure is what was counted so far (a lower bound). Once it ends,
the count is the job's total (`JobState.counted_items`) until its last task is cut: its
progress events, `status`, the client's ETA and `inferstream_job_items` have it from then on.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

from inferstream.config import Config
from inferstream.controller.deadlines import Deadlines
from inferstream.controller.expansion import iter_names
from inferstream.controller.ledger import JobState
from inferstream.jobs.errors import InputError
from inferstream.policy.view import PolicyView, model_figure
from inferstream.schemas.records import Job, LedgerStatus

log = logging.getLogger(__name__)

#: Input names counted per round, over all the jobs not expanded yet.
COUNT_STEP = 50_000


@dataclass(frozen=True)
class PoolBacklog:
    """One pool's work waiting at this replica, and the workers that would clear it."""

    seconds: float
    desired_workers: int


class _ItemCount:
    """The items of one job's inputs, counted a step at a time."""

    def __init__(self, job: Job) -> None:
        self.items = len(job["inline_items"])
        self._names: Iterator[str] | None = iter_names(job["inputs"])
        #: every name counted (not stopped by an error)
        self.finished = False

    def advance(self, budget: int) -> int:
        """Counts up to `budget` more names; returns how many it read."""
        if self._names is None:
            return 0
        counted = 0
        try:
            for _ in islice(self._names, budget):
                counted += 1
        except (OSError, InputError) as exc:  # the expansion meets the same error: the
            log.debug("counting the items of a job stopped: %s", exc)  # job fails with it
            self._names = None
        else:
            if counted < budget:
                self._names = None
                self.finished = True
        self.items += counted
        return counted


class Backlog:
    """Each pool's backlog of the jobs this replica holds (see the module's docstring).

    `deadlines` gives the pool's live workers and what their results measured;
    `partitions(topic)` a topic's partition count."""

    def __init__(self, config: Config, policy: PolicyView, deadlines: Deadlines,
                 partitions: Callable[[str], int]) -> None:
        self.config = config
        self.options = config.controller
        self.policy = policy
        self.deadlines = deadlines
        self.partitions = partitions
        self._counts: dict[str, _ItemCount] = {}
        #: the last seconds per item measured, by (pool, model)
        self._known: dict[tuple[str, str], float] = {}
        #: the configured pool and every pool that had work here: their figures go on, at 0
        #: while nothing waits (a scaler's query is never empty)
        self._pools: set[str] = {config.pool}

    def figures(self, jobs: Iterable[JobState]) -> dict[str, PoolBacklog]:
        """Each pool's backlog now, of `jobs` (every job this replica holds)."""
        items: Counter[tuple[str, str]] = Counter()
        budget, active = COUNT_STEP, set()
        for state in jobs:
            if state.status == LedgerStatus.ACTIVE:
                active.add(state.job_id)
                left, budget = self._items_left(state, budget)
                items[(state.job["pool"], state.model)] += left
        for gone in self._counts.keys() - active:
            del self._counts[gone]
        seconds = dict.fromkeys(self._pools, 0.0)
        waiting = set()
        for (pool, model), left in items.items():
            seconds.setdefault(pool, 0.0)
            if left > 0:
                seconds[pool] += left * self.per_item_s(pool, model)
                waiting.add(pool)
        self._pools.update(seconds)
        return {pool: PoolBacklog(s, self._desired(pool, s) if pool in waiting else 0)
                for pool, s in seconds.items()}

    def _items_left(self, state: JobState, budget: int) -> tuple[int, int]:
        """The job's items that no counted result answered, and what is left of `budget`."""
        if state.expanded:
            self._counts.pop(state.job_id, None)
            return max(0, state.issued_items - state.done_items), budget
        count = self._counts.get(state.job_id)
        if count is None:
            count = self._counts[state.job_id] = _ItemCount(state.job)
        budget -= count.advance(budget)
        if count.finished and state.counted_items != count.items:
            state.counted_items = count.items  # its total from now on: reported
            state.changed = True
        return max(0, max(count.items, state.issued_items) - state.done_items), budget

    def per_item_s(self, pool: str, model: str) -> float:
        """Seconds per item of `model` (a `model_ref`) on one worker of `pool`: measured now,
        else as last measured here, else `backlog_item_s`."""
        measured = self._measured(pool, model)
        if measured is not None:
            self._known[(pool, model)] = measured
            return measured
        return self._known.get((pool, model), self.options.backlog_item_s)

    def _measured(self, pool: str, model: str) -> float | None:
        """The median seconds per item of `model` on the pool's workers: the policy's rates,
        else the live workers' results; None where neither measured it."""
        try:
            workers = self.policy.workers(pool) or {}
        except Exception as exc:  # a policy table that cannot answer: the results say
            log.debug("no rates from the policy for pool %s: %r", pool, exc)
            workers = {}
        rates = [r for r in (model_figure(model, w.model_rates) for w in workers.values())
                 if r is not None and r > 0]
        if rates:
            return 1.0 / statistics.median(rates)
        members = self.deadlines.members(pool) or {}
        seen = [s for s in (self.deadlines.observed(w, model) for w in members) if s]
        return statistics.median(seen) if seen else None

    def _desired(self, pool: str, seconds: float) -> int:
        """Workers that clear `seconds` within `backlog_target_s`: 1 to the pool's task
        partitions."""
        wanted = max(1, math.ceil(seconds / self.options.backlog_target_s))
        try:
            cap = self.partitions(self.config.task_topic(pool))
        except Exception as exc:  # no such topic (its jobs are rejected): no cap known
            log.debug("no partition count for pool %s: %r", pool, exc)
            return wanted
        return min(wanted, max(1, cap))
