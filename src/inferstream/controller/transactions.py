"""The controller's transactional producers: one per partition index it owns.

A job's records (its tasks, events and ledger entries) and the offsets of the jobs and
results partitions they answer all belong to one partition index, the job's home, so each
index commits in its own transaction under the transactional id `<base>.<index>`. The id
moves with the partition: the replica that is assigned an index initialises its id, which
fences the previous owner (dead, paused or not yet told of the rebalance) and aborts any
transaction it left open, at once. One id per replica (KIP-447 alone) would fence a zombie
too, but a transaction that a dead replica left open would then block the new owner's
read_committed replay of the ledger until `transaction.timeout.ms` and the broker's abort
check had both passed (a minute or more by default). Offsets are still sent with the
consumer group metadata, so the broker also refuses a commit from a stale generation.
`TransactionRecords` writes one transaction's records and notes those the cluster refuses
whatever the attempt (`refused`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from confluent_kafka import KafkaError, KafkaException

from inferstream.kafka.clients import Outgoing, SyncProducer
from inferstream.kafka.stuck_calls import let_go

log = logging.getLogger(__name__)

#: Producers initialised at the same time when a replica is assigned many partitions.
INIT_AT_ONCE = 8


class PartitionProducers:
    """`producer(index)` exists exactly for the partition indexes this replica owns."""

    def __init__(self, base_id: str, new_producer: Callable[[str], SyncProducer],
                 stop: threading.Event, init_timeout_s: float = 30.0,
                 refused: Callable[[str], Exception] | None = None) -> None:
        """`refused(transactional_id)` is the error raised when no ACL allows that id
        (default: the KafkaException itself); anything else is retried."""
        self.base_id = base_id
        self.refused = refused
        self.new_producer = new_producer
        self.stop = stop
        self.init_timeout_s = init_timeout_s
        self._producers: dict[int, SyncProducer] = {}

    def transactional_id(self, index: int) -> str:
        return f"{self.base_id}.{index}"

    @property
    def owned(self) -> set[int]:
        return set(self._producers)

    def producer(self, index: int) -> SyncProducer | None:
        return self._producers.get(index)

    def open(self, indexes: set[int]) -> None:
        """Initialise the producers of `indexes` (fencing their previous owners), several
        at a time; each is retried until it works or the controller is asked to stop."""
        new = sorted(indexes - self.owned)
        if not new:
            return
        with ThreadPoolExecutor(min(INIT_AT_ONCE, len(new)), "controller-init") as pool:
            ready = dict(zip(new, pool.map(self._initialised, new), strict=True))
        self._producers.update({i: p for i, p in ready.items() if p is not None})

    def replace(self, index: int) -> None:
        """A new producer for `index`: its init fences the old one and ends whatever
        transaction that one left open. A producer stuck in a call stays alive on that
        call's thread; nothing uses it again."""
        old = self._producers.pop(index, None)
        if old is not None:
            let_go(old)  # its destroy may never return after a broker outage
            del old
        producer = self._initialised(index)
        if producer is not None:
            self._producers[index] = producer

    def close(self, indexes: set[int]) -> None:
        """Let the producers of `indexes` deliver what they hold, then forget them; one that
        was fenced raises its fatal error from flush (nothing it holds can commit now)."""
        for index in sorted(indexes & self.owned):
            producer = self._producers.pop(index)
            try:
                producer.flush(5)
            except KafkaException as exc:
                log.info("partition %d: producer closed unflushed: %s", index, exc.args[0])
            let_go(producer)  # its destroy may never return after a broker outage
            del producer

    def close_all(self) -> None:
        self.close(self.owned)

    def _initialised(self, index: int) -> SyncProducer | None:
        tid = self.transactional_id(index)
        attempt = 0
        while not self.stop.is_set():
            attempt += 1
            producer = self.new_producer(tid)
            try:
                producer.init_transactions(self.init_timeout_s)
                return producer
            except KafkaException as exc:
                let_go(producer)  # destroyed on a thread of its own, as `replace` does
                del producer
                if exc.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                    raise (self.refused(tid) if self.refused else exc) from exc
                log.warning("cannot init transactions of %s (attempt %d): %s", tid, attempt,
                            exc)
                self.stop.wait(min(attempt, 5))
        return None


#: librdkafka's errors for a record that no attempt gets written: over its topic's
#: `max.message.bytes` (the broker's) or the producer's `message.max.bytes` (librdkafka's own,
#: raised by `produce`), or a record the broker holds invalid
REFUSED_RECORD = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD})


class TransactionRecords:
    """Produces the records of one transaction of `producer`, noting those the cluster
    refused for good (`REFUSED_RECORD`): from `produce` itself or from their delivery
    reports."""

    def __init__(self, producer: SyncProducer) -> None:
        self.producer = producer
        self._refused: list[tuple[Outgoing, str]] = []

    def produce(self, record: Outgoing) -> None:
        while True:
            try:
                self.producer.produce(record.topic, record.value, record.key,
                                      partition=record.partition,
                                      on_delivery=partial(self._delivered, record))
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)
            except KafkaException as exc:
                self._delivered(record, exc.args[0], None)
                raise

    def _delivered(self, record: Outgoing, error: KafkaError | None, _message: object) -> None:
        if error is not None and error.code() in REFUSED_RECORD:
            self._refused.append((record, str(error.name())))

    def refused(self) -> list[tuple[Outgoing, str]]:
        """The records refused for good, each with its error's name, once the transaction
        failed: the delivery reports waiting are served first (a transaction may fail at
        `send_offsets_to_transaction`, in an erroneous state, before they are)."""
        try:
            self.producer.poll(0)
        except KafkaException as exc:  # a fatal producer says so in every call
            log.debug("delivery reports not served: %s", exc)
        return list(self._refused)
