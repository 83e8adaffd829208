"""The controller on the in-memory transport: its rounds from job to COMPLETED, exact counts
with duplicate results, a job taken over from the ledger by another replica, and a
transaction that is stuck, fails, or fails after taking effect."""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry, generate_latest

from inferstream.client.client import Client, Job
from inferstream.config import Config, ControllerConfig, WorkerConfig
from inferstream.controller import replica as controller_module
from inferstream.controller.ledger import JobState
from inferstream.controller.metrics import ControllerMetrics
from inferstream.controller.outputs import OutputFiles
from inferstream.controller.replica import Controller, controller_group
from inferstream.jobs.errors import JobCancelledError
from inferstream.jobs.ids import new_job_id
from inferstream.kafka.settings import partition_for
from inferstream.kafka.topics import topic_specs
from inferstream.models import load_model
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    InlineItem,
    JobEvent,
    JobEventType,
    LedgerEntry,
    LedgerKind,
    LedgerStatus,
    Prediction,
    Task,
    TaskControl,
    TaskResult,
    ok_item,
    read_record,
)
from inferstream.schemas.records import Job as JobRecord
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.testing.clients.sync_producer import MemoryProducer
from inferstream.worker import new_worker
from tests.unit.promtool import check_metrics, sample

MODEL = "sim:ms=0"
CODEC = Codec(None)
STATE = KafkaError._STATE


def make_config(**controller: Any) -> Config:
    settings = {"idle_exit_s": 0.1, "watchdog_s": None, "progress_interval_s": 0.0,
                **controller}
    return Config(bootstrap_servers="mem:1", topic_prefix="t.", partitions=2,
                  task_partitions=2,
                  worker=WorkerConfig(models=(MODEL,), max_wait_ms=1.0, worker_id="w1",
                                      decode_threads=2),
                  controller=ControllerConfig(**settings))


@pytest.fixture
def clients() -> MemoryKafkaClients:
    broker = MemoryBroker()
    broker.create_topics(topic_specs(make_config()))
    return MemoryKafkaClients(broker)


def submit(clients: MemoryKafkaClients, config: Config, items: int, chunk_size: int = 3
           ) -> Job:
    names = [f"item-{i:02d}" for i in range(items)]
    return Client(config, CODEC, clients).submit(MODEL, names, chunk_size=chunk_size)


def item_names(items: int) -> list[str]:
    return [os.path.abspath(f"item-{i:02d}") for i in range(items)]


def events(broker: MemoryBroker, config: Config, kind: JobEventType) -> list[Any]:
    found = [read_record(CODEC, v, JobEvent) for v in broker.values(config.topic("job-events"))]
    return [event for event in found if event["type"] == kind]


def done_entries(broker: MemoryBroker, config: Config) -> Counter[int]:
    """How many DONE ledger entries each task has."""
    entries = [read_record(CODEC, v, LedgerEntry)
               for v in broker.values(config.topic("controller-ledger"))]
    return Counter(e["task_id"] for e in entries
                   if e["kind"] == LedgerKind.TASK and e["status"] == LedgerStatus.DONE)


def issued_tasks(broker: MemoryBroker, config: Config) -> Counter[int]:
    return Counter(read_record(CODEC, v, Task)["task_id"]
                   for v in broker.values(config.task_topic()))


def assert_completed_exactly(broker: MemoryBroker, config: Config, job: Job, items: int,
                             tasks: int) -> None:
    """One ACCEPTED and one COMPLETED event with exact counts; one DONE per task."""
    assert len(events(broker, config, JobEventType.ACCEPTED)) == 1
    (completed,) = events(broker, config, JobEventType.COMPLETED)
    assert (completed["total_items"], completed["done_items"]) == (items, items)
    assert completed["total_tasks"] == tasks
    assert done_entries(broker, config) == dict.fromkeys(range(tasks), 1)
    assert issued_tasks(broker, config) == dict.fromkeys(range(tasks), 1)
    assert sorted(line["item"] for line in job.results()) == item_names(items)


class Responder(threading.Thread):
    """Stands in for the worker pool: answers each task with `copies` identical results
    (more than one: what an at-least-once worker may leave); after `pause_after` tasks it
    waits for `resume`."""

    def __init__(self, clients: MemoryKafkaClients, config: Config, copies: int = 1,
                 pause_after: int | None = None) -> None:
        super().__init__(name="responder", daemon=True)
        self.clients, self.config, self.copies = clients, config, copies
        self.pause_after = pause_after
        self.paused, self.resume, self.done = threading.Event(), threading.Event(), \
            threading.Event()
        self.answered = 0

    def run(self) -> None:
        consumer = self.clients.consumer({"group.id": "responders",
                                          "auto.offset.reset": "earliest"})
        consumer.subscribe([self.config.task_topic()])
        producer = self.clients.producer({})
        while not self.done.is_set():
            for message in consumer.consume(100, timeout=0.05):
                if message.error() is None:
                    self._answer(producer, message.value() or b"")
        consumer.close()

    def _answer(self, producer: Any, value: bytes) -> None:
        if self.answered == self.pause_after:
            self.paused.set()
            self.resume.wait(10)
        task = read_record(CODEC, value, Task)
        top = [Prediction(class_id=1, label="goldfish", score=0.9)]
        result = TaskResult(
            job_id=task["job_id"], task_id=task["task_id"], attempt=task["attempt"],
            worker="responder", model=task["model"],
            items=[ok_item(item, top) for item in task["items"]], started_at=0,
            finished_at=0, decode_seconds=0.0, inference_seconds=0.0)
        topic = self.config.topic("results")
        partition = partition_for(task["job_id"], self.config.partitions)
        for _ in range(self.copies):
            producer.produce(topic, CODEC.encode("TaskResult", result),
                             task["job_id"].encode(), partition=partition)
        self.answered += 1


@pytest.fixture
def responders() -> Iterator[list[Responder]]:
    started: list[Responder] = []
    yield started
    for responder in started:
        responder.done.set()
        responder.resume.set()
        responder.join(5)


def respond(responders: list[Responder], *args: Any, **kwargs: Any) -> Responder:
    responder = Responder(*args, **kwargs)
    responder.start()
    responders.append(responder)
    return responder


def run_with_a_worker(clients: MemoryKafkaClients, config: Config) -> None:
    """A real worker on its own event loop thread, and a controller here until idle."""
    worker = new_worker(config, load_model(MODEL), codec=CODEC, clients=clients)
    runner = asyncio.Runner()
    thread = threading.Thread(target=runner.run, args=(worker.run(),), name="worker")
    thread.start()
    try:
        Controller(config, codec=CODEC, clients=clients).run()
    finally:
        runner.get_loop().call_soon_threadsafe(worker.request_stop)
        thread.join(10)
        runner.close()


def test_a_job_goes_from_submission_to_completed(clients: MemoryKafkaClients) -> None:
    """Submitted through the Client, divided into tasks, run by a worker, collected."""
    config = make_config()
    job = submit(clients, config, items=10, chunk_size=3)
    run_with_a_worker(clients, config)

    status = job.wait(timeout_s=5)
    assert (status.total_items, status.ok_items, status.total_tasks) == (10, 10, 4)
    tasks = [read_record(CODEC, v, Task) for v in clients.broker.values(config.task_topic())]
    assert sorted(len(t["items"]) for t in tasks) == [1, 3, 3, 3]
    assert_completed_exactly(clients.broker, config, job, items=10, tasks=4)
    assert {line["worker"] for line in job.results()} == {"w1"}


def test_a_job_on_another_partition_than_its_ids_gets_its_results_there(
        clients: MemoryKafkaClients) -> None:
    """A foreign client's partitioner put the job on a partition other than murmur2 of its
    id: the tasks carry that home partition and the worker's results go to it, where the
    replica owning the job reads them (with two replicas, murmur2's partition may be the
    other one's)."""
    config = make_config()
    job = Client(config, CODEC, clients).job(new_job_id())
    home = 1 - partition_for(job.job_id, 2)
    record = JobRecord(job_id=job.job_id, model=MODEL, pool=config.pool, top_k=1, chunk_size=2,
                       inputs=[], inline_items=[InlineItem(name=f"i{n}", data=b"x")
                                                for n in range(4)],
                       submitted_at=0, submitter="foreign", output_path=None)
    clients.broker.produce(config.topic("jobs"), home, job.job_id.encode(),
                           CODEC.encode("Job", record))
    run_with_a_worker(clients, config)
    assert job.wait(timeout_s=5).ok_items == 4
    assert sorted(line["item"] for line in job.results()) == [f"i{n}" for n in range(4)]
    tasks = [read_record(CODEC, v, Task) for v in clients.broker.values(config.task_topic())]
    assert {t["home_partition"] for t in tasks} == {home}
    assert clients.broker.values(config.topic("results"), 1 - home) == []
    assert len(clients.broker.values(config.topic("results"), home)) == 2


def test_a_second_result_for_a_done_task_is_dropped(clients: MemoryKafkaClients,
                                                    responders: list[Responder]) -> None:
    config = make_config()
    job = submit(clients, config, items=8, chunk_size=2)
    respond(responders, clients, config, copies=2)
    Controller(config, codec=CODEC, clients=clients).run()

    assert len(clients.broker.values(config.topic("results"))) == 2 * 4
    assert_completed_exactly(clients.broker, config, job, items=8, tasks=4)


def test_another_controller_resumes_a_job_from_the_ledger(clients: MemoryKafkaClients,
                                                          responders: list[Responder]) -> None:
    """The first replica stops mid-job; the next one rebuilds the job from its ledger and
    finishes it, without accepting it again or re-issuing its tasks."""
    config = make_config(tasks_per_round=1)
    job = submit(clients, config, items=6, chunk_size=1)
    responder = respond(responders, clients, config, pause_after=2)
    first = Controller(config, codec=CODEC, clients=clients)
    threading.Thread(target=lambda: responder.paused.wait(10) and first.request_stop(),
                     daemon=True).start()
    first.run()
    assert events(clients.broker, config, JobEventType.COMPLETED) == []

    responder.resume.set()
    Controller(config, codec=CODEC, clients=clients).run()
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=6)


def test_a_cancelled_job_ends_with_the_counts_of_what_was_done(
        clients: MemoryKafkaClients, responders: list[Responder]) -> None:
    """Cancel after two of four tasks: CANCELLED with 4 items done, never COMPLETED; the
    later results are dropped; workers are told to skip the job."""
    config = make_config()
    job = submit(clients, config, items=8, chunk_size=2)
    responder = respond(responders, clients, config, pause_after=2)

    def cancel_when_paused() -> None:
        responder.paused.wait(10)
        time.sleep(0.3)  # the controller takes in the two results
        job.cancel()
        time.sleep(0.3)
        responder.resume.set()

    threading.Thread(target=cancel_when_paused, daemon=True).start()
    Controller(config, codec=CODEC, clients=clients).run()

    status = job.wait_final(timeout_s=5)
    assert (status.state, status.done_items, status.ok_items) == ("CANCELLED", 4, 4)
    assert events(clients.broker, config, JobEventType.COMPLETED) == []
    with pytest.raises(JobCancelledError, match="cancelled after 4/8 items"):
        job.wait(timeout_s=5)
    controls = [read_record(CODEC, v, TaskControl) for v in clients.broker.values("t.task-control")]
    assert [(c["job_id"], c["task_id"], c["reason"]) for c in controls] == [
        (job.job_id, -1, "CANCELLED")]


class DiesBeforeTheOutput(OutputFiles):
    """The output files of a replica killed after committing COMPLETED, before its output
    file was written."""

    def __init__(self, replica: Controller) -> None:
        super().__init__(replica.config, replica.clients)
        self.replica = replica

    def start(self, due: Iterable[JobState]) -> None:
        if any(state.output_due for state in due):
            self.replica.request_stop()


def test_a_replica_that_died_before_the_output_file_leaves_it_to_the_next(
        clients: MemoryKafkaClients, responders: list[Responder], tmp_path: Path) -> None:
    """The output file is part of a job's state: the next owner of the job's partition
    finds it due in the ledger, writes it and records it; a third writes nothing."""
    config = make_config()
    output = tmp_path / "out.jsonl"
    names = [f"item-{i:02d}" for i in range(6)]
    Client(config, CODEC, clients).submit(MODEL, names, chunk_size=2, output_path=str(output))
    respond(responders, clients, config)
    dies = Controller(config, codec=CODEC, clients=clients)
    dies.outputs = DiesBeforeTheOutput(dies)
    dies.run()
    assert events(clients.broker, config, JobEventType.COMPLETED) and not output.exists()

    Controller(config, codec=CODEC, clients=clients).run()
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(line["item"] for line in lines) == item_names(6)
    entries = [read_record(CODEC, v, LedgerEntry)
               for v in clients.broker.values(config.topic("controller-ledger"))]
    written = [e for e in entries if e["kind"] == LedgerKind.JOB and e["output_written_at"]]
    assert len(written) == 1

    output.unlink()
    Controller(config, codec=CODEC, clients=clients).run()
    assert not output.exists()  # written once is enough


def home_id(job: Job) -> str:
    """The transactional id under which the controller commits `job`'s partition."""
    return f"t.controller.{partition_for(job.job_id, 2)}"


def controller_producers(clients: MemoryKafkaClients, job: Job) -> list[MemoryProducer]:
    return [p for p in clients.of_type(MemoryProducer) if p.transactional_id == home_id(job)]


def test_a_stuck_send_offsets_replaces_the_producer(clients: MemoryKafkaClients,
                                                    responders: list[Responder]) -> None:
    """librdkafka#5456: send_offsets_to_transaction can block past its timeout for good. The
    controller gives up on it, fences the stuck producer with a new one and rolls back."""
    config = make_config(commit_timeout_s=0.1, call_grace_s=0.1)
    never = threading.Event()
    job = submit(clients, config, items=6)
    stuck = clients.broker.inject(home_id(job), "send_offsets", fail=None, stall=never)
    respond(responders, clients, config)
    try:
        Controller(config, codec=CODEC, clients=clients).run()
    finally:
        never.set()  # the stuck call returns (fenced) on its abandoned thread

    assert stuck.reached.is_set()
    assert len(controller_producers(clients, job)) == 2
    assert clients.broker.epoch(home_id(job)) == 1
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=2)


def test_a_failed_abort_replaces_the_producer(clients: MemoryKafkaClients,
                                              responders: list[Responder]) -> None:
    config = make_config()
    job = submit(clients, config, items=6)
    commit = clients.broker.inject(home_id(job), "commit")
    abort = clients.broker.inject(home_id(job), "abort",
                                  error=KafkaException(KafkaError(STATE, "cannot abort")))
    respond(responders, clients, config)
    Controller(config, codec=CODEC, clients=clients).run()

    assert commit.reached.is_set() and abort.reached.is_set()
    assert len(controller_producers(clients, job)) == 2
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=2)


def test_a_commit_that_failed_after_taking_effect_is_not_redone(
        clients: MemoryKafkaClients, responders: list[Responder]) -> None:
    """The commit went through but reported a timeout: the controller rolls back to what
    was committed, which includes that round, and issues nothing twice."""
    config = make_config()
    job = submit(clients, config, items=9)
    fault = clients.broker.inject(home_id(job), "commit", fail="after")
    respond(responders, clients, config)
    Controller(config, codec=CODEC, clients=clients).run()

    assert fault.reached.is_set()
    assert_completed_exactly(clients.broker, config, job, items=9, tasks=3)


@pytest.mark.parametrize("seed", range(3))
def test_counts_equal_the_output_when_another_replica_takes_over_at_a_random_point(
        clients: MemoryKafkaClients, responders: list[Responder], seed: int) -> None:
    """Issue 9.2: a replica that takes over rebuilds the job's counts from the ledger, whose
    last JOB entry (written at expansion and on PROGRESS) is older than its DONE entries."""
    tasks = 20
    stop_after = random.Random(seed).randint(1, tasks - 1)
    config = make_config(progress_interval_s=600.0)
    job = submit(clients, config, items=2 * tasks, chunk_size=2)
    responder = respond(responders, clients, config, pause_after=stop_after)
    first = Controller(config, codec=CODEC, clients=clients)
    thread = threading.Thread(target=first.run, name="first-replica")
    thread.start()
    while len(done_entries(clients.broker, config)) < stop_after and thread.is_alive():
        time.sleep(0.01)
    first.request_stop()
    thread.join(10)
    responder.resume.set()
    Controller(config, codec=CODEC, clients=clients).run()

    (completed,) = events(clients.broker, config, JobEventType.COMPLETED)
    lines = list(job.results())
    ok_lines = sum(1 for line in lines if line["status"] == "ok")
    assert len(lines) == 2 * tasks
    assert (completed["done_items"], completed["ok_items"]) == (2 * tasks, ok_lines)


def test_an_unreadable_job_record_keyed_by_a_job_id_is_rejected_with_the_reason(
        clients: MemoryKafkaClients) -> None:
    """Issue 9.3: the submitter of a job whose record cannot be read learns why, instead of
    waiting for a job that stays SUBMITTED; the dead letter keeps null and empty apart."""
    config = make_config()
    jobs = config.topic("jobs")
    clients.broker.produce(jobs, 0, b"20261202-000000-deadbeef", b"not avro", timestamp_ms=5)
    clients.broker.produce(jobs, 1, b"20261202-000000-0000feed", None, timestamp_ms=6)
    clients.broker.produce(jobs, 1, None, b"", timestamp_ms=7)
    Controller(config, codec=CODEC, clients=clients).run()

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


def test_accepted_has_no_rate_until_an_item_is_done(clients: MemoryKafkaClients) -> None:
    """Issue 9.3: the schema says rate_items_per_s is null until measured."""
    config = make_config()
    submit(clients, config, items=3)
    controller = Controller(config, codec=CODEC, clients=clients)
    thread = threading.Thread(target=controller.run, name="controller")
    thread.start()
    while not events(clients.broker, config, JobEventType.ACCEPTED) and thread.is_alive():
        time.sleep(0.01)
    controller.request_stop()
    thread.join(10)
    (accepted,) = events(clients.broker, config, JobEventType.ACCEPTED)
    assert accepted["rate_items_per_s"] is None


def test_records_fetched_as_their_partitions_are_revoked_are_left_to_the_next_owner(
        clients: MemoryKafkaClients, responders: list[Responder],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka runs the revoke callback inside the fetch that returned a job's record and
    the next assignment only later: the replica must not accept the job between the two (it
    did, and the next owner's replay, which may end before that commit's markers, lost the
    job: its results went uncounted)."""
    config = make_config()
    job = submit(clients, config, items=4, chunk_size=2)
    home = partition_for(job.job_id, config.partitions)
    first = Controller(config, codec=CODEC, clients=clients)
    real = controller_module.consume_ready
    later: list[Any] = []

    def fetch_then_rebalance(consumer: Any, limit: int, timeout_s: float) -> list[Any]:
        if later:  # the assignment that follows: the job's partition went elsewhere
            first._on_assign(consumer, later.pop())
        messages = real(consumer, limit, timeout_s)
        if any(m.topic() == config.topic("jobs") for m in messages):
            kept = [tp for tp in consumer.assignment() if tp.partition != home]
            first._on_revoke(consumer, consumer.assignment())
            later.append(kept)
            consumer.assign(kept)
            monkeypatch.setattr(controller_module, "consume_ready", real)
        return messages

    monkeypatch.setattr(controller_module, "consume_ready", fetch_then_rebalance)
    first.run()
    assert events(clients.broker, config, JobEventType.ACCEPTED) == []
    assert issued_tasks(clients.broker, config) == {}

    respond(responders, clients, config)
    Controller(config, codec=CODEC, clients=clients).run()
    assert_completed_exactly(clients.broker, config, job, items=4, tasks=2)


def test_a_rebalance_that_keeps_a_partition_initialises_its_producer_again(
        clients: MemoryKafkaClients, responders: list[Responder]) -> None:
    """A kept partition's replay follows a new init of its transactional id, which returns
    once this replica's own last transaction is complete (its markers written)."""
    config = make_config()
    job = submit(clients, config, items=6, chunk_size=2)
    home = partition_for(job.job_id, config.partitions)
    responder = respond(responders, clients, config, pause_after=1)
    tid = f"{config.topic_prefix}controller.{home}"
    controller = Controller(config, codec=CODEC, clients=clients)
    epochs: list[int | None] = []

    def rebalance_when_paused() -> None:
        responder.paused.wait(10)
        epochs.append(clients.broker.epoch(tid))
        clients.broker.rebalance(controller_group(config))
        responder.resume.set()

    threading.Thread(target=rebalance_when_paused, daemon=True).start()
    controller.run()
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=3)
    (before,) = epochs
    assert before is not None and (clients.broker.epoch(tid) or 0) > before


def run_controller(clients: MemoryKafkaClients, metrics: ControllerMetrics) -> None:
    Controller(make_config(), codec=CODEC, clients=clients, hooks=metrics).run()


def test_the_controller_counts_a_job_with_duplicate_results_once(
        clients: MemoryKafkaClients, responders: list[Responder]) -> None:
    config = make_config()
    job = submit(clients, config, items=8, chunk_size=2)
    respond(responders, clients, config, copies=2)
    metrics = ControllerMetrics(CollectorRegistry())
    run_controller(clients, metrics)

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


def test_a_rolled_back_round_is_not_counted_twice(
        clients: MemoryKafkaClients, responders: list[Responder]) -> None:
    config = make_config()
    job = submit(clients, config, items=6)
    fault = clients.broker.inject(home_id(job), "commit")  # fails before taking effect
    respond(responders, clients, config)
    metrics = ControllerMetrics(CollectorRegistry())
    run_controller(clients, metrics)

    assert fault.reached.is_set() and job.wait(timeout_s=5).ok_items == 6
    r = metrics.registry
    assert sample(r, "inferstream_controller_jobs_accepted_total") == 1
    assert sample(r, "inferstream_controller_tasks_issued_total", pool="default") == 2
    assert sample(r, "inferstream_controller_items_done_total", status="ok") == 6
