"""A job that ends costs the ledger one entry: its task entries are deleted in the transaction
of its final JOB entry, and a replay rebuilds it as ended whether compaction has dropped them
yet or not, with nothing of it left to count a late result or reopen it."""

from __future__ import annotations

import pytest

from inferstream.controller.book import JobBook
from inferstream.controller.outbox import Outbox
from inferstream.schemas.records import (
    Job,
    JobEventType,
    LedgerEntry,
    LedgerStatus,
    TaskControl,
    TaskControlReason,
    now_ms,
    read_record,
)
from tests.unit.controller.test_book import (
    HOME,
    MakeBook,
    accepted,
    events,
    make_config,
    make_job,
    result_of,
)
from tests.unit.support.memory import CODEC

JOB_ID = make_job()["job_id"]

#: one ledger record as the controller commits it: (key, value; None for a tombstone)
Entry = tuple[bytes, bytes | None]


def ledger_log(book: JobBook, *outs: Outbox) -> list[Entry]:
    """The ledger records of `outs`, in the order their transactions write them."""
    return [(r.key or b"", r.value) for out in outs for r in out.records.get(HOME, [])
            if r.topic == book.topics.ledger]


def before_compaction(log: list[Entry]) -> list[tuple[bytes, int]]:
    """What a replay reads before compaction ran: every value, tombstones left out."""
    return [(value, HOME) for _, value in log if value is not None]


def after_compaction(log: list[Entry]) -> list[tuple[bytes, int]]:
    """What it reads after: the latest value of each key not deleted, in offset order."""
    latest = {key: offset for offset, (key, _) in enumerate(log)}
    return [(value, HOME) for offset, (key, value) in enumerate(log)
            if latest[key] == offset and value is not None]


def cancel(job_id: str) -> TaskControl:
    return TaskControl(job_id=job_id, task_id=-1, attempt=0,
                       reason=TaskControlReason.CANCELLED, at=now_ms())


def completed(book: JobBook, **job: object) -> list[Entry]:
    """A job of 6 items in 3 tasks run to COMPLETED by `book`; its ledger records."""
    first, issued = accepted(book, make_job(items=6, **job))
    answered = book.outbox()
    for task in issued:
        book.on_result(result_of(task), answered)
    book.tick(answered, now_ms())
    assert [e["type"] for e in events(book, answered)] == [JobEventType.COMPLETED]
    return ledger_log(book, first, answered)


def test_a_completed_job_deletes_its_task_entries_with_its_final_entry(
        make_book: MakeBook) -> None:
    book = make_book(make_config())
    log = completed(book)

    done_keys = [f"{JOB_ID}/{t}".encode() for t in range(3)]
    tombstones = [key for key, value in log if value is None]
    assert sorted(tombstones) == done_keys
    last_key, last_value = log[-1]
    assert last_key == JOB_ID.encode() and last_value is not None
    state = book.jobs[JOB_ID]
    assert (state.status, state.done, state.done_tasks, state.ok_items) == (
        LedgerStatus.COMPLETED, set(), 3, 6)
    assert after_compaction(log) == [(last_value, HOME)]  # the job's one entry
    final = read_record(CODEC, last_value, LedgerEntry)
    ended = read_record(CODEC, final["job"] or b"", Job)
    assert ended["inline_items"] == [] and ended["job_id"] == JOB_ID  # its items go too


@pytest.mark.parametrize("output_path", [None, "/tmp/out.jsonl"])
def test_a_replay_rebuilds_an_ended_job_alike_before_and_after_compaction(
        make_book: MakeBook, output_path: str | None) -> None:
    log = completed(make_book(make_config()), output_path=output_path)

    rebuilt = []
    for records in (before_compaction(log), after_compaction(log)):
        book = make_book(make_config())
        book.adopt(records, now_ms())
        state = book.ledger.rebuild(records)[JOB_ID]
        rebuilt.append((state.status, state.done, state.done_tasks, state.issued_tasks,
                        state.ok_items, state.error_items, state.output_due,
                        JOB_ID in book.jobs))
    assert rebuilt[0] == rebuilt[1] == (  # kept for retain_finished_s, as where it ended
        LedgerStatus.COMPLETED, set(), 3, 3, 6, 0, output_path is not None, True)


def test_a_late_result_of_an_adopted_ended_job_is_dropped_uncounted(
        make_book: MakeBook) -> None:
    log = completed(make_book(make_config()), output_path="/tmp/out.jsonl")
    book = make_book(make_config())
    book.adopt(after_compaction(log), now_ms())
    _, issued = accepted(make_book(make_config()), make_job(items=6))

    out = book.outbox()
    book.on_result(result_of(issued[1]), out)  # an attempt still running when it ended
    book.tick(out, now_ms())
    state = book.jobs[JOB_ID]
    assert (state.status, state.done_tasks, state.ok_items) == (LedgerStatus.COMPLETED, 3, 6)
    assert ledger_log(book, out) == [] and events(book, out) == []
    assert out.tallies[HOME][("late_results_dropped",)] == 1


def test_a_cancelled_job_deletes_the_entries_of_the_tasks_it_counted(
        make_book: MakeBook) -> None:
    book = make_book(make_config())
    first, (task0, task1, _) = accepted(book, make_job(items=6))
    out = book.outbox()
    book.on_result(result_of(task0), out)
    book.on_cancel(cancel(JOB_ID), HOME, out)
    book.on_result(result_of(task1), out)  # after the cancel: not counted
    log = ledger_log(book, first, out)

    assert [key for key, value in log if value is None] == [f"{JOB_ID}/0".encode()]
    for records in (before_compaction(log), after_compaction(log)):
        state = book.ledger.rebuild(records)[JOB_ID]
        assert (state.status, state.done_tasks, state.ok_items) == (
            LedgerStatus.CANCELLED, 1, 2)


def test_an_ended_job_leaves_memory_and_the_ledger_retain_finished_s_after_it_ended(
        make_book: MakeBook) -> None:
    """Else every job ever run kept an entry in the ledger, in each replica's standby copy
    and in each replay (2.4 KB of a replica's memory a job, 3,750 jobs measured)."""
    book = make_book(make_config())
    log = completed(book)
    within = book.outbox()
    book.tick(within, now_ms())
    assert ledger_log(book, within) == [] and JOB_ID in book.jobs
    past = book.outbox()
    book.tick(past, now_ms() + 601_000)  # retain_finished_s is 600
    assert ledger_log(book, past) == [(JOB_ID.encode(), None)] and book.jobs == {}
    assert after_compaction(log + ledger_log(book, past)) == []


def test_a_replica_deletes_the_entries_of_jobs_that_ended_before_its_window(
        make_book: MakeBook) -> None:
    log = completed(make_book(make_config()), output_path="/tmp/never-written.jsonl")
    book = make_book(make_config())
    later = now_ms() + 601_000
    book.adopt(after_compaction(log), later)
    assert book.jobs == {}
    out = book.outbox()
    book.tick(out, later)
    assert ledger_log(book, out) == [(JOB_ID.encode(), None)]
    again = book.outbox()
    book.tick(again, later)
    assert ledger_log(book, again) == []
