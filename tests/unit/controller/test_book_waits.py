"""The job book, issue 26: a task that no live worker of its pool may serve waits for a worker
that is starting with its model (or for `model_wait_s`) instead of failing, and a replica that
takes a job over gives the tasks its predecessor issued deadlines. No Kafka, no thread."""

from __future__ import annotations

from inferstream.controller.announcements import WorkerAnnouncements
from inferstream.controller.book import JobBook
from inferstream.controller.outbox import Outbox
from inferstream.policy.view import WorkerPolicy
from inferstream.schemas.records import (
    ItemStatus,
    JobEventType,
    LedgerEntry,
    LedgerKind,
    Task,
    TaskControlReason,
    TaskDeclined,
    TaskResult,
    WorkerAnnouncement,
    WorkerState,
    now_ms,
    read_record,
)
from tests.unit.controller.test_book import (
    CODEC,
    HOME,
    MODEL,
    MakeBook,
    accepted,
    controls,
    events,
    ledger,
    make_config,
    make_job,
    result_of,
    tasks,
    written,
)
from tests.unit.controller.test_book import SPEEDS as SIM_SPEEDS
from tests.unit.support.books import live_book
from tests.unit.support.policies import FixedPolicy

LITE0 = "efficientnet_lite0"


def announce(table: WorkerAnnouncements, worker: str, at_ms: int,
             state: WorkerState = WorkerState.STARTING) -> None:
    table.apply(worker.encode(), CODEC.encode("WorkerAnnouncement", WorkerAnnouncement(
        worker=worker, pool="default", models=[LITE0], model_versions={}, state=state,
        started_at=at_ms, timestamp=at_ms, interval_s=5.0)))


def declined_by(task: Task, worker: str, served: str = "sim:ms=0") -> TaskDeclined:
    return TaskDeclined(job_id=task["job_id"], task_id=task["task_id"],
                        attempt=task["attempt"], worker=worker, model=task["model"],
                        served_models=[served], reason="not served",
                        task=CODEC.encode("Task", task), declined_at=0)


def failed_items(book: JobBook, out: Outbox) -> list[str]:
    return [item["error"] or "" for _, result in written(out, book.topics.results, TaskResult)
            for item in result["items"] if item["status"] == ItemStatus.ERROR]


def test_a_task_every_live_worker_declines_waits_for_the_worker_starting_with_its_model(
        ) -> None:
    """The mixed pool of issue 26: a sim worker owns every partition while the lite0 worker
    compiles. The job's tasks are held, its events say for whom, nothing more is issued;
    once the lite0 worker is in the group every item goes to it."""
    pool = {"sim-1": [0, 1, 2, 3]}
    table = WorkerAnnouncements(make_config())
    book = live_book(make_config(model_wait_s=0, tasks_per_round=1), pool, table)
    _, (first,) = accepted(book, make_job(items=6, model=LITE0))
    now = now_ms()
    announce(table, "lite-1", now)

    out = book.outbox()
    book.on_declined(declined_by(first, "sim-1"), out)
    book.tick(out, now)
    assert tasks(book, out) == [] and failed_items(book, out) == []
    (waiting,) = events(book, out)
    assert waiting["type"] == JobEventType.PROGRESS
    assert waiting["reason"] == ("waiting for a worker of model 'efficientnet_lite0': lite-1 "
                                 "of pool 'default' is starting with it")
    again = book.outbox()
    book.on_declined(declined_by(first, "sim-2"), again)  # the held task's, once more
    assert tasks(book, again) == [] and failed_items(book, again) == []

    pool.update({"sim-1": [0, 1], "lite-1": [2, 3]})  # it joined the group
    joined = book.outbox()
    book.tick(joined, now + 1000)
    issued = tasks(book, joined)
    assert [(t["task_id"], t["attempt"]) for _, t in issued] == [(0, 2), (1, 1)]
    assert {p for p, _ in issued} <= {2, 3}  # the held task on lite-1's partitions
    assert [e["reason"] for e in events(book, joined)] == [None]  # it waits no more

    done = book.outbox()
    for _, task in issued:
        book.on_result(result_of(task, worker="lite-1"), done)
    book.tick(done, now + 2000)
    (last,) = tasks(book, done)
    book.on_result(result_of(last[1], worker="lite-1"), done)
    book.tick(done, now + 3000)
    assert events(book, done)[-1]["type"] == JobEventType.COMPLETED
    assert book.jobs[first["job_id"]].ok_items == 6


def test_a_worker_that_dies_while_starting_stops_counting_and_the_items_fail() -> None:
    pool = {"sim-1": [0, 1, 2, 3]}
    table = WorkerAnnouncements(make_config())
    book = live_book(make_config(model_wait_s=0), pool, table)
    _, (first, _) = accepted(book, make_job(items=4, model=LITE0))
    now = now_ms()
    announce(table, "lite-1", now)
    out = book.outbox()
    book.on_declined(declined_by(first, "sim-1"), out)
    book.tick(out, now + 14_000)  # its last announcement is 3 intervals old: fresh still
    assert failed_items(book, out) == []

    gone = book.outbox()
    book.tick(gone, now + 16_000)
    errors = failed_items(book, gone)
    assert len(errors) == 2 and all(
        "no live worker of pool 'default' serves model 'efficientnet_lite0' (sim-1 serves "
        "sim:ms=0)" in error for error in errors)


def test_with_nobody_starting_a_task_waits_model_wait_s_then_fails() -> None:
    pool = {"sim-1": [0, 1, 2, 3]}
    book = live_book(make_config(model_wait_s=60), pool, WorkerAnnouncements(make_config()))
    _, (first, second) = accepted(book, make_job(items=4, model=LITE0))
    now = now_ms()
    out = book.outbox()
    book.on_declined(declined_by(first, "sim-1"), out)
    book.tick(out, now)
    (waiting,) = events(book, out)
    assert "none is starting; its tasks fail at" in (waiting["reason"] or "")
    assert failed_items(book, out) == []

    over = book.outbox()
    book.tick(over, now + 61_000)
    assert len(failed_items(book, over)) == 2
    later = book.outbox()
    book.on_declined(declined_by(second, "sim-1"), later)  # the job gave up: at once now
    assert len(failed_items(book, later)) == 2


#: both workers serve the model at 100 items/s, as the policy says
SPEEDS = FixedPolicy(workers={w: WorkerPolicy(0.5, True, 100.0, (LITE0,)) for w in ("w1", "w2")})


def ledger_records(*outs: Outbox) -> list[tuple[bytes, int]]:
    return [(r.value, HOME) for out in outs for r in out.records.get(HOME, [])
            if r.topic == "t.controller-ledger"]


def takeover() -> tuple[JobBook, list[tuple[bytes, int]], Task]:
    """A first book issues a job's two tasks, task 0 declined once (attempt 2), task 1 done;
    a second book adopts the job from the ledger. Task 0 is what the second waits for."""
    config = make_config(migration_floor_s=1.0)
    pool: dict[str, list[int]] = {"w1": [0, 1], "w2": [2, 3]}
    first = live_book(config, pool, WorkerAnnouncements(config), SPEEDS)
    out, (task0, task1) = accepted(first, make_job(items=4, model=LITE0))
    redo = first.outbox()
    first.on_declined(declined_by(task0, "w1"), redo)
    first.on_result(result_of(task1, worker="w2"), redo)
    records = ledger_records(out, redo)
    second = live_book(config, pool, WorkerAnnouncements(config), SPEEDS)
    return second, records, task0


def test_a_takeover_gives_the_earlier_tasks_deadlines_and_issues_a_late_one_above_them(
        ) -> None:
    second, records, task0 = takeover()
    assert [e["max_attempt"] for e in (_entry(value) for value, _ in records)
            if e["kind"] == LedgerKind.JOB][-1] == 2  # written with the declined task
    second.adopt(records, now_ms())
    assert len(second.deadlines) == 1  # task 0: task 1 is done

    late = second.outbox()
    second.tick(late, now_ms() + 60_000)
    ((_, again),) = tasks(second, late)
    assert (again["task_id"], again["attempt"]) == (0, 3)  # above the first owner's 2
    assert [i["name"] for i in again["items"]] == [i["name"] for i in task0["items"]]
    assert [(c["task_id"], c["attempt"], c["reason"]) for c in controls(second, late)] == [
        (0, 3, TaskControlReason.MIGRATED)]
    assert [e["max_attempt"] for e in ledger(second, late) if e["kind"] == LedgerKind.JOB] == [3]


def test_a_job_whose_ledger_records_no_attempt_is_adopted_without_deadlines() -> None:
    """A ledger written before max_attempt (0: not recorded): the earlier tasks wait as
    before, since an attempt above theirs cannot be known."""
    second, records, _ = takeover()
    older = [(CODEC.encode("LedgerEntry", {**_entry(value), "max_attempt": 0}), home)
             for value, home in records]
    second.adopt(older, now_ms())
    assert len(second.deadlines) == 0 and len(second.jobs) == 1


def test_an_adopted_task_no_live_worker_serves_waits_model_wait_s_then_fails() -> None:
    """The first owner held task 0 (every live worker declined it) and died: the second finds
    it late with no worker known to serve its model, holds it as a decline would, and fails
    its items once `model_wait_s` is over (it waited forever before)."""
    second, records, _ = takeover()
    config = make_config(model_wait_s=600, migration_floor_s=1.0)
    pool = {"sim-1": [0, 1, 2, 3]}  # the lite0 workers are gone
    third = live_book(config, pool, WorkerAnnouncements(config))
    third.adopt(records, now_ms())
    now = now_ms() + 60_000
    late = third.outbox()
    third.tick(late, now)
    ((_, again),) = tasks(third, late)  # to a live worker that has not declined it yet
    assert again["attempt"] == 3 and [c["attempt"] for c in controls(third, late)] == [3]

    held = third.outbox()
    third.on_declined(declined_by(again, "sim-1"), held)
    third.tick(held, now + 1000)
    assert failed_items(third, held) == [] and tasks(third, held) == []
    assert "none is starting" in (events(third, held)[-1]["reason"] or "")
    over = third.outbox()
    third.tick(over, now + 600_000)
    errors = failed_items(third, over)
    assert len(errors) == 2 and "serves model 'efficientnet_lite0'" in errors[0]
    assert second.jobs == {}


def _entry(value: bytes) -> LedgerEntry:
    return read_record(CODEC, value, LedgerEntry)


def test_a_decline_of_an_attempt_superseded_since_issues_nothing(make_book: MakeBook) -> None:
    """A late task goes out again as attempt 2; its partition then moves to a worker of
    another model that has not read the task control yet (workers follow it as they can),
    which declines attempt 1. Issued again for that decline, attempt 2 went out twice,
    and both copies could commit a (job, task, 2): a duplicate on the results topic."""
    book = make_book(make_config(migration_floor_s=1.0), SIM_SPEEDS)
    _, (task,) = accepted(book, make_job(items=2))
    late = book.outbox()
    book.tick(late, now_ms() + 60_000)
    assert [t["attempt"] for _, t in tasks(book, late)] == [2]

    out = book.outbox()
    book.on_declined(declined_by(task, "w3", served="resnet50"), out)
    book.tick(out, now_ms() + 61_000)
    assert tasks(book, out) == []
    assert book.pools.declined["w3"] == {MODEL}  # what it said of itself is kept


def test_a_decline_of_the_attempt_failed_out_of_attempts_issues_nothing(
        make_book: MakeBook) -> None:
    """A late task out of attempts is failed as its next attempt (2); its partition then
    moves to a worker of another model that has not read the task control yet, which
    declines attempt 1 before the controller reads its failure back. Issued again for that
    decline, attempt 2 went out as a task besides the failure: a second (job, task, 2) on the
    results topic once a worker committed it."""
    book = make_book(make_config(migration_floor_s=1.0, max_attempts=1), SIM_SPEEDS)
    _, (task,) = accepted(book, make_job(items=2))
    late = book.outbox()
    book.tick(late, now_ms() + 60_000)
    assert [(r["task_id"], r["attempt"]) for _, r in written(
        late, book.topics.results, TaskResult)] == [(0, 2)]

    out = book.outbox()
    book.on_declined(declined_by(task, "w3", served="resnet50"), out)
    book.tick(out, now_ms() + 61_000)
    assert tasks(book, out) == []
    assert written(out, book.topics.results, TaskResult) == []


def test_an_adopted_task_failed_for_want_of_a_worker_fails_as_an_attempt_of_its_own() -> None:
    """The pool's workers are all away (restarting) when a replica takes a job over: its
    outstanding task 0, issued as attempt 1 and still on its partition, is late with no
    live worker, held `model_wait_s`, and failed. Failed as attempt 1, a worker back later
    ran the attempt 1 it found on its partition and committed a second (job, 0, 1) on the
    results topic: the failure is attempt 2, and workers are told to skip attempt 1."""
    config = make_config(model_wait_s=60, migration_floor_s=1.0)
    pool: dict[str, list[int]] = {"w1": [0, 1], "w2": [2, 3]}
    first = live_book(config, pool, WorkerAnnouncements(config), SPEEDS)
    out, (task0, task1) = accepted(first, make_job(items=4, model=LITE0))
    done = first.outbox()
    first.on_result(result_of(task1, worker="w2"), done)
    pool.clear()
    second = live_book(config, pool, WorkerAnnouncements(config), SPEEDS)
    second.adopt(ledger_records(out, done), now_ms())
    now = now_ms() + 60_000
    held = second.outbox()
    second.tick(held, now)
    assert failed_items(second, held) == [] and tasks(second, held) == []

    over = second.outbox()
    second.tick(over, now + 61_000)
    ((_, failed),) = written(over, second.topics.results, TaskResult)
    assert task0["attempt"] == 1 and (failed["task_id"], failed["attempt"]) == (0, 2)
    assert [(c["task_id"], c["attempt"], c["reason"]) for c in controls(second, over)] == [
        (0, 2, TaskControlReason.MIGRATED)]


def test_a_task_failed_for_want_of_a_worker_is_not_failed_again_as_late() -> None:
    """Task 0 goes out again as attempt 2 (of 2) after a decline; its worker declines that
    too, late, and no live worker serves the model: its items fail as attempt 3. The same
    round found it late out of attempts, where it was still waited for, and `migration`
    failed it as attempt 3 too: a second (job, 0, 3) on the results topic."""
    config = make_config(model_wait_s=0, migration_floor_s=1.0, max_attempts=2)
    pool: dict[str, list[int]] = {"w1": [0, 1], "w2": [2, 3]}
    book = live_book(config, pool, WorkerAnnouncements(config), SPEEDS)
    _, (first, _) = accepted(book, make_job(items=4, model=LITE0))
    now = now_ms()
    out = book.outbox()
    book.on_declined(declined_by(first, "w1"), out)
    book.tick(out, now)
    ((_, again),) = tasks(book, out)
    assert again["attempt"] == 2

    late = book.outbox()
    book.on_declined(declined_by(again, "w2"), late)
    book.tick(late, now + 120_000)
    assert [(r["task_id"], r["attempt"]) for _, r in written(
        late, book.topics.results, TaskResult)] == [(0, 3)]
    assert [(c["task_id"], c["attempt"]) for c in controls(book, late)] == [(0, 3)]
