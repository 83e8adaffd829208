"""The one partition reader: committed records of assigned partitions, to their end or on.

Every place that reads a topic back (the ledger replay, a job's results and events, the job
listing) reads through `PartitionReader`, from a consumer made by `reader_consumer`: no
group, `read_committed`, end-of-partition events on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from inferstream.config import Config
from inferstream.kafka import settings
from inferstream.kafka.clients import (
    REAL_CLIENTS,
    KafkaClients,
    Message,
    SyncConsumer,
    SyncProducer,
    consume_ready,
)
from inferstream.kafka.errors import KafkaSetupError, PartitionReadError, TopicRefusedError
from inferstream.kafka.settings import PARTITION_EOF, consumer_config

#: fetch.wait.max.ms of a reader that reads to the end and stops: the end of a partition
#: shows as an empty fetch, which the broker holds this long (librdkafka's default, 500 ms,
#: made every replay of the ledger and read of a job's results that much longer).
READ_TO_END_FETCH_WAIT_MS = 10
#: fetch.wait.max.ms of a reader that follows a topic (waits for new records): how long the
#: broker holds an empty fetch. A record that arrives on a partition it fetches ends the
#: wait at once (a committed transaction's too), so this costs no latency; it sets how
#: often an idle follower asks. At librdkafka's 500 ms the two followers of each worker
#: member (task controls, policy) were two thirds of an idle pool's requests to the broker
#: (632 fetches a second at 100 members, 252 at this wait: BENCHMARKS.md, where the broker's
#: work goes at N = 100).
#: A follower's first read to the end uses the short wait (`kafka.follower`): an end of
#: partition shows only when an empty fetch returns.
FOLLOW_FETCH_WAIT_MS = 5000
#: librdkafka's prefetch queue of a reader, in KiB. Its default (64 MiB) is most of what
#: `submit --wait --output` and `results` grow by on a large job (148 MiB peak at 1.28 M items,
#: 78 MiB with this; the same CPU: BENCHMARKS.md, the ImageNet-sized job).
READER_PREFETCH_KB = 8192


def reader_consumer(config: Config, clients: KafkaClients = REAL_CLIENTS,
                    follow: bool = False, read_committed: bool = True) -> SyncConsumer:
    """A consumer outside any group that reports reaching the end of each partition; one
    that does not `follow` (reads to the end, then stops) gets short fetch waits, one that
    follows long ones (`FOLLOW_FETCH_WAIT_MS`); `kafka_config`'s fetch.wait.max.ms wins over
    both. Only `inferstream dump` reads uncommitted (what the log holds, aborted attempts
    too)."""
    extra: dict[str, object] = {"enable.partition.eof": True,
                                "queued.max.messages.kbytes": READER_PREFETCH_KB}
    if not read_committed:
        extra["isolation.level"] = "read_uncommitted"
    conf = consumer_config(config, None, **extra)
    if "fetch.wait.max.ms" not in dict(config.kafka_config):  # the user's, when set
        # a fetch's wait stays a second under the socket timeout (librdkafka warns otherwise)
        socket_ms = int(conf["socket.timeout.ms"])
        conf["fetch.wait.max.ms"] = (max(READ_TO_END_FETCH_WAIT_MS,
                                         min(FOLLOW_FETCH_WAIT_MS, socket_ms - 1000))
                                     if follow else READ_TO_END_FETCH_WAIT_MS)
    return clients.consumer(conf)


def topic_partitions(client: SyncConsumer | SyncProducer, topic: str,
                     timeout_s: float = 30) -> list[int]:
    """The partition ids of `topic`; KafkaSetupError when it does not exist, TopicRefusedError
    when no ACL lets this principal describe it (the broker says so of a topic named)."""
    meta = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is not None and meta.error is not None and (
            meta.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED):
        raise TopicRefusedError(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise KafkaSetupError(f"topic {topic} does not exist: run `inferstream topics create`")
    return sorted(meta.partitions)


#: The errors of a partition whose leader is not there yet, or moved (or its broker died): a
#: lookup of offsets asks again (`offsets_for_times`, `end_offset`).
LEADER_ERRORS = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,  # a new leader not caught up yet (KIP-207)
    # the leader's broker died or hung under the request: librdkafka's local errors while
    # the cluster fences it (a few seconds) and its partitions get new leaders; `status`
    # and `cancel` exited 2 on them with two brokers of three up
    KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT,  # noqa: SLF001
})
_T = TypeVar("_T")
#: How long a lookup of offsets by time asks again, and how often.
OFFSETS_TIMEOUT_S = 30.0
OFFSETS_RETRY_S = 0.1


def offsets_for_times(consumer: SyncConsumer, partitions: list[TopicPartition],
                      timeout_s: float = OFFSETS_TIMEOUT_S) -> list[TopicPartition]:
    """`consumer.offsets_for_times(partitions)`, asked again while a partition's leader is not
    there yet or moved (`LEADER_ERRORS`), up to `timeout_s`. librdkafka hands those errors
    to the caller rather than asking the new leader
    (https://github.com/confluentinc/librdkafka/issues/1641): a client that read its job's
    events the moment its topics were created met NOT_LEADER_FOR_PARTITION in CI."""
    return _asked_again(lambda wait_s: consumer.offsets_for_times(partitions, timeout=wait_s),
                        lambda found: any(tp.error is not None
                                          and tp.error.code() in LEADER_ERRORS for tp in found),
                        timeout_s)


def end_offset(consumer: SyncConsumer, partition: TopicPartition,
               timeout_s: float = OFFSETS_TIMEOUT_S) -> int:
    """The offset after the last record of `partition` (its high watermark), asked again as
    `offsets_for_times` is."""
    return _asked_again(lambda wait_s: consumer.get_watermark_offsets(partition, timeout=wait_s),
                        lambda _found: False, timeout_s)[1]


def start_offset(consumer: SyncConsumer, partition: TopicPartition,
                 timeout_s: float = OFFSETS_TIMEOUT_S) -> int:
    """The offset of the first record of `partition` not deleted (its low watermark, the
    log start offset that retention moves), asked again as `offsets_for_times` is."""
    return _asked_again(lambda wait_s: consumer.get_watermark_offsets(partition, timeout=wait_s),
                        lambda _found: False, timeout_s)[0]


def _asked_again(ask: Callable[[float], _T], moved: Callable[[_T], bool],
                 timeout_s: float) -> _T:
    """`ask(seconds left)` again every `OFFSETS_RETRY_S` while it raises one of
    `LEADER_ERRORS` or its answer `moved`, until `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = ask(max(deadline - time.monotonic(), 1.0))
        except KafkaException as exc:
            if exc.args[0].code() not in LEADER_ERRORS or time.monotonic() >= deadline:
                raise
        else:
            if not moved(found) or time.monotonic() >= deadline:
                return found
        time.sleep(OFFSETS_RETRY_S)


def assign_since(consumer: SyncConsumer, topic: str, since_ms: int) -> list[int]:
    """Assign `consumer` every partition of `topic` from its first record at or after
    `since_ms`; the partitions that have one (the others hold nothing that new)."""
    starts = offsets_for_times(
        consumer, [TopicPartition(topic, p, since_ms) for p in topic_partitions(consumer, topic)])
    live = [tp for tp in starts if tp.offset >= 0]
    if live:
        consumer.assign(live)
    return [tp.partition for tp in live]


@dataclass(frozen=True)
class ReadRecord:
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None


@dataclass(frozen=True)
class Tombstone:
    """A record of null value: on a compacted topic, `key` deleted."""

    partition: int
    offset: int
    key: bytes | None


class PartitionReader:
    """Iterates the records of `partitions` (already assigned to `consumer`), in offset
    order within each partition, tombstones skipped (`with_tombstones` keeps them).

    Stops once every partition reached its end, or with `follow` keeps waiting for new
    records; either way stops at `timeout_s`. `on_idle` is called after each fetch that
    brought nothing (about every 0.2 s while nothing arrives). After the loop, `waiting`
    names the partitions whose end was not reached. A read error is a PartitionReadError (a
    TopicRefusedError where no ACL lets this principal read the topic),
    raised once the records fetched with it are handed out: a caller that reads on loses none.
    """

    def __init__(self, consumer: SyncConsumer, partitions: Iterable[int], *,
                 follow: bool = False, timeout_s: float | None = None,
                 on_idle: Callable[[], None] | None = None) -> None:
        self.consumer = consumer
        self.waiting = set(partitions)
        self.follow = follow
        self.timeout_s = timeout_s
        self.on_idle = on_idle

    def __iter__(self) -> Iterator[ReadRecord]:
        for record in self.with_tombstones():
            if isinstance(record, ReadRecord):
                yield record

    def with_tombstones(self) -> Iterator[ReadRecord | Tombstone]:
        """The records, tombstones included."""
        for message in self.messages():
            partition, offset = message.partition() or 0, message.offset() or 0
            value = message.value()
            yield (ReadRecord(partition, offset, value, message.key()) if value is not None
                   else Tombstone(partition, offset, message.key()))

    def messages(self) -> Iterator[Message]:
        """The records as the consumer gives them (headers, timestamps, tombstones), without
        end-of-partition events; a caller may drop a partition from `waiting` itself."""
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while (self.follow or self.waiting) and (
                deadline is None or time.monotonic() < deadline):
            messages = consume_ready(self.consumer, 1000, settings.POLL_TIMEOUT_S)
            if not messages and self.on_idle is not None:
                self.on_idle()
            failed: Exception | None = None
            for message in messages:
                error = message.error()
                if error is not None and error.code() == PARTITION_EOF:
                    self.waiting.discard(message.partition() or 0)
                elif error is not None:
                    failed = failed or _read_error(message.topic() or "", error)
                else:
                    yield message
            if failed is not None:  # after the batch's records: the consumer is past them
                raise failed


def _read_error(topic: str, error: KafkaError) -> Exception:
    """A failed fetch as an error: TopicRefusedError when no ACL lets this principal read
    `topic` (no retry brings the ACL), else PartitionReadError."""
    if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return TopicRefusedError(topic, "read")
    return PartitionReadError(f"read of {topic} failed: {error}")
