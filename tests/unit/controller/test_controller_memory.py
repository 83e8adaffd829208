"""The controller on the in-memory transport: its rounds from job to COMPLETED, exact counts
with duplicate results, a job taken over from the ledger by another replica, a cancel, the
output file of a replica that died, and unreadable job records."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from inferstream.client.client import Client, Job
from inferstream.controller.ledger import JobState
from inferstream.controller.metrics import ControllerMetrics
from inferstream.controller.outputs import OutputFiles
from inferstream.controller.replica import Controller
from inferstream.jobs.errors import JobCancelledError, JobFailedError, JobRejectedError
from inferstream.jobs.ids import new_job_id
from inferstream.kafka.settings import partition_for
from inferstream.schemas.records import (
    InlineItem,
    JobEventType,
    LedgerEntry,
    LedgerKind,
    Task,
    TaskControl,
    read_record,
)
from inferstream.schemas.records import Job as JobRecord
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.promtool import check_metrics, sample
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.pool import Responder
from tests.unit.support.records import (
    assert_completed_exactly,
    consumed,
    done_entries,
    events,
    item_names,
    settled,
)
from tests.unit.support.running import QuietRounds, Running

MakeController = Callable[..., Controller]
MakeResponder = Callable[..., Responder]


def submit(clients: MemoryKafkaClients, items: int, chunk_size: int = 3) -> Job:
    names = [f"item-{i:02d}" for i in range(items)]
    return Client(make_config(), CODEC, clients).submit(MODEL, names, chunk_size=chunk_size)


def test_a_job_goes_from_submission_to_completed(
        clients: MemoryKafkaClients, make_worker: Callable[..., Worker],
        make_controller: MakeController, running: Running) -> None:
    """Submitted through the Client, divided into tasks, run by a worker, collected."""
    config = make_config()
    job = submit(clients, items=10, chunk_size=3)
    running.workers(make_worker())
    running.controller(make_controller())
    running.until(settled(clients.broker, config))

    status = job.wait(timeout_s=5)
    assert (status.total_items, status.ok_items, status.total_tasks) == (10, 10, 4)
    tasks = [read_record(CODEC, v, Task) for v in clients.broker.values(config.task_topic())]
    assert sorted(len(t["items"]) for t in tasks) == [1, 3, 3, 3]
    assert_completed_exactly(clients.broker, config, job, items=10, tasks=4)
    assert {line["worker"] for line in job.results()} == {"w1"}


def test_a_job_on_another_partition_than_its_ids_gets_its_results_there(
        clients: MemoryKafkaClients, make_worker: Callable[..., Worker],
        make_controller: MakeController, running: Running) -> None:
    """A foreign client's partitioner put the job on a partition other than murmur2 of its
    id: the tasks carry that home partition and the worker's results go to it, where the
    replica owning the job reads them (with two replicas, murmur2's partition may be the
    other one's)."""
    config = make_config()
    job = Client(config, CODEC, clients).job(new_job_id())
    home = 1 - partition_for(job.job_id, 2)
    record = JobRecord(job_id=job.job_id, model=MODEL, model_version=None, pool=config.pool,
                       top_k=1, chunk_size=2, inputs=[],
                       inline_items=[InlineItem(name=f"i{n}", data=b"x") for n in range(4)],
                       submitted_at=0, submitter="foreign", output_path=None,
                       priority=0, weight=1.0)
    clients.broker.produce(config.topic("jobs"), home, job.job_id.encode(),
                           CODEC.encode("Job", record))
    running.workers(make_worker())
    running.controller(make_controller())
    running.until(settled(clients.broker, config))
    assert job.wait(timeout_s=5).ok_items == 4
    assert sorted(line["item"] for line in job.results()) == [f"i{n}" for n in range(4)]
    tasks = [read_record(CODEC, v, Task) for v in clients.broker.values(config.task_topic())]
    assert {t["home_partition"] for t in tasks} == {home}
    assert clients.broker.values(config.topic("results"), 1 - home) == []
    assert len(clients.broker.values(config.topic("results"), home)) == 2


def test_a_second_result_for_a_done_task_is_dropped(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    config = make_config()
    job = submit(clients, items=8, chunk_size=2)
    make_responder(copies=2)
    running.controller(make_controller())
    running.until(settled(clients.broker, config, answers=8))

    assert len(clients.broker.values(config.topic("results"))) == 2 * 4
    assert_completed_exactly(clients.broker, config, job, items=8, tasks=4)


def test_another_controller_resumes_a_job_from_the_ledger(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    """The first replica stops mid-job; the next one rebuilds the job from its ledger and
    finishes it, without accepting it again or re-issuing its tasks."""
    config = make_config(controller={"tasks_per_round": 1})
    job = submit(clients, items=6, chunk_size=1)
    responder = make_responder(pause_after=2)
    running.controller(make_controller(config))
    running.until(responder.paused.is_set)
    assert events(clients.broker, config, JobEventType.COMPLETED) == []

    responder.resume.set()
    running.controller(make_controller(config))
    running.until(settled(clients.broker, config))
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=6)


def test_a_cancelled_job_ends_with_the_counts_of_what_was_done(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    """Cancel after two of four tasks: CANCELLED with 4 items done, never COMPLETED; the
    later results are dropped; workers are told to skip the job."""
    config = make_config()
    broker = clients.broker
    job = submit(clients, items=8, chunk_size=2)
    responder = make_responder(pause_after=2)
    running.controller(make_controller())
    running.wait_for(lambda: responder.paused.is_set() and len(done_entries(broker, config)) == 2)
    job.cancel()
    running.wait_for(lambda: events(broker, config, JobEventType.CANCELLED))
    responder.resume.set()
    running.until(settled(broker, config, JobEventType.CANCELLED, answers=4))

    status = job.wait_final(timeout_s=5)
    assert (status.state, status.done_items, status.ok_items) == ("CANCELLED", 4, 4)
    assert events(broker, config, JobEventType.COMPLETED) == []
    with pytest.raises(JobCancelledError, match="cancelled after 4/8 items"):
        job.wait(timeout_s=5)
    controls = [read_record(CODEC, v, TaskControl) for v in broker.values("t.task-control")]
    assert [(c["job_id"], c["task_id"], c["reason"]) for c in controls] == [
        (job.job_id, -1, "CANCELLED")]


class DiesBeforeTheOutput(OutputFiles):
    """The output files of a replica killed after committing COMPLETED, before its output
    file was written."""

    def __init__(self, replica: Controller) -> None:
        super().__init__(replica.config, replica.clients)
        self.replica = replica
        self.died = threading.Event()

    def start(self, due: Iterable[JobState]) -> None:
        if any(state.output_due for state in due):
            self.replica.request_stop()
            self.died.set()


def output_recorded(broker: MemoryBroker) -> list[LedgerEntry]:
    entries = [read_record(CODEC, v, LedgerEntry) for v in broker.values("t.controller-ledger")]
    return [e for e in entries if e["kind"] == LedgerKind.JOB and e["output_written_at"]]


def test_a_replica_that_died_before_the_output_file_leaves_it_to_the_next(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running, tmp_path: Path) -> None:
    """The output file is part of a job's state: the next owner of the job's partition
    finds it due in the ledger, writes it and records it; a third writes nothing."""
    config = make_config()
    output = tmp_path / "out.jsonl"
    names = [f"item-{i:02d}" for i in range(6)]
    Client(config, CODEC, clients).submit(MODEL, names, chunk_size=2, output_path=str(output))
    make_responder()
    dies = make_controller()
    dies.outputs = died = DiesBeforeTheOutput(dies)
    running.controller(dies)
    running.until(died.died.is_set)
    assert events(clients.broker, config, JobEventType.COMPLETED) and not output.exists()

    running.controller(make_controller())
    running.until(lambda: output_recorded(clients.broker))
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(line["item"] for line in lines) == item_names(6)
    assert len(output_recorded(clients.broker)) == 1

    output.unlink()
    third = make_controller()
    third.hooks = quiet = QuietRounds(third.book)
    running.controller(third)
    running.until(lambda: quiet.rounds >= 2)
    assert not output.exists()  # written once is enough


@pytest.mark.parametrize("seed", range(3))
def test_counts_equal_the_output_when_another_replica_takes_over_at_a_random_point(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running, seed: int) -> None:
    """Issue 9.2: a replica that takes over rebuilds the job's counts from the ledger, whose
    last JOB entry (written at expansion and on PROGRESS) is older than its DONE entries."""
    tasks = 20
    stop_after = random.Random(seed).randint(1, tasks - 1)
    config = make_config(controller={"progress_interval_s": 600.0})
    job = submit(clients, items=2 * tasks, chunk_size=2)
    responder = make_responder(pause_after=stop_after)
    running.controller(make_controller(config))
    running.until(lambda: len(done_entries(clients.broker, config)) >= stop_after)
    responder.resume.set()
    running.controller(make_controller(config))
    running.until(settled(clients.broker, config))

    (completed,) = events(clients.broker, config, JobEventType.COMPLETED)
    lines = list(job.results())
    ok_lines = sum(1 for line in lines if line["status"] == "ok")
    assert len(lines) == 2 * tasks
    assert (completed["done_items"], completed["ok_items"]) == (2 * tasks, ok_lines)


def test_an_unreadable_job_record_keyed_by_a_job_id_is_rejected_with_the_reason(
        clients: MemoryKafkaClients, make_controller: MakeController, running: Running
        ) -> None:
    """Issue 9.3: the submitter of a job whose record cannot be read learns why, instead of
    waiting for a job that stays SUBMITTED; the dead letter keeps null and empty apart."""
    config = make_config()
    jobs = config.topic("jobs")
    clients.broker.produce(jobs, 0, b"20261202-000000-deadbeef", b"not avro", timestamp_ms=5)
    clients.broker.produce(jobs, 1, b"20261202-000000-0000feed", None, timestamp_ms=6)
    clients.broker.produce(jobs, 1, None, b"", timestamp_ms=7)
    running.controller(make_controller())
    running.until(lambda: consumed(clients.broker, config.controller_group(), jobs))

    rejected = {e["job_id"]: e for e in events(clients.broker, config, JobEventType.REJECTED)}
    assert set(rejected) == {"20261202-000000-deadbeef", "20261202-000000-0000feed"}
    assert "the job record could not be read: " in (
        rejected["20261202-000000-deadbeef"]["reason"] or "")
    status = Client(config, CODEC, clients).job("20261202-000000-deadbeef").progress()
    assert status.state == JobEventType.REJECTED
    letters = sorted((CODEC.decode(v, expected="DeadLetter")
                      for v in clients.broker.values(config.topic("dlq"))),
                     key=lambda d: d["origin_offset"] + 10 * d["origin_partition"])
    assert [d["value"] for d in letters] == [b"not avro", None, b""]
    assert [d["origin_timestamp"] for d in letters] == [5, 6, 7]
    assert all(d["timestamp"] > 1_000_000_000_000 for d in letters)  # dead-lettered now


def test_accepted_has_no_rate_until_an_item_is_done(
        clients: MemoryKafkaClients, make_controller: MakeController, running: Running
        ) -> None:
    """Issue 9.3: the schema says rate_items_per_s is null until measured."""
    config = make_config()
    submit(clients, items=3)
    running.controller(make_controller())
    running.until(lambda: events(clients.broker, config, JobEventType.ACCEPTED))
    (accepted,) = events(clients.broker, config, JobEventType.ACCEPTED)
    assert accepted["rate_items_per_s"] is None


def test_the_controller_counts_a_job_with_duplicate_results_once(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    config = make_config()
    job = submit(clients, items=8, chunk_size=2)
    make_responder(copies=2)
    metrics = ControllerMetrics(CollectorRegistry())
    running.controller(make_controller(hooks=metrics))
    running.until(settled(clients.broker, config, answers=8))

    assert job.wait(timeout_s=5).ok_items == 8
    r = metrics.registry
    assert sample(r, "inferstream_controller_jobs_accepted_total") == 1
    assert sample(r, "inferstream_controller_tasks_issued_total", pool="default") == 4
    assert sample(r, "inferstream_controller_tasks_done_total", pool="default") == 4
    assert sample(r, "inferstream_controller_late_results_dropped_total") == 4
    assert sample(r, "inferstream_controller_items_done_total", status="ok") == 8
    assert sample(r, "inferstream_controller_jobs", state="COMPLETED") == 1
    assert sample(r, "inferstream_controller_jobs", state="ACTIVE") == 0
    assert sample(r, "inferstream_controller_owned_partitions") == 2
    assert sample(r, "inferstream_controller_ledger_records_total") >= 4 + 2  # DONE + JOBs
    assert sample(r, "inferstream_controller_round_duration_seconds_count") > 0
    assert sample(r, "inferstream_controller_commit_duration_seconds_count") > 0
    check_metrics(generate_latest(r))


class OldWorkerVersions:
    """w1, of a release that did not check its version folders, announces version
    202612071053 of model `faces` (a yyyymmddHHMM folder), above what a Task carries."""

    def versions(self, pool: str, model: str) -> dict[str, list[int]]:
        return {"w1": [202612071053]} if model == "faces" else {}


def test_a_job_whose_version_no_task_can_carry_ends_and_the_others_run(
        clients: MemoryKafkaClients, make_worker: Callable[..., Worker],
        running: Running) -> None:
    """The controller exited on the first task of such a job, and again after each restart
    (the job was still there), every job of every model waiting: now the job is rejected
    (or fails, where w1 was not live yet when it came) saying why, and the next job runs."""
    config = make_config()
    stamped = Client(config, CODEC, clients).submit("faces", ["item-00"])
    job = submit(clients, items=4)
    running.workers(make_worker())
    running.controller(Controller(config, codec=CODEC, clients=clients,
                                  versions=OldWorkerVersions()))
    running.until(lambda: events(clients.broker, config, JobEventType.COMPLETED) and (
        events(clients.broker, config, JobEventType.REJECTED)
        or events(clients.broker, config, JobEventType.FAILED)))
    with pytest.raises((JobRejectedError, JobFailedError),
                       match="version 202612071053 of model 'faces', the newest its live "
                       "workers serve, is above 2147483647"):
        stamped.wait(timeout_s=5)
    assert job.wait(timeout_s=5).ok_items == 4
