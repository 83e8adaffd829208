"""Each pool's backlog (issue 29.1): the work waiting at a replica in seconds of one worker, and
the workers that would clear it within `backlog_target_s`, whatever the pacing has issued."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from inferstream.controller import backlog as backlog_module
from inferstream.controller import deadlines
from inferstream.controller.backlog import PoolBacklog
from inferstream.controller.book import JobBook
from inferstream.controller.hooks import RoundState
from inferstream.controller.metrics import ControllerMetrics
from inferstream.policy.view import WorkerPolicy
from inferstream.schemas.records import JobEventType, Task, now_ms
from tests.unit.controller.test_book import (
    HOME,
    MakeBook,
    accepted,
    events,
    make_config,
    make_job,
    result_of,
    tasks,
)
from tests.unit.promtool import check_metrics, sample
from tests.unit.support.memory import MODEL
from tests.unit.support.policies import FixedPolicy


def paced(**controller: Any) -> Any:
    """Tasks issued as the workers need them (a few seconds ahead), backlog at 10 s a worker."""
    return make_config(issue_ahead_s=2.0, backlog_target_s=10.0, **controller)


def figures(book: JobBook) -> dict[str, PoolBacklog]:
    return book.round_state(1).backlog


def answer(book: JobBook, issued: list[Task], per_item_s: float, worker: str = "w1") -> None:
    """Results of `issued`, each `per_item_s` of model time per item."""
    out = book.outbox()
    for task in issued:
        result = result_of(task, worker)
        result["inference_seconds"] = per_item_s * len(task["items"])
        book.on_result(result, out)


def test_nothing_waiting_is_zero_seconds_and_zero_workers(make_book: MakeBook) -> None:
    assert figures(make_book(paced())) == {"default": PoolBacklog(0.0, 0)}


def test_the_backlog_counts_every_item_not_done_issued_or_not(make_book: MakeBook) -> None:
    book = make_book(paced())
    _, (first,) = accepted(book, make_job(items=1000, chunk_size=10))
    answer(book, [first], per_item_s=0.05)  # the workers' results: 50 ms per item
    out = book.outbox()
    book.tick(out, now_ms())
    issued = len(tasks(book, out))
    assert 0 < issued < 99  # paced: most of the job is not issued yet

    (pool,) = figures(book).values()
    assert pool.seconds == pytest.approx(990 * 0.05)  # 990 items left, 49.5 s of one worker
    assert pool.desired_workers == 4  # 49.5 s within 10 s: 5, but the topic has 4 partitions


def test_the_policy_s_rates_are_the_measured_speed(make_book: MakeBook) -> None:
    rates = {w: WorkerPolicy(0.5, True, 20.0, (MODEL,), {MODEL: rate})
             for w, rate in (("w1", 10.0), ("w2", 30.0), ("w3", 20.0))}
    book = make_book(paced(), policy=FixedPolicy(rates))
    accepted(book, make_job(items=300, chunk_size=10))

    (pool,) = figures(book).values()
    assert pool.seconds == pytest.approx(300 / 20.0)  # the median worker's 20 items/s
    assert pool.desired_workers == 2


def test_with_no_worker_a_job_waiting_still_asks_for_one(make_book: MakeBook) -> None:
    """Scale from zero: no worker measured the model, the setting stands in for its speed,
    and however little waits, one worker is wanted."""
    book = make_book(paced(backlog_item_s=0.001), pool={})
    accepted(book, make_job(items=4))

    (pool,) = figures(book).values()
    assert pool.seconds == pytest.approx(0.004) and pool.desired_workers == 1


def test_the_last_measured_speed_outlives_the_workers(
        make_book: MakeBook, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines, "MEMBERS_TTL_S", 0.0)  # the group as it is at each call
    pool: dict[str, list[int]] = {"w1": [0, 1, 2, 3]}
    book = make_book(paced(), pool=pool)
    _, (first,) = accepted(book, make_job(items=200, chunk_size=10))
    answer(book, [first], per_item_s=0.2)
    assert figures(book)["default"].seconds == pytest.approx(190 * 0.2)

    pool.clear()  # the pool scaled to zero: its workers' results are not a live figure
    accepted(book, make_job(items=100, chunk_size=10, job_id="20261202-100001-0000b00d"))
    (pool_now,) = figures(book).values()
    assert pool_now.seconds == pytest.approx(290 * 0.2) and pool_now.desired_workers == 4


def test_the_backlog_is_zero_once_every_job_is_done(make_book: MakeBook) -> None:
    book = make_book(make_config(backlog_target_s=10.0))  # everything issued at once
    _, issued = accepted(book, make_job(items=6, chunk_size=2))
    assert figures(book)["default"].desired_workers == 1
    answer(book, issued, per_item_s=0.01)
    book.tick(book.outbox(), now_ms())

    assert figures(book) == {"default": PoolBacklog(0.0, 0)}


def test_a_list_file_is_counted_before_its_tasks_are_cut(
        make_book: MakeBook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A huge input is counted a step a round: a lower bound until the count ends."""
    monkeypatch.setattr(backlog_module, "COUNT_STEP", 400)
    names = tmp_path / "items.txt"
    names.write_text("".join(f"photo-{n}.jpg\n" for n in range(1000)))
    book = make_book(paced(backlog_item_s=0.01))
    accepted(book, make_job(items=0, chunk_size=10, inputs=[f"@{names}"]))

    state = book.jobs[next(iter(book.jobs))]
    counted = []
    for _ in range(4):
        counted.append(figures(book)["default"].seconds)
        if len(counted) < 3:  # a lower bound is not the job's total
            assert state.total_items is None
    assert counted == pytest.approx([4.0, 8.0, 10.0, 10.0])  # 1000 items of 10 ms
    assert not state.expanded

    # the count ended: the job's total long before its last task is cut, in its events
    assert state.total_items == 1000
    out = book.outbox()
    book.tick(out, now_ms() + 60_000)
    (progress,) = [e for e in events(book, out) if e["type"] == JobEventType.PROGRESS]
    assert (progress["total_items"], progress["total_tasks"]) == (1000, None)


def test_two_replicas_figures_add_up_to_the_pool_s(make_book: MakeBook) -> None:
    """Each replica holds the jobs of its partitions and reports its share."""
    config = paced(backlog_item_s=0.05)
    both, one, other = make_book(config), make_book(config), make_book(config)
    jobs = [make_job(items=n, chunk_size=10, job_id=f"20261202-10000{n % 10}-{n:08x}")
            for n in (300, 500)]
    for job in jobs:
        both.on_job(job, HOME, both.outbox())
    one.on_job(jobs[0], HOME, one.outbox())
    other.on_job(jobs[1], HOME + 1, other.outbox())

    shares = [figures(book)["default"] for book in (one, other)]
    assert sum(s.seconds for s in shares) == pytest.approx(figures(both)["default"].seconds)
    assert [s.desired_workers for s in shares] == [2, 3]  # 15 s and 25 s within 10 s
    assert figures(both)["default"].desired_workers == 4  # 40 s, capped at 4 partitions


def test_the_controller_serves_each_pool_s_figures() -> None:
    metrics = ControllerMetrics(CollectorRegistry())
    backlog = {"default": PoolBacklog(49.5, 4), "gpu": PoolBacklog(0.0, 0)}
    metrics.after_round(0.01, RoundState({}, 2, [], backlog))

    registry = metrics.registry
    assert sample(registry, "inferstream_pool_backlog_seconds", pool="default") == 49.5
    assert sample(registry, "inferstream_pool_desired_workers", pool="default") == 4
    assert sample(registry, "inferstream_pool_desired_workers", pool="gpu") == 0
    check_metrics(generate_latest(registry))
