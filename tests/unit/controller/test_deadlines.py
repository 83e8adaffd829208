"""Where late tasks go (issue 12.4): a pass that re-issues many tasks spreads them over the
healthy workers by when each would finish, and a worker the policy lists as serving the
model is a target before it has sent a result (one that joined during the job)."""

from __future__ import annotations

from collections import Counter

from inferstream.controller.deadlines import Deadlines
from inferstream.controller.declines import PoolView
from inferstream.controller.speculation import MIN_RESULTS, SLOW_FOR_S
from inferstream.policy.view import WorkerPolicy
from inferstream.schemas.records import Task, TaskItem
from tests.unit.support.policies import FixedPolicy

MODEL = "sim:ms=10"
#: worker -> task partitions it owns
OWNERS = {"slowing": [0, 1], "steady": [2, 3, 4, 5], "other": [6, 7, 8, 9]}


def task(task_id: int) -> Task:
    items = [TaskItem(index=task_id * 10 + i, name=f"item-{task_id}-{i}", data=None)
             for i in range(10)]
    return Task(job_id="job-1", task_id=task_id, attempt=1, pool="default", model=MODEL,
                model_version=None, top_k=1, items=items, issued_at=0, deadline_ms=None,
                home_partition=0)


def deadlines(steady_items_per_s: float = 100.0, other_models: tuple[str, ...] = (MODEL,),
              served_by: tuple[str, ...] = tuple(OWNERS)) -> Deadlines:
    """The migration table of a pool whose workers' results came from `served_by`."""
    policy = {"slowing": WorkerPolicy(0.2, True, 100.0, (MODEL,)),
              "steady": WorkerPolicy(0.4, True, steady_items_per_s, (MODEL,)),
              "other": WorkerPolicy(0.4, True, 100.0, other_models)}
    view = PoolView(describe=lambda _group: OWNERS)
    for worker in served_by:
        view.record_result(worker, MODEL)
    # no floor and a copy for every slot: where they go, not whether (see test_speculation)
    return Deadlines(view, FixedPolicy(policy), lambda pool: f"{pool}.workers",
                     slack=3.0, floor_s=20.0, max_attempts=4, speculation_floor_s=0.0,
                     speculation_cap=1.0)


def where(table: Deadlines, tasks: int) -> Counter[str]:
    """Issue `tasks` tasks on the slowed worker's partitions, have it show 4x its speed,
    and count the workers the late tasks go to."""
    for task_id in range(tasks):
        table.issued(task(task_id), 0, OWNERS["slowing"][task_id % 2], 0)
    for _ in range(MIN_RESULTS):  # 40 ms per item, 4x the 10 it was given
        table.observe("slowing", MODEL, 10, 0.4)
    owner = {p: w for w, parts in OWNERS.items() for p in parts}
    assert table.late(1) == []  # slow from now: its tasks go once it stays slow SLOW_FOR_S
    return Counter(owner[late.partition] for late in table.late(1 + int(SLOW_FOR_S * 1000))
                   if late.partition is not None)


def test_one_pass_spreads_the_late_tasks_by_when_each_worker_would_finish() -> None:
    moved = where(deadlines(), 40)
    assert moved == {"steady": 20, "other": 20}, moved  # not all 40 on one of them


def test_a_faster_worker_gets_more_of_them() -> None:
    moved = where(deadlines(steady_items_per_s=300.0), 40)
    assert moved == {"steady": 30, "other": 10}, moved


def test_a_worker_whose_results_show_it_slower_than_the_policy_gets_fewer() -> None:
    table = deadlines()
    table.observe("other", MODEL, 10, 0.4)  # 40 ms per item: 4x slower than the policy says
    moved = where(table, 40)
    assert moved["other"] < moved["steady"] / 2, moved


def test_a_worker_the_policy_says_serves_the_model_is_a_target_before_its_first_result(
        ) -> None:
    # neither steady nor other has sent a result; other serves another model
    moved = where(deadlines(other_models=("googlenet",), served_by=("slowing",)), 10)
    assert moved == {"steady": 10}, moved


def test_a_worker_that_declined_the_model_is_no_target_whatever_the_policy_says() -> None:
    table = deadlines()
    table.pools.record_decline("other", MODEL, ["googlenet"])
    assert where(table, 10) == {"steady": 10}
