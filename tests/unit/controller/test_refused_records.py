"""Records the cluster refuses for good (over their topic's max.message.bytes): the job whose
record it is ends with the reason, and the other jobs of its partition go on; a dead letter
too large for a record goes without the unreadable record's value."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from inferstream.controller.ledger import JobState
from inferstream.controller.outbox import ControllerTopics
from inferstream.controller.refused import RefusedJobs
from inferstream.controller.replica import Controller
from inferstream.kafka.clients import Outgoing
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES, topic_specs
from inferstream.schemas.records import (
    DeadLetter,
    InlineItem,
    Job,
    JobEventType,
    LedgerStatus,
    read_record,
)
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.records import events
from tests.unit.support.running import Running

MakeController = Callable[..., Controller]
#: the ledger's max.message.bytes in these tests: a Kafka default lowered further
LEDGER_BYTES = 64 * 1024


def job_record(job_id: str, items: int, item_bytes: int) -> bytes:
    return CODEC.encode("Job", job_record_of(job_id, items, item_bytes))


def job_record_of(job_id: str, items: int = 1, item_bytes: int = 1) -> Job:
    return Job(job_id=job_id, model=MODEL, model_version=None, pool="default", top_k=1,
               chunk_size=2, inputs=[],
               inline_items=[InlineItem(name=f"i{n}", data=b"x" * item_bytes)
                             for n in range(items)],
               submitted_at=0, submitter="test", output_path=None, priority=0, weight=1.0)


@pytest.fixture
def broker() -> MemoryBroker:
    """The topics of `make_config()`, the ledger's records held to `LEDGER_BYTES` (as on a
    ledger an earlier release made at Kafka's default)."""
    config = make_config()
    broker = MemoryBroker()
    for spec in topic_specs(config):
        configs = spec.all_configs()
        if spec.name == config.topic("controller-ledger"):
            configs["max.message.bytes"] = str(LEDGER_BYTES)
        broker.create_topic(spec.name, spec.partitions, configs)
    return broker


def ended(broker: MemoryBroker, *expected: tuple[str, JobEventType]) -> Callable[[], bool]:
    config = make_config()

    def done() -> bool:
        """each job has the event it ends with"""
        seen = {(e["job_id"], e["type"]) for kind in {k for _, k in expected}
                for e in events(broker, config, kind)}
        return all(pair in seen for pair in expected)
    return done


def test_a_job_whose_ledger_entry_the_broker_refuses_is_rejected_and_the_others_go_on(
        broker: MemoryBroker, make_worker: Callable[..., Worker],
        make_controller: MakeController, running: Running) -> None:
    """The ledger entry of an inline job is over its topic's limit: the broker refuses it in
    every attempt of the transaction. The job is rejected with the reason, and a job behind
    it on the same partition completes, where the partition rolled back for ever."""
    config = make_config()
    jobs = config.topic("jobs")
    broker.produce(jobs, 0, b"big", job_record("big", 1, 2 * LEDGER_BYTES))
    broker.produce(jobs, 0, b"small", job_record("small", 4, 1))
    running.workers(make_worker())
    running.controller(make_controller())
    running.until(ended(broker, ("big", JobEventType.REJECTED),
                        ("small", JobEventType.COMPLETED)))
    rejected = events(broker, config, JobEventType.REJECTED)[0]
    assert config.topic("controller-ledger") in rejected["reason"]
    assert "max.message.bytes" in rejected["reason"]
    assert "big" not in {e["job_id"] for e in events(broker, config, JobEventType.ACCEPTED)}


def test_an_unreadable_job_record_too_large_for_its_dead_letter_goes_without_its_value(
        broker: MemoryBroker, make_worker: Callable[..., Worker],
        make_controller: MakeController, running: Running) -> None:
    """An unreadable record on jobs just under 16 MiB: its dead letter, which carries it,
    would be over what a record may be (the producer refuses it in every attempt): it goes
    without the record's value, with a reason that says so, and the next job completes."""
    config = make_config()
    jobs = config.topic("jobs")
    broker.produce(jobs, 0, b"junk", b"\x00" * (LARGE_MESSAGE_BYTES - 100))
    broker.produce(jobs, 0, b"small", job_record("small", 4, 1))
    running.workers(make_worker())
    running.controller(make_controller())
    running.until(ended(broker, ("junk", JobEventType.REJECTED),
                        ("small", JobEventType.COMPLETED)))
    (letter,) = [read_record(CODEC, v, DeadLetter) for v in broker.values(config.topic("dlq"))]
    assert letter["value"] is None and letter["key"] == b"junk"
    assert "the record's value left out" in letter["reason"]


def test_a_refused_record_names_the_job_its_key_names() -> None:
    """A task entry's key is `<job id>/<task id>`: its job ends; a record of no job held here
    names none; a refused dead letter lowers the size past which dead letters shed their
    value; an active job refused fails, and is forgotten `keep_ms` after its refusal."""
    config = make_config()
    topics = ControllerTopics.of(config)
    refused = RefusedJobs(topics, keep_ms=1000)
    ledger = config.topic("controller-ledger")
    refused.note([(Outgoing(ledger, 0, b"a/b/7", b"x" * 10), "INVALID_RECORD"),
                  (Outgoing(ledger, 0, b"other", b"x"), "MSG_SIZE_TOO_LARGE"),
                  (Outgoing(topics.dlq, 0, b"a/b", b"x" * 999), "MSG_SIZE_TOO_LARGE")],
                 {"a/b", "c"}, now=5000)
    assert refused.reason("a/b") == (f"the cluster refuses its ledger entry on topic {ledger} "
                                     "(INVALID_RECORD)")
    assert refused.reason("other") is None and refused.reason("c") is None
    assert refused.letter_bytes == 999 + len(b"a/b") - 1
    active = JobState(job_record_of("a/b"), 0)
    assert refused.failing([active], now=6000) == [active]
    assert active.failure == refused.reason("a/b")
    active.end(LedgerStatus.FAILED)
    assert refused.failing([active], now=6001) == [] and refused.reason("a/b") is None


def test_a_refused_job_is_not_forgotten_while_it_is_active() -> None:
    """With `retain_finished_s` shorter than the rollback and the round redone (0 is
    allowed), the refusal was forgotten before the job ended: its record was written and
    refused again, the partition rolled back for ever. A job still active is kept."""
    config = make_config()
    refused = RefusedJobs(ControllerTopics.of(config), keep_ms=0)
    refused.note([(Outgoing(config.topic("tasks"), 0, b"a/3", b"x"), "MSG_SIZE_TOO_LARGE")],
                 {"a"}, now=5000)
    active = JobState(job_record_of("a"), 0)
    assert refused.failing([active], now=5001) == [active]
    assert active.failure == refused.reason("a")
    active.end(LedgerStatus.FAILED)
    assert refused.failing([active], now=5002) == [] and refused.reason("a") is None
