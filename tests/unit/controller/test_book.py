"""The job book on its own: records and the time in, what the controller writes out, with no
Kafka and no thread. A pool of two workers, w1 owning task partitions 0-1 and w2 2-3."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

import inferstream.controller
from inferstream.config import Config
from inferstream.controller.book import JobBook
from inferstream.controller.outbox import Outbox
from inferstream.policy.view import WorkerPolicy
from inferstream.schemas.records import (
    InlineItem,
    ItemStatus,
    Job,
    JobEvent,
    JobEventType,
    LedgerEntry,
    LedgerKind,
    LedgerStatus,
    Prediction,
    ResultSummary,
    Task,
    TaskControl,
    TaskControlReason,
    TaskDeclined,
    TaskResult,
    encode_result,
    now_ms,
    ok_item,
    read_record,
    read_result_summary,
)
from tests.unit.support.memory import CODEC, MODEL, POOL
from tests.unit.support.memory import make_config as base_config
from tests.unit.support.policies import FixedPolicy

HOME = 1  # the jobs partition the job arrived on
OWNER = {p: worker for worker, parts in POOL.items() for p in parts}
R = TypeVar("R", bound=Mapping[str, object])
MakeBook = Callable[..., JobBook]


def make_config(**controller: Any) -> Config:
    """A 4-partition task topic (the pool's), tasks issued only as workers need them."""
    return base_config(task_partitions=4, controller={"issue_ahead_s": 0.0, **controller})


def make_job(items: int = 4, chunk_size: int = 2, **fields: Any) -> Job:
    job = Job(job_id="20261202-100000-0000b00c", model=MODEL, model_version=None,
              pool="default", top_k=1, chunk_size=chunk_size, inputs=[],
              inline_items=[InlineItem(name=f"i{n}", data=b"x") for n in range(items)],
              submitted_at=0, submitter="test", output_path=None,
              priority=0, weight=1.0)
    return Job(**{**job, **fields})  # type: ignore[typeddict-item]


def written(out: Outbox, topic: str, kind: type[R]) -> list[tuple[int, R]]:
    """The records on `topic` in the outbox, with their partitions, in the order written
    (tombstones left out)."""
    return [(record.partition, read_record(CODEC, record.value, kind))
            for home in sorted(out.records) for record in out.records[home]
            if record.topic == topic and record.value is not None]


def events(book: JobBook, out: Outbox) -> list[JobEvent]:
    return [event for _, event in written(out, book.topics.events, JobEvent)]


def ledger(book: JobBook, out: Outbox) -> list[LedgerEntry]:
    return [entry for _, entry in written(out, book.topics.ledger, LedgerEntry)]


def tasks(book: JobBook, out: Outbox) -> list[tuple[int, Task]]:
    return written(out, book.config.task_topic(), Task)


def controls(book: JobBook, out: Outbox) -> list[TaskControl]:
    return [control for _, control in written(out, book.topics.controls, TaskControl)]


def result_of(task: Task, worker: str = "w1") -> ResultSummary:
    """The task's result from `worker`, on the version the task asks for, as the controller
    reads it off the results topic."""
    top = [Prediction(class_id=1, label="goldfish", score=0.9)]
    version = task["model_version"]
    result = TaskResult(job_id=task["job_id"], task_id=task["task_id"], attempt=task["attempt"],
                        worker=worker, model=task["model"],
                        model_version=None if version is None else str(version),
                        items=[ok_item(item, top) for item in task["items"]], started_at=0,
                        finished_at=0, decode_seconds=0.0, inference_seconds=0.01)
    return cast(ResultSummary, read_result_summary(CODEC, encode_result(CODEC, result)))


def accepted(book: JobBook, job: Job | None = None) -> tuple[Outbox, list[Task]]:
    out = book.outbox()
    book.on_job(job or make_job(), HOME, out)
    return out, [task for _, task in tasks(book, out)]


def test_an_accepted_job_has_its_first_tasks_in_the_outbox(make_book: MakeBook) -> None:
    book = make_book(make_config())
    out, issued = accepted(book, make_job(items=5))

    assert [e["type"] for e in events(book, out)] == [JobEventType.ACCEPTED]
    assert [(t["task_id"], len(t["items"]), t["home_partition"]) for t in issued] == [
        (0, 2, HOME), (1, 2, HOME), (2, 1, HOME)]
    partitions = [p for p, _ in tasks(book, out)]
    assert partitions == [(partitions[0] + n) % 4 for n in range(3)]  # round robin
    (entry,) = ledger(book, out)
    assert (entry["status"], entry["issued_tasks"], entry["expanded"]) == (
        LedgerStatus.ACTIVE, 3, True)
    assert set(out.records) == {HOME}  # all in the transaction of the job's home
    assert out.tallies[HOME][("tasks_issued", "default")] == 3


def test_paced_workers_hold_two_tasks_each_until_results_show_their_speed(
        make_book: MakeBook) -> None:
    book = make_book(make_config(issue_ahead_s=10.0))
    out, (first,) = accepted(book, make_job(items=20))
    book.tick(out, now_ms())
    assert sorted(p for p, _ in tasks(book, out)) == [0, 1, 2, 3]  # two on w1, two on w2

    again = book.outbox()
    book.on_result(result_of(first), again)  # 5 ms per item: the rest is far below 10 s
    book.tick(again, now_ms())
    assert [t["task_id"] for _, t in tasks(book, again)] == [4, 5, 6, 7, 8, 9]
    assert {OWNER[p] for p, _ in tasks(book, again)} == {"w1", "w2"}


@pytest.mark.parametrize(("fields", "reason"), [
    ({"top_k": 0}, "top_k"), ({"model": "no sense"}, "no sense"),
    ({"pool": "gpu"}, "unknown pool 'gpu'"), ({"items": 0}, "empty input")])
def test_a_rejected_job_says_why_and_issues_nothing(
        fields: dict[str, Any], reason: str, make_book: MakeBook) -> None:
    book = make_book(make_config())
    items = fields.pop("items", 4)
    out, issued = accepted(book, make_job(items=items, **fields))

    (event,) = events(book, out)
    assert event["type"] == JobEventType.REJECTED and reason in (event["reason"] or "")
    assert [e["status"] for e in ledger(book, out)] == [LedgerStatus.REJECTED]
    assert issued == [] and not book.busy


def test_an_unreadable_job_record_keyed_by_a_job_id_is_rejected(make_book: MakeBook) -> None:
    book = make_book(make_config())
    out = book.outbox()
    book.on_unreadable_job(b"20261202-000000-deadbeef", 0, "not avro", out)
    book.on_unreadable_job(b"\xff\xfe", 0, "not avro", out)  # no job id: nobody to tell
    (event,) = events(book, out)
    assert (event["job_id"], event["type"]) == ("20261202-000000-deadbeef",
                                                JobEventType.REJECTED)
    assert event["reason"] == "the job record could not be read: not avro"


def test_a_result_is_counted_once_and_a_duplicate_dropped(make_book: MakeBook) -> None:
    book = make_book(make_config())
    _, (task, _) = accepted(book)
    out = book.outbox()
    book.on_result(result_of(task), out)
    book.on_result(result_of(task, worker="w2"), out)  # a later attempt's result

    done = [e for e in ledger(book, out) if e["kind"] == LedgerKind.TASK]
    assert [(e["task_id"], e["status"], e["ok_items"], e["worker"]) for e in done] == [
        (0, LedgerStatus.DONE, 2, "w1")]
    assert out.tallies[HOME][("late_results_dropped",)] == 1
    assert book.jobs[task["job_id"]].done_items == 2


def test_a_job_completes_with_its_event_ledger_entry_and_a_finish_control(
        make_book: MakeBook) -> None:
    book = make_book(make_config())
    _, issued = accepted(book)
    out = book.outbox()
    for task in issued:
        book.on_result(result_of(task), out)
    book.tick(out, now_ms())

    (completed,) = events(book, out)
    assert completed["type"] == JobEventType.COMPLETED
    assert (completed["total_items"], completed["ok_items"], completed["total_tasks"]) == (
        4, 4, 2)
    (entry,) = [e for e in ledger(book, out) if e["kind"] == LedgerKind.JOB]
    assert (entry["status"], entry["done_tasks"]) == (LedgerStatus.COMPLETED, 2)
    assert [(c["task_id"], c["reason"]) for c in controls(book, out)] == [
        (-1, TaskControlReason.FINISHED)]
    assert not book.busy
    book.tick(book.outbox(), now_ms() + 601_000)  # past retain_finished_s
    assert book.jobs == {}


def test_a_declined_task_goes_to_another_worker_then_fails_when_none_serves_it(
        make_book: MakeBook) -> None:
    book = make_book(make_config(model_wait_s=0))  # no wait for a worker of the model
    _, (task, _) = accepted(book)
    out = book.outbox()
    book.on_declined(declined(task, "w1"), out)
    ((partition, again),) = tasks(book, out)
    assert partition in POOL["w2"] and again["attempt"] == 2

    last = book.outbox()
    book.on_declined(declined(again, "w2"), last)
    assert tasks(book, last) == []
    ((_, failed),) = written(last, book.topics.results, TaskResult)
    assert {i["status"] for i in failed["items"]} == {ItemStatus.ERROR}
    assert "no live worker of pool 'default' serves model 'sim:ms=0'" in (
        failed["items"][0]["error"] or "")


def declined(task: Task, worker: str) -> TaskDeclined:
    return TaskDeclined(job_id=task["job_id"], task_id=task["task_id"],
                        attempt=task["attempt"], worker=worker, model=task["model"],
                        served_models=["resnet50"], reason="not served",
                        task=CODEC.encode("Task", task), declined_at=0)


def test_a_cancelled_job_ends_cancelled_and_counts_nothing_after(make_book: MakeBook) -> None:
    book = make_book(make_config())
    _, (task, _) = accepted(book)
    out = book.outbox()
    cancel = TaskControl(job_id=task["job_id"], task_id=-1, attempt=0,
                         reason=TaskControlReason.CANCELLED, at=0)
    book.on_cancel(cancel, HOME, out)
    book.on_result(result_of(task), out)
    book.tick(out, now_ms())

    assert [(e["type"], e["reason"]) for e in events(book, out)] == [
        (JobEventType.CANCELLED, "cancelled on request")]
    assert [(e["kind"], e["status"]) for e in ledger(book, out)] == [
        (LedgerKind.JOB, LedgerStatus.CANCELLED)]
    assert [(c["task_id"], c["reason"]) for c in controls(book, out)] == [
        (-1, TaskControlReason.CANCELLED)]


#: both workers serve the model at 100 items/s, as the policy says
SPEEDS = FixedPolicy(workers={w: WorkerPolicy(0.5, True, 100.0, (MODEL,)) for w in POOL})


def test_a_late_task_is_migrated_to_the_other_worker(make_book: MakeBook) -> None:
    book = make_book(make_config(migration_floor_s=1.0), SPEEDS)
    out, (task,) = accepted(book, make_job(items=2))
    ((first, _),) = tasks(book, out)
    late = book.outbox()
    book.tick(late, now_ms() + 60_000)  # the deadline (2 items at 10 ms, x3, + 1 s) passed

    ((partition, again),) = tasks(book, late)
    assert OWNER[partition] != OWNER[first]
    assert (again["task_id"], again["attempt"]) == (task["task_id"], 2)
    assert [(c["task_id"], c["attempt"], c["reason"]) for c in controls(book, late)] == [
        (task["task_id"], 2, TaskControlReason.MIGRATED)]


def test_a_late_task_out_of_attempts_fails_its_items(make_book: MakeBook) -> None:
    book = make_book(make_config(migration_floor_s=1.0, max_attempts=1), SPEEDS)
    _, (task,) = accepted(book, make_job(items=2))
    late = book.outbox()
    book.tick(late, now_ms() + 60_000)

    assert tasks(book, late) == []
    ((_, failed),) = written(late, book.topics.results, TaskResult)
    assert (failed["task_id"], failed["worker"]) == (task["task_id"], "controller")
    assert "has used its 1 attempts" in (failed["items"][0]["error"] or "")


def test_a_task_failed_out_of_attempts_is_no_duplicate_of_its_late_attempt(
        make_book: MakeBook) -> None:
    """The failure the controller writes for a task out of attempts is an attempt of its
    own, above the one its late worker holds, and the workers are told to skip that one: with
    the same attempt, a late worker that committed its result after all (its job not ended:
    other tasks outstanding) put a second (job, task, attempt) on the results topic, which
    read committed holds none of (guarantee 2)."""
    book = make_book(make_config(migration_floor_s=1.0, max_attempts=1), SPEEDS)
    _, (task, _) = accepted(book, make_job(items=4))
    late = book.outbox()
    book.tick(late, now_ms() + 60_000)

    failures = [r for _, r in written(late, book.topics.results, TaskResult)]
    assert {(r["task_id"], r["attempt"]) for r in failures} == {(0, 2), (1, 2)}
    assert {(c["task_id"], c["attempt"], c["reason"]) for c in controls(book, late)} == {
        (0, 2, TaskControlReason.MIGRATED), (1, 2, TaskControlReason.MIGRATED)}
    after = book.outbox()
    book.on_result(read_result_summary(CODEC, encode_result(CODEC, failures[0])), after)
    book.on_result(result_of(task), after)  # the late worker's, committed after all
    assert book.jobs[task["job_id"]].done_items == 2  # the failure counted, it dropped


def test_another_book_adopts_the_job_from_the_ledger_and_carries_on(make_book: MakeBook) -> None:
    config = make_config(tasks_per_round=1)
    first = make_book(config)
    out, _ = accepted(first, make_job(items=8))
    first.tick(out, now_ms())
    records = [(value, HOME) for value in (r.value for r in out.records[HOME]
                                           if r.topic == first.topics.ledger)]

    second = make_book(config)
    second.adopt(records, now_ms())
    more = second.outbox()
    second.tick(more, now_ms())
    assert [t["task_id"] for _, t in tasks(second, more)] == [2]
    assert [i["name"] for _, t in tasks(second, more) for i in t["items"]] == ["i4", "i5"]


def test_an_output_file_is_due_once_completed_and_recorded_when_written(
        make_book: MakeBook) -> None:
    book = make_book(make_config())
    _, issued = accepted(book, make_job(output_path="/tmp/out.jsonl"))
    out = book.outbox()
    for task in issued:
        book.on_result(result_of(task), out)
    book.tick(out, now_ms())
    job_id = issued[0]["job_id"]
    assert [s.job_id for s in book.outputs_due({HOME})] == [job_id] and book.busy
    assert book.outputs_due({1 - HOME}) == []  # not this replica's to write

    recorded = book.outbox()
    book.output_written(job_id, 1234, recorded)
    assert [e["output_written_at"] for e in ledger(book, recorded)] == [1234]
    assert book.outputs_due({HOME}) == [] and not book.busy


DECISIONS = ("book", "issuing", "migration", "deadlines", "pacing", "declines", "ledger",
             "expansion", "admission", "sizing", "placement", "outbox", "waiting", "refused")


@pytest.mark.parametrize("module", DECISIONS)
def test_the_book_and_what_it_uses_start_no_thread_and_hold_no_kafka_client(
        module: str) -> None:
    folder = Path(inferstream.controller.__file__).parent
    tree = ast.parse((folder / f"{module}.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert not imported & {"threading", "queue", "concurrent.futures", "aiokafka",
                           "inferstream.kafka.reader", "inferstream.kafka.follower"}
    if module != "outbox":  # its dead letters read a consumed message's timestamp type
        assert not {name for name in imported if name.startswith("confluent_kafka")}


def test_what_the_book_knows_of_workers_gone_is_forgotten(make_book: MakeBook) -> None:
    """Each worker process has an id of its own (host-pid): a controller that ran for months
    kept the speed, recent times, served models and declines of every worker it ever heard
    from. Those silent for an hour that are no member of the pool now, holding none of its
    tasks, are forgotten; a member keeps its figures, however long it has been idle."""
    book = make_book(make_config(tasks_per_round=4))
    _, issued = accepted(book, make_job(items=8))
    out = book.outbox()
    for n, task in enumerate(issued[:3]):
        book.on_result(result_of(task, worker=f"gone-{n}"), out)
    book.on_result(result_of(issued[3], worker="w1"), out)
    book.tick(out, now_ms())
    assert len(book.pools.served) == 4  # nothing forgotten within the hour

    book.tick(book.outbox(), now_ms() + 3_660_000)
    assert set(book.pools.served) == {"w1"}
    assert book.deadlines.observed("gone-0", MODEL) is None
    assert book.deadlines.speculation.recent.last_ms.keys() == {"w1"}
    assert book.deadlines.observed("w1", MODEL) is not None
