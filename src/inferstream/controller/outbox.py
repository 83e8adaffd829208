"""What one controller round will write, collected before its transaction."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

from inferstream.config import Config
from inferstream.controller.hooks import Tally
from inferstream.kafka.clients import Message, Outgoing, SyncConsumer
from inferstream.kafka.deadletters import dead_letter
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.limits import RECORD_HEADROOM, record_bytes, size_text
from inferstream.kafka.preflight import absent
from inferstream.kafka.settings import partition_for
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES, partition_count_problem
from inferstream.schemas import Codec
from inferstream.schemas.records import JobEvent, TaskControl, TaskControlReason, now_ms

log = logging.getLogger(__name__)

#: Least seconds between two questions for a topic's count that `PartitionCounts.reach` asks.
REASK_S = 10.0


@dataclass(frozen=True)
class ControllerTopics:
    """The full names of the topics a controller reads and writes."""

    jobs: str
    results: str
    events: str
    ledger: str
    dlq: str
    controls: str

    @classmethod
    def of(cls, config: Config) -> ControllerTopics:
        return cls(jobs=config.topic("jobs"), results=config.topic("results"),
                   events=config.topic("job-events"), ledger=config.topic("controller-ledger"),
                   dlq=config.topic("dlq"), controls=config.topic("task-control"))


class PartitionCounts:
    """Partition counts of the topics a controller writes, asked once each: those the
    cluster shows at `load` (the pools' task topics among them) from that one metadata
    request, any other at its first use. (A consumer's metadata request waits on its
    connection behind a parked fetch, up to `fetch.wait.max.ms`: half a second on a pool's
    first job, when it was asked then.)"""

    def __init__(self, consumer: SyncConsumer, topics: ControllerTopics) -> None:
        self.consumer = consumer
        self.topics = topics
        self._counts: dict[str, int] = {}
        #: when `reach` last asked each topic's count (monotonic seconds)
        self._asked: dict[str, float] = {}

    def load(self, wait_s: float = 10.0) -> None:
        """Check the controller's own topics exist and are co-partitioned; a topic the
        cluster does not show is asked for again for up to `wait_s` (created a moment ago,
        it may not be on every broker's metadata yet)."""
        t = self.topics
        names = (t.jobs, t.results, t.events, t.ledger, t.dlq, t.controls)
        deadline = time.monotonic() + wait_s
        metadata = self.consumer.list_topics(timeout=30).topics
        while absent(metadata, names) and time.monotonic() < deadline:
            time.sleep(0.25)
            metadata = self.consumer.list_topics(timeout=30).topics
        for name in names:
            if name in absent(metadata, names):
                raise KafkaSetupError(f"topic {name} is missing; run `inferstream topics create`")
        self._counts.update({name: len(meta.partitions) for name, meta in metadata.items()
                             if meta.error is None and meta.partitions})
        problem = partition_count_problem({name: self._counts[name]
                                           for name in (t.jobs, t.results, t.ledger)})
        if problem:
            raise KafkaSetupError(problem)

    def of(self, topic: str) -> int:
        if topic not in self._counts:
            self._counts[topic] = self._ask(topic)
        return self._counts[topic]

    def reach(self, topic: str, count: int) -> None:
        """A worker owns partition `count - 1` of `topic`: partitions were added since the
        count was asked (a pool grown past its task topic's partitions). Ask again, at most
        once per `REASK_S` while the cluster's answer still falls short; a count never
        shrinks (Kafka adds partitions, never removes them)."""
        if self._counts.get(topic, 0) >= count:
            return
        now = time.monotonic()
        if now - self._asked.get(topic, -REASK_S) < REASK_S:
            return
        self._asked[topic] = now
        found = self._ask(topic)
        if found > self._counts.get(topic, 0):
            log.info("topic %s has %d partitions now (was %d)", topic, found,
                     self._counts.get(topic, 0))
            self._counts[topic] = found

    def _ask(self, topic: str) -> int:
        meta = self.consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise KafkaSetupError(f"topic {topic} does not exist")
        return len(meta.partitions)


@dataclass
class Outbox:
    """Records as (topic, partition, key, value) by the partition index of the job they are
    about (their home), produced in order in that index's transaction.

    `partitions(topic)` gives a topic's partition count (the controller caches them).
    """

    topics: ControllerTopics
    codec: Codec
    partitions: Callable[[str], int]
    #: the most bytes a dead letter's record may take: a larger one goes without the
    #: unreadable record's value (`refused`)
    letter_bytes: int = LARGE_MESSAGE_BYTES - RECORD_HEADROOM
    records: dict[int, list[Outgoing]] = field(default_factory=dict)
    #: what the records decide, by home partition, for the metrics (see `hooks`)
    tallies: dict[int, Tally] = field(default_factory=dict)

    def count(self, home: int, what: tuple[str, ...], n: int = 1) -> None:
        """Tally `n` of `what` in the transaction of `home`."""
        if n:
            self.tallies.setdefault(home, Counter())[what] += n

    def __len__(self) -> int:
        return sum(map(len, self.records.values()))

    def add(self, home: int, topic: str, partition: int, key: bytes,
            value: bytes | None) -> None:
        self.append(home, Outgoing(topic, partition, key, value))

    def append(self, home: int, record: Outgoing) -> None:
        self.records.setdefault(home, []).append(record)

    def ledger(self, key: bytes, value: bytes | None, home: int) -> None:
        """A ledger entry (None: its key deleted), on the ledger partition of its job's
        home partition."""
        self.add(home, self.topics.ledger, home, key, value)
        self.count(home, ("ledger_records",))

    def event(self, event: JobEvent, home: int) -> None:
        """A JobEvent, on the job-events partition of its job id."""
        topic = self.topics.events
        partition = partition_for(event["job_id"], self.partitions(topic))
        self.add(home, topic, partition, event["job_id"].encode(),
                 self.codec.encode("JobEvent", event))

    def control(self, home: int, job_id: str, task_id: int, attempt: int,
                reason: TaskControlReason) -> None:
        """A task-control entry: workers skip the job's tasks (`task_id` -1), or the task's
        attempts before `attempt`."""
        topic = self.topics.controls
        key = job_id if task_id < 0 else f"{job_id}/{task_id}"
        control = TaskControl(job_id=job_id, task_id=task_id, attempt=attempt, reason=reason,
                              at=now_ms())
        self.add(home, topic, partition_for(key, self.partitions(topic)), key.encode(),
                 self.codec.encode("TaskControl", control))

    def dead_letter(self, message: Message, reason: str) -> None:
        """The unreadable record, with where it came from, to the dead-letter topic, in the
        transaction of the partition it was read from; without its value (and then its key)
        where the dead letter would take more than `letter_bytes`, which the cluster would
        refuse in every attempt of that transaction."""
        kind, timestamp_ms = message.timestamp()
        letter = partial(
            dead_letter, self.codec, self.topics.dlq, self.partitions(self.topics.dlq),
            topic=message.topic() or "", partition=message.partition() or 0,
            offset=message.offset() or 0, consumer="controller",
            origin_timestamp_ms=timestamp_ms if kind != TIMESTAMP_NOT_AVAILABLE else None)
        record = letter(reason=reason, value=message.value(), key=message.key())
        size = record_bytes(record)
        for left_out, key in (("value", message.key()), ("key and value", None)):
            if record_bytes(record) <= self.letter_bytes:
                break
            record = letter(reason=f"{reason}; the record's {left_out} left out: its dead "
                            f"letter takes {size_text(size)}, more than a record of "
                            f"{self.topics.dlq} may", value=None, key=key)
        self.append(message.partition() or 0, record)
