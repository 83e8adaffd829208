"""Pacing (issue 15): a job's tasks go out as its workers get through them, in proportion to
each worker's speed, never more than `issue_ahead_s` of work ahead of a worker; with no
worker to pace by, one task per partition at a time."""

from __future__ import annotations

from collections import Counter

from inferstream.controller.deadlines import Deadlines
from inferstream.controller.declines import PoolView
from inferstream.controller.pacing import Pacing
from inferstream.policy.view import ModelRange, WorkerPolicy
from inferstream.schemas.records import Task, TaskItem
from tests.unit.support.policies import FixedPolicy

MODEL = "sim:ms=10"
ITEMS = 10
#: worker -> task partitions it owns
OWNERS = {"fast": [0, 1], "slow": [2, 3, 4, 5], "other": [6, 7]}
#: items per second, from the policy
SPEED = {"fast": 100.0, "slow": 25.0, "other": 50.0}


def task(task_id: int) -> Task:
    items = [TaskItem(index=task_id * ITEMS + i, name=f"item-{task_id}-{i}", data=None)
             for i in range(ITEMS)]
    return Task(job_id="job-1", task_id=task_id, attempt=1, pool="default", model=MODEL,
                model_version=None, top_k=1, items=items, issued_at=0, deadline_ms=None,
                home_partition=0)


def pacing(owners: dict[str, list[int]] | None = OWNERS, speed: dict[str, float] = SPEED,
           ahead_s: float = 2.0, unhealthy: tuple[str, ...] = ()) -> Pacing:
    policy = {w: WorkerPolicy(0.3, w not in unhealthy, s, (MODEL,)) for w, s in speed.items()}

    def describe(_group: str) -> dict[str, list[int]]:
        if owners is None:
            raise RuntimeError("the group cannot be described now")
        return owners

    view = PoolView(describe=describe)
    table = Deadlines(view, FixedPolicy(policy), lambda pool: f"{pool}.workers",
                      slack=3.0, floor_s=20.0, max_attempts=4, speculation_floor_s=2.0,
                      speculation_cap=0.1)
    return Pacing(table, view, FixedPolicy(policy), ahead_s)


def issue(paced: Pacing, start: int = 0, limit: int = 1000, partitions: int = 8,
          within: ModelRange | None = None) -> list[int]:
    """Place and issue tasks from `start` until no worker has room; their partitions."""
    placed = []
    paced.begin()
    for task_id in range(start, start + limit):
        partition = paced.place("default", MODEL, within, partitions, "job-1", task_id, ITEMS)
        if partition is None:
            break
        placed.append(partition)
    for offset, partition in enumerate(placed):
        paced.table.issued(task(start + offset), 0, partition, 0)
    paced.begin()
    return placed


def by_worker(partitions: list[int], owners: dict[str, list[int]] = OWNERS) -> Counter[str]:
    owner = {p: w for w, parts in owners.items() for p in parts}
    return Counter(owner[p] for p in partitions)


def test_each_worker_gets_about_its_speed_times_the_lead_and_no_more() -> None:
    placed = by_worker(issue(pacing(ahead_s=2.0)))
    # 2 s ahead: 200 items on fast, 50 on slow, 100 on other, in tasks of 10
    assert placed == {"fast": 20, "slow": 5, "other": 10}, placed


def test_a_worker_that_finishes_its_tasks_gets_the_next_ones() -> None:
    paced = pacing()
    first = issue(paced)
    for task_id, partition in enumerate(first):
        if by_worker([partition]) == {"fast": 1}:
            paced.table.done("job-1", task_id)
    assert by_worker(issue(paced, start=len(first))) == {"fast": 20}


def test_workers_of_unknown_speed_get_two_tasks_at_a_time() -> None:
    paced = pacing(speed={})
    assert by_worker(issue(paced)) == {"fast": 2, "slow": 2, "other": 2}
    assert by_worker(issue(paced, start=6)) == {}  # none has room until a task is done
    paced.table.done("job-1", 0)  # a task done (no result to measure it by): room for one
    assert len(issue(paced, start=6)) == 1
    paced.table.observe("fast", MODEL, ITEMS, 0.1)  # a first result: 10 ms per item
    # fast has room for 200 items now, two tasks of which it holds (one where its done task
    # was); the others (the median of what is known) have room too
    assert by_worker(issue(paced, start=7)) == {"fast": 18, "slow": 18, "other": 18}


def test_unhealthy_or_declining_workers_get_nothing() -> None:
    paced = pacing(unhealthy=("slow",))
    paced.pools.record_decline("other", MODEL, ["googlenet"])
    assert by_worker(issue(paced)) == {"fast": 20}


def test_a_worker_spreads_its_longer_tasks_over_its_partitions() -> None:
    """Tasks of 0.1-0.4 s end a commit or more apart: on the least loaded partitions."""
    placed = Counter(p for p in issue(pacing()) if p in OWNERS["slow"])
    assert sorted(placed.values()) == [1, 1, 1, 2], placed


def test_a_worker_s_short_tasks_line_up_on_one_of_its_partitions() -> None:
    """Tasks of a millisecond (10 items at 10,000 items/s) line up, so those finished
    together commit together: the lowest partition at first, then behind what it holds."""
    paced = pacing(speed={w: items_per_s * 100 for w, items_per_s in SPEED.items()},
                   ahead_s=0.02)
    placed = issue(paced)
    assert {w: {p for p in placed if p in OWNERS[w]} for w in OWNERS} == {
        "fast": {0}, "slow": {2}, "other": {6}}
    paced.table.issued(task(100), 0, 5, 0)  # slow's partition 5 inherits a task of another
    for task_id, partition in enumerate(placed):
        if partition == 2:
            paced.table.done("job-1", task_id)  # slow got through partition 2's tasks
    assert set(p for p in issue(paced, start=len(placed)) if p in OWNERS["slow"]) == {5}


def test_only_partitions_of_the_models_range() -> None:
    placed = issue(pacing(), within=ModelRange(MODEL, first=0, count=4))
    assert set(placed) <= {0, 1, 2, 3}
    assert by_worker(placed) == {"fast": 20, "slow": 5}


def test_without_workers_each_partition_gets_one_task_at_a_time() -> None:
    for owners in (None, {}):
        placed = issue(pacing(owners=owners))
        assert sorted(placed) == list(range(8)), placed
        assert issue(pacing(owners=owners), limit=1, within=ModelRange(MODEL, 2, 3)) != []


def test_a_forced_task_is_placed_even_when_every_worker_is_full() -> None:
    paced = pacing()
    issue(paced)
    assert paced.place("default", MODEL, None, 8, "job-1", 99, ITEMS) is None
    forced = paced.place("default", MODEL, None, 8, "job-1", 99, ITEMS, force=True)
    assert by_worker([forced]) == {"fast": 1}  # the one that would finish it first


def test_no_worker_is_sent_more_than_its_ahead_items_however_fast_it_seems() -> None:
    """A model of next to no compute measures hundreds of thousands of items a second (model
    time only): `issue_ahead_s` of that is a whole job, so `ahead_items` bounds each worker's
    outstanding items too (the controller holds them all)."""
    fast = {w: 1_000_000.0 for w in SPEED}
    unbounded = issue(pacing(speed=fast))
    assert len(unbounded) == 1000  # every task offered: 2 s at 1e6 items a second
    paced = pacing(speed=fast)
    paced.ahead_items = 35
    # 35 items in tasks of 10: three tasks each
    assert by_worker(issue(paced)) == {"fast": 3, "slow": 3, "other": 3}
    paced = pacing(speed=fast)
    paced.ahead_items = 5  # a task larger than the bound: one at a time
    assert by_worker(issue(paced)) == {"fast": 1, "slow": 1, "other": 1}
