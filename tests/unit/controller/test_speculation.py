"""Speculation on a budget (issue 30.3): a healthy pool's noise at tiny per-item times never
re-issues a task, a truly slow worker's queued tasks go where they finish sooner, copies of
tasks a worker may be running stay within the pool's cap, and an unhealthy worker's tasks go
at once, whatever the cap."""

from __future__ import annotations

import random
from collections import Counter

from inferstream.controller.deadlines import Deadlines
from inferstream.controller.declines import PoolView
from inferstream.controller.speculation import MIN_RESULTS, SLOW_FOR_S
from inferstream.policy.view import WorkerPolicy
from inferstream.schemas.records import Task, TaskItem
from tests.unit.support.policies import FixedPolicy

MODEL = "sim:ms=0"
#: eight workers of two task partitions each, as one process with --members 8
OWNERS = {f"w{i}": [2 * i, 2 * i + 1] for i in range(8)}
PARTITION_OWNER = {p: w for w, parts in OWNERS.items() for p in parts}


def task(task_id: int, items: int) -> Task:
    return Task(job_id="job-1", task_id=task_id, attempt=1, pool="default", model=MODEL,
                model_version=None, top_k=1,
                items=[TaskItem(index=task_id * items + i, name=f"item-{task_id}-{i}",
                                data=None) for i in range(items)],
                issued_at=0, deadline_ms=None, home_partition=0)


class Clock:
    """The time results are stamped with, in ms: set by the test."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def table(policy: dict[str, WorkerPolicy] | None = None) -> tuple[Deadlines, Clock]:
    """The defaults: slack 3, floor 20 s, 4 attempts, speculation floor 2 s, cap 10 %."""
    view = PoolView(describe=lambda _group: OWNERS)
    for worker in OWNERS:
        view.record_result(worker, MODEL)
    clock = Clock()
    return Deadlines(view, FixedPolicy(policy), lambda pool: f"{pool}.workers", slack=3.0,
                     floor_s=20.0, max_attempts=4, speculation_floor_s=2.0,
                     speculation_cap=0.1, clock=clock), clock


def issue(deadlines: Deadlines, tasks: int, items: int, at_ms: int) -> None:
    """`tasks` tasks of `items` items, round robin over the partitions."""
    for task_id in range(tasks):
        deadlines.issued(task(task_id, items), 0, task_id % len(PARTITION_OWNER), at_ms)


def results(deadlines: Deadlines, worker: str, ms_per_item: float, count: int = MIN_RESULTS,
            items: int = 32) -> None:
    for _ in range(count):
        deadlines.observe(worker, MODEL, items, ms_per_item * items / 1000)


def test_noise_at_tiny_per_item_times_never_reissues() -> None:
    """What issue 30 saw: tasks given 0.4 ms per item (the first results), then every
    worker's results 1-6 ms per item, 3-15x that (batches waiting for the GIL of one
    process): the whole pool alike, so no worker is slower than its peers and none of the
    400 tasks would finish sooner elsewhere, on any pass, long past their deadlines too."""
    (deadlines, clock), rng = table(), random.Random(30)
    for worker in OWNERS:
        results(deadlines, worker, 0.4, count=1)
    issue(deadlines, 400, 32, clock.ms)
    moved = []
    for _ in range(120):
        clock.ms += 1000
        for worker in OWNERS:
            results(deadlines, worker, rng.uniform(1.0, 6.0), count=1)
        moved += deadlines.late(clock.ms)
    assert moved == [], [late.reason for late in moved[:3]]


def test_a_worker_as_fast_as_its_peers_keeps_its_tasks_past_their_deadlines() -> None:
    """w0 holds four times the others' queue, all far past their deadlines (model time made
    them short), but it answers every second as fast as its peers: it keeps them."""
    deadlines, clock = table()
    for worker in OWNERS:
        results(deadlines, worker, 3.0)
    for task_id in range(64):
        partition = OWNERS["w0"][task_id % 2] if task_id < 32 else task_id % 16
        deadlines.issued(task(task_id, 32), 0, partition, clock.ms)
    moved = []
    for _ in range(60):
        clock.ms += 1000
        for worker in OWNERS:
            results(deadlines, worker, 3.0, count=1)
        moved += deadlines.late(clock.ms)
    assert moved == [], [late.reason for late in moved[:3]]


def test_a_worker_eight_times_slower_has_its_queued_tasks_moved() -> None:
    """P4's straggler: 10 ms per item given, 80 ms shown, 25 tasks of 8 items queued on it
    (16 s there) while its peers hold one each: the tasks behind the first few go, the ones
    it finishes about as soon as the others would stay, and its running one at most within
    the cap."""
    deadlines, clock = table()
    start = clock.ms
    for worker in OWNERS:
        results(deadlines, worker, 10.0, count=1, items=8)
    for task_id in range(25):
        deadlines.issued(task(task_id, 8), 0, OWNERS["w0"][task_id % 2], start)
    for task_id in range(25, 39):
        deadlines.issued(task(task_id, 8), 0, 2 + task_id - 25, start)
    for worker in OWNERS:
        results(deadlines, worker, 80.0 if worker == "w0" else 10.0, items=8)
    assert deadlines.late(clock.ms) == []  # slow from now: its tasks go after SLOW_FOR_S
    moved = []
    for _ in range(int(SLOW_FOR_S)):
        clock.ms += 1000
        for worker in OWNERS:
            results(deadlines, worker, 80.0 if worker == "w0" else 10.0, count=1, items=8)
        moved += deadlines.late(clock.ms)
    gone = sorted(late.outstanding.task["task_id"] for late in moved)
    assert {PARTITION_OWNER[late.partition or 0] for late in moved} <= set(OWNERS) - {"w0"}
    assert len(gone) >= 15 and set(gone) <= set(range(25)), gone
    assert min(gone) >= 2, "tasks it would finish within the floor stay"
    assert all("8.0x its peers'" in late.reason and "s sooner on w" in late.reason
               for late in moved)


def test_copies_of_running_tasks_stay_within_the_cap() -> None:
    """Every worker has been silent for two minutes, its tasks far past their deadlines: of
    those it may be running (the first of each partition), at most 10 % of the 16 slots (1)
    are copied at once, the next once that copy is done; the tasks queued behind them are
    moved, uncapped."""
    deadlines, clock = table()
    for worker in OWNERS:
        results(deadlines, worker, 10.0, count=1, items=8)
    issue(deadlines, 32, 8, clock.ms)  # two per partition: one running, one queued
    later = clock.ms + 120_000
    first = deadlines.late(later)
    running = [late for late in first if late.outstanding.task["task_id"] < 16]
    assert (len(running), len(first)) == (1, 1 + 16), Counter(
        late.outstanding.task["task_id"] < 16 for late in first)
    for late in first:  # issued again where `late` said
        deadlines.issued(late.outstanding.task, 0, late.partition or 0, later)
    assert not [late for late in deadlines.late(later) if late.outstanding.task["task_id"] < 16]
    deadlines.done("job-1", running[0].outstanding.task["task_id"])
    assert len([late for late in deadlines.late(later)
                if late.outstanding.task["task_id"] < 16]) == 1


def test_an_unhealthy_workers_tasks_go_at_once_whatever_the_cap() -> None:
    """The policy marks w0 unhealthy: all its tasks, running or queued, go in one pass, with
    no floor to beat and no cap."""
    policy = {w: WorkerPolicy(1 / 8, w != "w0", 100.0, (MODEL,)) for w in OWNERS}
    deadlines, clock = table(policy)
    for task_id in range(6):
        deadlines.issued(task(task_id, 2), 0, OWNERS["w0"][task_id % 2], clock.ms)
    moved = deadlines.late(clock.ms + 1)
    assert sorted(late.outstanding.task["task_id"] for late in moved) == list(range(6))
    assert all(late.reason == "worker w0 is not healthy" for late in moved)
