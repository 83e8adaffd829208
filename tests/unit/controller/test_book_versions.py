"""The job book, issue 27: a job of a repository model runs on one version from start to end,
the newest among its pool's live workers when it is accepted (or the one it is pinned to),
recorded in its ledger entry and events and kept by a replica that takes it over; a worker that
declined one version may serve another. No Kafka, no thread."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferstream.controller.announcements import WorkerAnnouncements
from inferstream.controller.book import JobBook
from inferstream.controller.declines import PoolView
from inferstream.controller.outbox import Outbox
from inferstream.policy.view import NO_POLICY
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import (
    ItemStatus,
    JobEventType,
    LedgerKind,
    LedgerStatus,
    Task,
    TaskControlReason,
    TaskDeclined,
    TaskResult,
    WorkerAnnouncement,
    WorkerState,
    now_ms,
)
from tests.unit.controller.test_book import (
    CODEC,
    HOME,
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
from tests.unit.support.books import live_book

FACES = "faces"


def serving(table: WorkerAnnouncements, worker: str, *versions: int) -> None:
    """`worker` announces that it serves `versions` of FACES and efficientnet_lite0 (with
    none, a simulated model)."""
    now = now_ms()
    models = [FACES, "efficientnet_lite0"] if versions else ["sim:ms=1"]
    table.apply(worker.encode(), CODEC.encode("WorkerAnnouncement", WorkerAnnouncement(
        worker=worker, pool="default", models=models,
        model_versions={FACES: list(versions)} if versions else {},
        state=WorkerState.SERVING, started_at=now, timestamp=now, interval_s=5.0)))


def declined_by(task: Task, worker: str, served: list[str]) -> TaskDeclined:
    return TaskDeclined(job_id=task["job_id"], task_id=task["task_id"],
                        attempt=task["attempt"], worker=worker, model=task["model"],
                        served_models=served, reason="not served",
                        task=CODEC.encode("Task", task), declined_at=0)


def failed_items(book: JobBook, out: Outbox) -> list[str]:
    return [item["error"] or "" for _, result in written(out, book.topics.results, TaskResult)
            for item in result["items"] if item["status"] == ItemStatus.ERROR]


def job_entries(book: JobBook, out: Outbox) -> list[int | None]:
    return [e["model_version"] for e in ledger(book, out) if e["kind"] == LedgerKind.JOB]


def test_a_job_runs_on_the_newest_version_among_the_live_workers() -> None:
    """w1 serves versions 1 and 2, w2 version 1; w3 announced version 3 but is not in the
    group (it stopped, or never joined): the job runs on 2, and says so."""
    config = make_config()
    table = WorkerAnnouncements(config)
    serving(table, "w1", 1, 2)
    serving(table, "w2", 1)
    serving(table, "w3", 3)
    book = live_book(config, {"w1": [0, 1], "w2": [2, 3]}, table, versions=table)
    out, issued = accepted(book, make_job(items=4, model=FACES))
    assert [t["model_version"] for t in issued] == [2, 2]
    (event,) = events(book, out)
    assert (event["type"], event["model"], event["model_version"]) == (
        JobEventType.ACCEPTED, FACES, 2)
    assert set(job_entries(book, out)) == {2}


def test_a_version_that_appears_mid_job_changes_nothing_for_it() -> None:
    config = make_config(tasks_per_round=1)
    table = WorkerAnnouncements(config)
    serving(table, "w1", 1)
    book = live_book(config, {"w1": [0, 1, 2, 3]}, table, versions=table)
    _, (first,) = accepted(book, make_job(items=6, model=FACES))
    serving(table, "w1", 1, 2)  # version 2 dropped into its repository
    later = book.outbox()
    book.on_result(result_of(first), later)
    book.tick(later, now_ms())
    assert [t["model_version"] for _, t in tasks(book, later)] == [1]
    assert accepted(book, make_job(items=2, model=FACES, job_id="job-2"))[1][0][
        "model_version"] == 2  # the next job runs on it


def test_a_replica_that_takes_the_job_over_keeps_its_version() -> None:
    """The first book issues the job on version 1 and dies; meanwhile version 2 appears.
    The second adopts the job from the ledger and issues its late task again on 1."""
    config = make_config(migration_floor_s=1.0)
    pool = {"w1": [0, 1], "w2": [2, 3]}
    first_table = WorkerAnnouncements(config)
    serving(first_table, "w1", 1)
    serving(first_table, "w2", 1)
    first = live_book(config, pool, first_table, versions=first_table)
    out, (task0, task1) = accepted(first, make_job(items=4, model=FACES))
    done = first.outbox()
    first.on_result(result_of(task1, worker="w2"), done)
    records = [(r.value, HOME) for o in (out, done) for r in o.records.get(HOME, [])
               if r.topic == first.topics.ledger]

    second_table = WorkerAnnouncements(config)
    serving(second_table, "w1", 1, 2)
    serving(second_table, "w2", 1, 2)
    second = live_book(config, pool, second_table, versions=second_table)
    second.adopt(records, now_ms())
    assert second.jobs[task0["job_id"]].model_version == 1
    late = second.outbox()
    second.tick(late, now_ms() + 60_000)
    ((_, again),) = tasks(second, late)
    assert (again["task_id"], again["model_version"]) == (0, 1)


def test_a_pinned_job_runs_on_its_version() -> None:
    config = make_config()
    table = WorkerAnnouncements(config)
    serving(table, "w1", 1, 2)
    book = live_book(config, {"w1": [0, 1, 2, 3]}, table, versions=table)
    out, issued = accepted(book, make_job(items=4, model=FACES, model_version=1))
    assert [t["model_version"] for t in issued] == [1, 1]
    assert events(book, out)[0]["model_version"] == 1
    assert set(job_entries(book, out)) == {1}


def test_a_pinned_version_no_live_worker_serves_waits_then_fails_naming_it() -> None:
    config = make_config(model_wait_s=60)
    table = WorkerAnnouncements(config)
    serving(table, "w1", 2, 3)
    book = live_book(config, {"w1": [0, 1, 2, 3]}, table, versions=table)
    _, (first, _) = accepted(book, make_job(items=4, model=FACES, model_version=1))
    now = now_ms()
    out = book.outbox()
    book.on_declined(declined_by(first, "w1", ["faces:2", "faces:3"]), out)
    book.tick(out, now)
    assert tasks(book, out) == [] and failed_items(book, out) == []
    assert (events(book, out)[-1]["reason"] or "").startswith(
        "waiting for a worker of model 'faces' version 1: no live worker")
    over = book.outbox()
    book.tick(over, now + 61_000)
    (error,) = set(failed_items(book, over))
    assert error.startswith("no live worker of pool 'default' serves model 'faces' version 1 "
                            "(w1 serves faces:2, faces:3)")


def test_a_worker_that_declined_one_version_may_serve_another() -> None:
    pools = PoolView(describe=lambda _group: {"w1": [0, 1], "w2": [2, 3]})
    pools.record_decline("w1", "faces:1", ["faces:2"])
    pools.record_decline("w2", "faces:1", ["faces:3"])
    assert pools.target("g", "faces:1", task_id=0, attempt=2, partitions=4) is None
    assert pools.target("g", "faces:2", task_id=0, attempt=2, partitions=4) in (0, 1)


def test_with_no_live_worker_of_the_model_the_tasks_wait_and_take_the_first_ones_version(
        ) -> None:
    """No worker of the model in the group when the job is accepted: no task goes out
    without a version; once one joins, the version is its newest, in the job's ledger entry
    and events, and every task runs on it."""
    config = make_config()
    table = WorkerAnnouncements(config)
    serving(table, "sim-1")  # no version of FACES
    pool = {"sim-1": [0, 1, 2, 3]}
    book = live_book(config, pool, table, versions=table)
    out, issued = accepted(book, make_job(items=6, model=FACES))
    now = now_ms()
    book.tick(out, now)
    assert issued == [] and tasks(book, out) == []
    assert events(book, out)[0]["model_version"] is None
    assert (events(book, out)[-1]["reason"] or "").startswith(
        "waiting for a worker of model 'faces': no live worker of pool 'default' serves it")

    serving(table, "w1", 4)
    pool.update({"sim-1": [0, 1], "w1": [2, 3]})
    joined = book.outbox()
    book.tick(joined, now + 1000)
    issued_now = tasks(book, joined)
    assert [t["model_version"] for _, t in issued_now] == [4, 4, 4]
    assert {p for p, _ in issued_now[:2]} <= {2, 3}  # the held ones, on w1
    assert job_entries(book, joined)[0] == 4  # before any task of it went out
    assert [e["model_version"] for e in events(book, joined)] == [4]


def test_built_in_and_simulated_models_have_no_version() -> None:
    config = make_config()
    table = WorkerAnnouncements(config)
    serving(table, "w1", 1, 2)
    book = live_book(config, {"w1": [0, 1, 2, 3]}, table, versions=table)
    for model in ("efficientnet_lite0", "sim:ms=1"):
        out, issued = accepted(book, make_job(items=2, model=model, job_id=model))
        assert [t["model_version"] for t in issued] == [None]
        assert events(book, out)[0]["model_version"] is None


def test_a_version_on_a_built_in_model_or_in_the_name_is_rejected() -> None:
    table = WorkerAnnouncements(make_config())
    book = live_book(make_config(), {"w1": [0, 1, 2, 3]}, table, versions=table)
    for job, says in [
            (make_job(model="resnet50", model_version=2, job_id="j1"),
             "only repository models have versions"),
            (make_job(model="faces:2", job_id="j2"), "gives its model's version in model_version"),
            (make_job(model=FACES, model_version=0, job_id="j3"), "a whole number from 1")]:
        out, issued = accepted(book, job)
        (event,) = events(book, out)
        assert event["type"] == JobEventType.REJECTED and says in (event["reason"] or "")
        assert issued == []


def test_a_worker_serving_other_versions_is_not_starting_with_this_one() -> None:
    """Announcements name a repository model's versions: a worker that just joined with
    versions 2 and 3 is not one a task of version 1 waits for; one still starting, which
    announces no version yet, may be."""
    config = make_config()
    table = WorkerAnnouncements(config)
    serving(table, "w1", 2, 3)
    now = now_ms()
    table.apply(b"w2", CODEC.encode("WorkerAnnouncement", WorkerAnnouncement(
        worker="w2", pool="default", models=[FACES], model_versions={},
        state=WorkerState.STARTING, started_at=now, timestamp=now, interval_s=5.0)))
    assert table.starting("default", "faces:1", now) == ["w2"]
    assert table.starting("default", "faces:3", now) == ["w1", "w2"]
    assert table.versions("default", FACES) == {"w1": [2, 3]}


def test_a_held_task_goes_to_the_worker_that_declined_it_once_it_serves_its_version() -> None:
    """w1 declined a task of version 2, which it had not loaded yet; once it announces it
    serves version 2, the held task goes back to it."""
    config = make_config(model_wait_s=60)
    table = WorkerAnnouncements(config)
    serving(table, "w1", 1)
    book = live_book(config, {"w1": [0, 1, 2, 3]}, table, versions=table)
    _, (first, _) = accepted(book, make_job(items=4, model=FACES, model_version=2))
    now = now_ms()
    out = book.outbox()
    book.on_declined(declined_by(first, "w1", ["faces:1"]), out)
    book.tick(out, now)
    assert tasks(book, out) == [] and failed_items(book, out) == []
    serving(table, "w1", 1, 2)  # it loaded version 2
    later = book.outbox()
    book.tick(later, now + 1000)
    (_, again), *_ = tasks(book, later)
    assert (again["task_id"], again["attempt"], again["model_version"]) == (0, 2, 2)


def test_a_newest_version_no_task_can_carry_fails_the_held_job_saying_so() -> None:
    """No worker of the model is live when the job is accepted; the one that joins, of a
    release that did not check its version folders, serves version 2147483648 (above what
    a Task's model_version holds): the job fails with the reason, its tasks never go out."""
    config = make_config()
    table = WorkerAnnouncements(config)
    serving(table, "sim-1")
    pool = {"sim-1": [0, 1, 2, 3]}
    book = live_book(config, pool, table, versions=table)
    out, issued = accepted(book, make_job(items=4, model=FACES))
    book.tick(out, now_ms())
    assert issued == [] and events(book, out)[0]["type"] == JobEventType.ACCEPTED

    serving(table, "w1", 2**31)
    pool.update({"sim-1": [0, 1], "w1": [2, 3]})
    joined = book.outbox()
    book.tick(joined, now_ms() + 1000)
    (failed,) = events(book, joined)
    assert (failed["type"], failed["model_version"], failed["reason"]) == (
        JobEventType.FAILED, None, "version 2147483648 of model 'faces', the newest its live "
        "workers serve, is above 2147483647, the highest a task can carry: renumber its "
        "version folder")
    assert tasks(book, joined) == [] and failed_items(book, joined) == []
    assert [e["status"] for e in ledger(book, joined)] == [LedgerStatus.FAILED]
    assert [c["reason"] for c in controls(book, joined)] == [TaskControlReason.FINISHED]


class RefusingCodec(Codec):
    """Encodes as `Codec`, but no Task of job `job_id` fits its schema (as one of a field
    its producer filled beyond the schema's range would not)."""

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        if name == "Task" and record["job_id"] == self.job_id:
            raise SchemaError("record does not fit schema Task: inferstream.Task.top_k: "
                              "got 2147483648 (int), expected int")
        return super().encode(name, record)


def test_a_job_whose_tasks_cannot_be_encoded_fails_and_the_others_run() -> None:
    """Instead of the controller exiting on the first task of the job (and again after each
    restart, every other job waiting), the job fails with the reason and the others run."""
    config = make_config()
    book = JobBook(config, codec=RefusingCodec("bad"), policy=NO_POLICY,
                   describe=lambda _group: {"w1": [0, 1, 2, 3]},
                   partitions=lambda topic: 4 if topic == config.task_topic() else 2)
    out, issued = accepted(book, make_job(items=4, job_id="bad"))
    _, good = accepted(book, make_job(items=4, job_id="good"))
    book.tick(out, now_ms())
    assert issued == [] and [t["job_id"] for t in good] == ["good", "good"]
    (accepted_bad, failed) = [e for e in events(book, out) if e["job_id"] == "bad"]
    assert (accepted_bad["type"], failed["type"]) == (JobEventType.ACCEPTED,
                                                      JobEventType.FAILED)
    assert failed["reason"] == ("its tasks cannot be written: record does not fit schema "
                                "Task: inferstream.Task.top_k: got 2147483648 (int), "
                                "expected int")
    done = book.outbox()
    for task in good:
        book.on_result(result_of(task), done)
    book.tick(done, now_ms())
    assert [(e["job_id"], e["type"]) for e in events(book, done)] == [
        ("good", JobEventType.COMPLETED)]
