"""The controller on the in-memory transport when a transaction is stuck, fails, or fails
after taking effect, and when the group rebalances: each task issued and counted once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry

from inferstream.client.client import Client, Job
from inferstream.controller import replica as controller_module
from inferstream.controller.metrics import ControllerMetrics
from inferstream.controller.replica import Controller
from inferstream.kafka.settings import partition_for
from inferstream.schemas.records import JobEventType
from inferstream.testing import MemoryKafkaClients
from inferstream.testing.clients.sync_producer import MemoryProducer
from tests.unit.promtool import sample
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.pool import Responder
from tests.unit.support.records import (
    assert_completed_exactly,
    events,
    issued_tasks,
    settled,
)
from tests.unit.support.running import Running

STATE = KafkaError._STATE
MakeController = Callable[..., Controller]
MakeResponder = Callable[..., Responder]


def submit(clients: MemoryKafkaClients, items: int, chunk_size: int = 3) -> Job:
    names = [f"item-{i:02d}" for i in range(items)]
    return Client(make_config(), CODEC, clients).submit(MODEL, names, chunk_size=chunk_size)


def home_id(job: Job) -> str:
    """The transactional id under which the controller commits `job`'s partition."""
    return f"t.controller.{partition_for(job.job_id, 2)}"


def controller_producers(clients: MemoryKafkaClients, job: Job) -> list[MemoryProducer]:
    return [p for p in clients.of_type(MemoryProducer) if p.transactional_id == home_id(job)]


def test_a_stuck_send_offsets_replaces_the_producer(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    """librdkafka#5456: send_offsets_to_transaction can block past its timeout for good. The
    controller gives up on it, fences the stuck producer with a new one and rolls back."""
    config = make_config(controller={"commit_timeout_s": 0.1, "call_grace_s": 0.1})
    never = threading.Event()
    job = submit(clients, items=6)
    stuck = clients.broker.inject(home_id(job), "send_offsets", fail=None, stall=never)
    make_responder()
    try:
        running.controller(make_controller(config))
        running.until(settled(clients.broker, config))
    finally:
        never.set()  # the stuck call returns (fenced) on its abandoned thread

    assert stuck.reached.is_set()
    assert len(controller_producers(clients, job)) == 2
    assert clients.broker.epoch(home_id(job)) == 1
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=2)


def test_a_failed_abort_replaces_the_producer(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    config = make_config()
    job = submit(clients, items=6)
    commit = clients.broker.inject(home_id(job), "commit")
    abort = clients.broker.inject(home_id(job), "abort",
                                  error=KafkaException(KafkaError(STATE, "cannot abort")))
    make_responder()
    running.controller(make_controller())
    running.until(settled(clients.broker, config))

    assert commit.reached.is_set() and abort.reached.is_set()
    assert len(controller_producers(clients, job)) == 2
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=2)


def test_a_commit_that_failed_after_taking_effect_is_not_redone(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    """The commit went through but reported a timeout: the controller rolls back to what
    was committed, which includes that round, and issues nothing twice."""
    config = make_config()
    job = submit(clients, items=9)
    fault = clients.broker.inject(home_id(job), "commit", fail="after")
    make_responder()
    running.controller(make_controller())
    running.until(settled(clients.broker, config))

    assert fault.reached.is_set()
    assert_completed_exactly(clients.broker, config, job, items=9, tasks=3)


def test_records_fetched_as_their_partitions_are_revoked_are_left_to_the_next_owner(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka runs the revoke callback inside the fetch that returned a job's record and
    the next assignment only later: the replica must not accept the job between the two (it
    did, and the next owner's replay, which may end before that commit's markers, lost the
    job: its results went uncounted)."""
    config = make_config()
    job = submit(clients, items=4, chunk_size=2)
    home = partition_for(job.job_id, config.partitions)
    first = make_controller()
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
    running.controller(first)
    running.until(lambda: later)  # a stop is seen after the round that fetched the job
    assert events(clients.broker, config, JobEventType.ACCEPTED) == []
    assert issued_tasks(clients.broker, config) == {}

    make_responder()
    running.controller(make_controller())
    running.until(settled(clients.broker, config))
    assert_completed_exactly(clients.broker, config, job, items=4, tasks=2)


def test_a_rebalance_that_keeps_a_partition_initialises_its_producer_again(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    """A kept partition's replay follows a new init of its transactional id, which returns
    once this replica's own last transaction is complete (its markers written)."""
    config = make_config()
    job = submit(clients, items=6, chunk_size=2)
    home = partition_for(job.job_id, config.partitions)
    responder = make_responder(pause_after=1)
    tid = f"{config.topic_prefix}controller.{home}"
    running.controller(make_controller())
    running.wait_for(responder.paused.is_set)
    before = clients.broker.epoch(tid)
    clients.broker.rebalance(config.controller_group())
    responder.resume.set()
    running.until(settled(clients.broker, config))
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=3)
    assert before is not None and (clients.broker.epoch(tid) or 0) > before


def test_a_rolled_back_round_is_not_counted_twice(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    config = make_config()
    job = submit(clients, items=6)
    fault = clients.broker.inject(home_id(job), "commit")  # fails before taking effect
    make_responder()
    metrics = ControllerMetrics(CollectorRegistry())
    running.controller(make_controller(hooks=metrics))
    running.until(settled(clients.broker, config))

    assert fault.reached.is_set() and job.wait(timeout_s=5).ok_items == 6
    r = metrics.registry
    assert sample(r, "inferstream_controller_jobs_accepted_total") == 1
    assert sample(r, "inferstream_controller_tasks_issued_total", pool="default") == 2
    assert sample(r, "inferstream_controller_items_done_total", status="ok") == 6


def test_a_transaction_after_one_still_completing_is_retried_within_100_ms(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running) -> None:
    """The controller's transactional producers retry CONCURRENT_TRANSACTIONS (the markers of
    the round before still being written) at most 100 ms apart, not librdkafka's default of
    up to 1 s (see `replica.TRANSACTION_RETRIES`)."""
    config = make_config()
    job = submit(clients, items=6)
    make_responder()
    running.controller(make_controller(config))
    running.until(settled(clients.broker, config))
    (producer,) = controller_producers(clients, job)
    assert producer.settings["retry.backoff.ms"] <= 20
    assert producer.settings["retry.backoff.max.ms"] <= 100
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=2)
