"""Priorities and fair share (issue 29.4): the order in which the job book issues the tasks
of several jobs of one pool, w1 owning task partitions 0-1 and w2 2-3, each worker doing
100 items/s and kept 2 s ahead (200 items each), in tasks of 10 items."""

from __future__ import annotations

from collections import Counter
from typing import Any

from inferstream.controller.book import JobBook
from inferstream.policy.view import WorkerPolicy
from inferstream.schemas.records import (
    Job,
    JobEventType,
    LedgerEntry,
    LedgerStatus,
    Task,
    TaskControlReason,
    now_ms,
    read_record,
)
from tests.unit.controller.test_book import (
    HOME,
    OWNER,
    MakeBook,
    accepted,
    controls,
    events,
    make_config,
    make_job,
    result_of,
    tasks,
)
from tests.unit.controller.test_ledger_ends import (
    Entry,
    after_compaction,
    cancel,
    ledger_log,
)
from tests.unit.support.memory import CODEC, MODEL
from tests.unit.support.policies import FixedPolicy

POLICY = FixedPolicy({w: WorkerPolicy(0.5, True, 100.0, (MODEL,)) for w in ("w1", "w2")})
#: items the two workers are kept ahead with together
ROOM = 400


def job(name: str, items: int, **fields: Any) -> Job:
    return make_job(items=items, chunk_size=10, job_id=f"20261205-200000-{name:0>8}",
                    **fields)


def paced_book(make_book: MakeBook) -> JobBook:
    return make_book(make_config(issue_ahead_s=2.0), policy=POLICY)


def issued_items(tasks_out: list[tuple[int, Task]]) -> Counter[str]:
    """Items issued per job id."""
    found: Counter[str] = Counter()
    for _, task in tasks_out:
        found[task["job_id"]] += len(task["items"])
    return found


def answer(book: JobBook, issued: list[Task]) -> None:
    """Every task of `issued` answered by the worker that owns its partition."""
    out = book.outbox()
    for task in issued:
        book.on_result(result_of(task), out)


def test_a_job_from_another_producer_with_a_weight_not_above_0_is_rejected(
        make_book: MakeBook) -> None:
    book = paced_book(make_book)
    out, issued = accepted(book, job("weightless", 10, weight=0.0))
    (event,) = events(book, out)
    assert event["type"] == JobEventType.REJECTED and issued == []
    assert event["reason"] == "weight must be a positive number, got 0.0"


def test_jobs_of_one_priority_share_the_room_in_proportion_to_their_weights(
        make_book: MakeBook) -> None:
    book = paced_book(make_book)
    light, heavy = job("light", 1000), job("heavy", 1000, weight=3.0)
    accepted(book, light)  # the first task of each goes out on acceptance
    accepted(book, heavy)
    out = book.outbox()
    book.tick(out, now_ms())

    shares = issued_items(tasks(book, out))
    assert sum(shares.values()) == ROOM - 20
    # items over weight, within a task of 10 items
    assert abs(shares[heavy["job_id"]] / 3 - shares[light["job_id"]]) <= 10, shares


def test_a_higher_priority_goes_first_and_keeps_its_workers_to_itself(
        make_book: MakeBook) -> None:
    book = paced_book(make_book)
    low, high = job("low", 1000), job("high", 50, priority=2)
    accepted(book, low)
    out, (first_high,) = accepted(book, high)
    out = book.outbox()
    book.tick(out, now_ms())

    issued = [task for _, task in tasks(book, out)]
    assert [t["job_id"] for t in issued] == [high["job_id"]] * 4  # the rest of it, first
    # both workers hold a task of the higher priority: the lower one waits for them
    assert {OWNER[p] for p, t in tasks(book, out)} | {"w1"} == {"w1", "w2"}
    answer(book, [first_high, *issued])
    after = book.outbox()
    book.tick(after, now_ms())
    assert set(issued_items(tasks(book, after))) == {low["job_id"]}


def test_an_urgent_job_takes_back_the_tasks_queued_for_a_lower_one(
        make_book: MakeBook) -> None:
    book = paced_book(make_book)
    low, urgent = job("low", 500), job("urgent", 30, priority=1)
    _, first_low = accepted(book, low)
    out = book.outbox()
    book.tick(out, now_ms())  # the workers are 2 s ahead with the low job's tasks
    queued = [*first_low, *(task for _, task in tasks(book, out))]
    assert sum(len(t["items"]) for t in queued) == ROOM

    _, first_urgent = accepted(book, urgent)  # placed behind them, whatever they hold
    out = book.outbox()
    book.tick(out, now_ms())

    taken = {(c["task_id"], c["attempt"]) for c in controls(book, out)
             if c["reason"] == TaskControlReason.MIGRATED and c["job_id"] == low["job_id"]}
    assert taken == {(t["task_id"], 2) for t in queued}  # workers skip their attempt 1
    assert set(issued_items(tasks(book, out))) == {urgent["job_id"]}

    # the first of the low job's tasks had started: its attempt 1 still answers it
    started, *rest = queued
    answer(book, [started, *first_urgent, *(t for _, t in tasks(book, out))])
    out = book.outbox()
    book.tick(out, now_ms())
    again = [t for _, t in tasks(book, out) if t["job_id"] == low["job_id"]]
    assert [(t["task_id"], t["attempt"]) for t in again[:len(rest)]] == [
        (t["task_id"], 2) for t in rest]


def test_jobs_whose_tasks_were_taken_back_end_with_each_item_once(
        make_book: MakeBook) -> None:
    """Workers skip the attempts a control supersedes and answer every other task."""
    book = paced_book(make_book)
    low, urgent = job("low", 600), job("urgent", 100, priority=1)
    _, queued = accepted(book, low)
    superseded: dict[tuple[str, int], int] = {}
    completed: list[str] = []
    for step in range(60):
        if step == 1:
            queued += accepted(book, urgent)[1]
        out = book.outbox()
        book.tick(out, now_ms())
        completed += [e["job_id"] for e in events(book, out)
                      if e["type"] == JobEventType.COMPLETED]
        for control in controls(book, out):
            superseded[(control["job_id"], control["task_id"])] = control["attempt"]
        answer(book, [t for t in queued if t["attempt"] >= superseded.get(
            (t["job_id"], t["task_id"]), 0)])
        queued = [task for _, task in tasks(book, out)]
    assert completed == [urgent["job_id"], low["job_id"]]
    for name, items in ((low, 600), (urgent, 100)):
        state = book.jobs[name["job_id"]]
        assert (state.ok_items, state.done_tasks) == (items, items // 10)


def test_a_job_that_joins_later_shares_from_then_on_instead_of_catching_up(
        make_book: MakeBook) -> None:
    """The first job has had 3 rounds of the pool alone; the second, of the same priority
    and weight, then gets half of each round, not every task until it had as many items."""
    book = paced_book(make_book)
    early, late = job("early", 5000), job("late", 5000)
    _, queued = accepted(book, early)
    for _ in range(3):
        out = book.outbox()
        book.tick(out, now_ms())
        answer(book, queued)
        queued = [task for _, task in tasks(book, out)]
    accepted(book, late)
    answer(book, queued)
    out = book.outbox()
    book.tick(out, now_ms())

    shares = issued_items(tasks(book, out))
    assert abs(shares[early["job_id"]] - shares[late["job_id"]]) <= 10, shares
    assert shares[early["job_id"]] > 0


def taken_back_then_taken_over(make_book: MakeBook) -> tuple[JobBook, list[Entry], Job,
                                                                list[Task]]:
    """A first book queues the low job's tasks on both workers, takes them back for an
    urgent job and dies before issuing them again. Returns a second book, the ledger's
    records so far, the low job, and its tasks taken back."""
    first = paced_book(make_book)
    low, urgent = job("low", 500), job("urgent", 30, priority=1)
    outs = [accepted(first, low)[0]]
    outs.append(first.outbox())
    first.tick(outs[-1], now_ms())
    queued = [t for out in outs for _, t in tasks(first, out)]
    outs.append(accepted(first, urgent)[0])
    outs.append(first.outbox())
    first.tick(outs[-1], now_ms())
    taken = {c["task_id"] for c in controls(first, outs[-1]) if c["job_id"] == low["job_id"]}
    assert taken and all(t["job_id"] == urgent["job_id"] for _, t in tasks(first, outs[-1]))
    return (paced_book(make_book), ledger_log(first, *outs), low,
            [t for t in queued if t["task_id"] in taken])


def test_a_takeover_issues_the_tasks_taken_back_at_their_jobs_turn_not_a_deadline_later(
        make_book: MakeBook) -> None:
    """The taken-back tasks were on no worker's queue: the new owner issues them as the
    attempt their controls announced once the urgent job has nothing left to issue, at once,
    where before it waited out the deadlines of queued tasks (tens of seconds)."""
    second, log, low, taken = taken_back_then_taken_over(make_book)
    second.adopt(after_compaction(log), now_ms())
    assert len(second.deadlines) == 3  # the urgent job's tasks, on a queue

    out = second.outbox()
    second.tick(out, now_ms())
    again = [t for _, t in tasks(second, out) if t["job_id"] == low["job_id"]]
    assert [(t["task_id"], t["attempt"]) for t in again] == [
        (t["task_id"], 2) for t in taken]
    assert [[i["name"] for i in t["items"]] for t in again] == [
        [i["name"] for i in t["items"]] for t in taken]
    assert second.jobs[low["job_id"]].held == {}
    # issued again, their ledger entries go: a third owner waits for them as queued tasks
    third = paced_book(make_book)
    third.adopt(after_compaction(log + ledger_log(second, out)), now_ms())
    assert third.jobs[low["job_id"]].held == {} and len(third.deadlines) == 3 + len(taken)


def test_a_job_that_ends_with_tasks_taken_back_deletes_their_ledger_entries(
        make_book: MakeBook) -> None:
    second, log, low, taken = taken_back_then_taken_over(make_book)
    entries = [read_record(CODEC, value, LedgerEntry) for value, _ in after_compaction(log)]
    assert [(e["task_id"], e["attempts"]) for e in entries
            if e["status"] == LedgerStatus.ISSUED] == [(t["task_id"], 2) for t in taken]
    second.adopt(after_compaction(log), now_ms())
    out = second.outbox()
    second.on_cancel(cancel(low["job_id"]), HOME, out)
    second.tick(out, now_ms())
    kept = after_compaction(log + ledger_log(second, out))
    entries = [read_record(CODEC, value, LedgerEntry) for value, _ in kept]
    assert [(e["job_id"], e["task_id"]) for e in entries if e["job_id"] == low["job_id"]] == [
        (low["job_id"], -1)]
