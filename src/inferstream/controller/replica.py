"""The controller replica: the Kafka loop around the job book.

Jobs, results and the ledger are co-partitioned by job id (the same partition index in each
topic), and the controller group uses the range assignor, so the replica that owns a job's
partition also owns its results and its ledger. Each round consumes, hands the records to the
`JobBook`, which decides, and commits each home partition's output (tasks, events, ledger
entries) in one transaction with the offsets consumed there.
"""

from __future__ import annotations

import faulthandler
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from inferstream.config import Config
from inferstream.controller.book import JobBook
from inferstream.controller.hooks import ControllerHooks
from inferstream.controller.outbox import Outbox, PartitionCounts
from inferstream.controller.outputs import OutputFiles
from inferstream.controller.refusals import check_allowed, refusal, topic_refused
from inferstream.controller.replay import LedgerStandby, read_ledger
from inferstream.controller.transactions import PartitionProducers, TransactionRecords
from inferstream.controller.versions import NO_VERSIONS, ServedVersions
from inferstream.controller.waiting import NOBODY_STARTING, Starting
from inferstream.kafka.clients import (
    REAL_CLIENTS,
    KafkaClients,
    Message,
    Outgoing,
    SyncConsumer,
    SyncProducer,
    consume_ready,
)
from inferstream.kafka.errors import KafkaSetupError, StuckCallError, TopicRefusedError
from inferstream.kafka.groups import describe_with
from inferstream.kafka.refusals import not_authorized
from inferstream.kafka.settings import (
    LIBRDKAFKA_LOG,
    consumer_config,
    poll_timeout_s,
    producer_config,
)
from inferstream.kafka.stuck_calls import call_with_deadline
from inferstream.policy.view import NO_POLICY, PolicyView
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import (
    Job,
    LedgerStatus,
    TaskControl,
    TaskDeclined,
    as_record,
    now_ms,
    read_result_summary,
)

log = logging.getLogger(__name__)

#: A round's transaction begins while the broker may still be writing the markers of the one
#: before (a controller commits every round); until they are written, the coordinator answers
#: CONCURRENT_TRANSACTIONS and librdkafka retries AddOffsetsToTxn (`send_offsets`) at its
#: exponential backoff, 100 ms doubling up to 1 s, so a round after a large transaction (a
#: job's tasks on a hundred partitions, as a whole pool's first results come in) waited up to
#: a second past the markers. Java's producer retries this case at 20 ms (KAFKA-5477,
#: apache/kafka#3377); confluent-kafka-python#967 is the same wait seen from Python.
TRANSACTION_RETRIES = {"retry.backoff.ms": 20, "retry.backoff.max.ms": 100}

#: librdkafka's errors for a producer whose transactional id has a newer owner
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED,  # noqa: SLF001
           KafkaError.INVALID_PRODUCER_EPOCH}


class Controller:
    """One controller replica; `run()` blocks until stopped. Settings: `config.controller`."""

    def __init__(self, config: Config, *, codec: Codec | None = None,
                 clients: KafkaClients = REAL_CLIENTS, policy: PolicyView = NO_POLICY,
                 hooks: ControllerHooks | None = None,
                 starting: Starting = NOBODY_STARTING,
                 versions: ServedVersions = NO_VERSIONS) -> None:
        """`policy`: what the policy says of each pool, read for the task size of jobs
        without a chunk size (`sizing`), the partition range of each model (`placement`),
        and the workers' speeds and health (`deadlines`, `pacing`); `hooks`: what its
        metrics hear of each round; `starting`: the workers that announce they are starting
        (`waiting`); `versions`: the repository models' versions they serve (`versions`)."""
        self.config = config
        self.hooks = hooks or ControllerHooks()
        self.options = config.controller
        self.codec = codec or Codec.for_config(config)
        self.clients = clients
        new_admin = partial(clients.admin, config.confluent_config(logger=LIBRDKAFKA_LOG))
        self.book = JobBook(config, codec=self.codec, policy=policy,
                            describe=describe_with(new_admin), partitions=self.partitions,
                            grown=lambda topic, n: self._counts.reach(topic, n),
                            starting=starting, versions=versions)
        self.topics = self.book.topics
        self._stop = threading.Event()
        self._consumer: SyncConsumer = clients.consumer(consumer_config(
            config, config.controller_group(), **{
                "partition.assignment.strategy": "range",
                "session.timeout.ms": self.options.session_timeout_ms,
                "heartbeat.interval.ms": self.options.heartbeat_interval_ms,
                # librdkafka's rebalance timeout too: with its 300 s default, a replica
                # SIGSTOPped during a rebalance held the whole group that long (P7)
                "max.poll.interval.ms": self.options.max_poll_interval_ms}))
        self.producers = PartitionProducers(
            config.controller_transactional_base(), self._new_producer, self._stop,
            refused=lambda tid: not_authorized(config, "controller",
                                               f"use transactional id {tid}"))
        #: partition index -> when to take it back (monotonic): its producer was fenced
        self._retakes: dict[int, float] = {}
        self.outputs = OutputFiles(config, clients)
        self._counts = PartitionCounts(self._consumer, self.topics)
        #: a warm copy of the whole ledger: a takeover reads only what came after it
        self.standby = LedgerStandby(config, self.topics.ledger, clients)

    def _new_producer(self, transactional_id: str) -> SyncProducer:
        return self.clients.producer(producer_config(self.config, **{
            "transactional.id": transactional_id, **TRANSACTION_RETRIES}))

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        self._counts.load()
        self.standby.start()
        self._consumer.subscribe([self.topics.jobs, self.topics.results],
                                 on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=partial(_lost, self._on_revoke, self.topics.jobs,
                                                 self.options.session_timeout_ms))
        idle_since = time.monotonic()
        try:
            while not self._stop.is_set():
                if self.options.watchdog_s is not None:
                    faulthandler.dump_traceback_later(self.options.watchdog_s)
                busy = self._round()
                faulthandler.cancel_dump_traceback_later()
                if busy or self.book.busy:
                    idle_since = time.monotonic()
                elif self._idle(idle_since):
                    break
        finally:
            faulthandler.cancel_dump_traceback_later()
            self._consumer.close()
            self.producers.close_all()
            self.standby.stop()

    def _idle(self, since: float) -> bool:
        limit = self.options.idle_exit_s
        return limit is not None and time.monotonic() - since >= limit

    def partitions(self, topic: str) -> int:
        return self._counts.of(topic)

    # -- one round: consume, decide, commit ------------------------------------------------
    def _round(self) -> bool:
        messages = consume_ready(self._consumer, 500, poll_timeout_s(self.options.idle_exit_s))
        started = time.monotonic()  # deciding and committing, not the wait for records
        self._retake_due()
        out = self.book.outbox()
        # A partition revoked during the fetch (the rebalance callbacks run inside it) or
        # fenced since has no producer here: its owner reads these records again from the
        # committed offset.
        owned = self.producers.owned
        consumed = set()
        for message in messages:
            check_allowed(self.config, message)  # a refused group or topic: stop
            index = message.partition() or 0
            if index in owned:
                consumed.add(index)
                self._dispatch(message, out)
        self.book.tick(out, now_ms())
        for job_id, at_ms in self.outputs.finished():
            self.book.output_written(job_id, at_ms, out)
        if consumed or len(out):
            self._commit(out, consumed)
        # after the commit: a file is read back from committed results
        self.outputs.start(self.book.outputs_due(self.producers.owned))
        self.hooks.after_round(time.monotonic() - started,
                               self.book.round_state(len(self.producers.owned),
                                                     self.standby.held()))
        return bool(messages) or bool(len(out))

    def _dispatch(self, message: Message, out: Outbox) -> None:
        """The record decoded and handed to the book; one that cannot be decoded to the
        dead-letter topic."""
        if message.error() is not None:
            log.warning("consume error: %s", message.error())
            return
        partition = message.partition() or 0
        try:
            if message.topic() == self.topics.jobs:
                name, named = self.codec.decode_named(message.value() or b"")
                if name == "TaskControl":  # a cancel (Job.cancel)
                    self.book.on_cancel(as_record(TaskControl, named),
                                        partition, out)
                elif name == "Job":
                    self.book.on_job(cast(Job, named), partition, out)
                else:
                    raise SchemaError(f"a {name} record, not a Job, on {self.topics.jobs}")
                return
            record = read_result_summary(self.codec, message.value() or b"")
            if record is not None and "served_models" in record:
                self.book.on_declined(cast(TaskDeclined, record), out)
            elif record is not None:  # None: a piece of a large result, counted by its own
                self.book.on_result(record, out)
        except SchemaError as exc:
            out.dead_letter(message, f"undecodable record: {exc}")
            if message.topic() == self.topics.jobs:
                self.book.on_unreadable_job(message.key(), partition, str(exc), out)

    def _commit(self, out: Outbox, consumed: set[int]) -> set[int]:
        """Commit each home partition's records with its jobs and results offsets, one
        transaction per partition index; returns the indexes whose commit went through."""
        committed = set()
        for index in sorted(set(out.records) | consumed):
            producer = self.producers.producer(index)
            started = time.monotonic()
            if producer is not None and self._commit_one(index, producer,
                                                         out.records.get(index, [])):
                committed.add(index)
                self.hooks.after_transaction(time.monotonic() - started,
                                             out.tallies.get(index, Counter()))
        return committed

    def _commit_one(self, index: int, producer: SyncProducer, records: list[Outgoing]) -> bool:
        """Write `records` with the consumed offsets of `index`; on failure, roll back (the
        jobs of records the cluster refused for good end in the round redone: `refused`)."""
        timeout = self.options.commit_timeout_s
        writer = TransactionRecords(producer)
        try:
            producer.begin_transaction()
            for record in records:
                writer.produce(record)
            positions = [tp for tp in self._consumer.position(self._home(index))
                         if tp.offset >= 0]
            if positions:
                self._bounded(producer.send_offsets_to_transaction, timeout, positions,
                              self._consumer.consumer_group_metadata())
            self._bounded(producer.commit_transaction, 2 * timeout)
            return True
        except (KafkaException, StuckCallError) as exc:
            # refused for want of an ACL: stop (the next owner's init aborts what is open)
            refused = refusal(self.config, exc, topics={r.topic for r in records},
                              transactional_id=self.producers.transactional_id(index))
            if refused is not None:
                raise refused from exc
            if isinstance(exc, KafkaException):  # a stuck producer is not asked
                self.book.refused.note(writer.refused(), self.book.jobs, now_ms())
            self._recover(index, producer, exc)
            return False

    def _home(self, index: int) -> list[TopicPartition]:
        """The partitions whose offsets commit in the transaction of `index`."""
        return [TopicPartition(self.topics.jobs, index),
                TopicPartition(self.topics.results, index)]

    def _bounded(self, call: Callable[..., object], timeout_s: float, *args: Any) -> None:
        """`call(*args, timeout_s)`, given up on (StuckCallError) `call_grace_s` after that."""
        call_with_deadline(call, *args, timeout_s,
                           deadline_s=timeout_s + self.options.call_grace_s)

    def _recover(self, index: int, producer: SyncProducer,
                 exc: KafkaException | StuckCallError) -> None:
        """After a failed or stuck transaction of `index`: when another replica's producer
        fenced ours, give the partition up until the group settles; else abort, or replace
        the producer (whose init aborts it) when it is stuck, fatal or cannot abort, and
        rebuild the partition's state from what was committed."""
        stuck = isinstance(exc, StuckCallError)
        if not stuck and exc.args[0].code() in _FENCED:
            log.warning("partition %d: another replica took it over (%s): dropped until the "
                        "group says otherwise", index, exc.args[0])
            self._drop({index})
            self._retakes[index] = time.monotonic() + self.options.session_timeout_ms / 1000
            return
        log.warning("partition %d: transaction %s (%s): rolling back to the last commit",
                    index, "stuck" if stuck else "failed", exc if stuck else exc.args[0])
        if stuck or exc.args[0].fatal() or not self._abort(producer):
            self.producers.replace(index)
        self._reset({index})

    def _abort(self, producer: SyncProducer) -> bool:
        try:
            self._bounded(producer.abort_transaction, self.options.commit_timeout_s)
            return True
        except (KafkaException, StuckCallError) as exc:
            log.warning("abort failed (%s): replacing the transactional producer", exc)
            return False

    def _retake_due(self) -> None:
        """Take back a fenced partition that the group still assigns to this replica a
        session timeout later (a replica paused past its session sees its revocation by
        then; one that is not a zombie was fenced by a stray producer)."""
        now = time.monotonic()
        for index in [i for i, at in self._retakes.items() if at <= now]:
            del self._retakes[index]
            if self._assigned_indexes() & {index}:
                log.info("partition %d: still assigned here: taking it back", index)
                self.producers.open({index})
                self._reset({index})

    def _assigned_indexes(self) -> set[int]:
        return {tp.partition for tp in self._consumer.assignment()
                if tp.topic == self.topics.jobs}

    def _reset(self, indexes: set[int]) -> None:
        """Forget the state of `indexes`, rebuild it from the ledger, rewind their jobs and
        results to the committed offsets; retried until it works or the controller stops, or
        the cluster refuses it for want of an ACL (AuthorizationError: no retry brings it)."""
        attempt = 0
        while not self._stop.is_set():
            attempt += 1
            try:
                self._rebuild(indexes)
                partitions = [tp for i in sorted(indexes) for tp in self._home(i)]
                for tp in self._consumer.committed(partitions, timeout=30):
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
                return
            except (KafkaException, KafkaSetupError) as exc:
                refused = refusal(self.config, exc)
                if refused is not None:
                    raise refused from exc
                log.warning("cannot rebuild state yet (attempt %d): %s", attempt, exc)
                self._stop.wait(min(attempt, 5))

    # -- rebalance --------------------------------------------------------------------------
    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """Own the partition indexes of `partitions`: their producers first (fencing the
        previous owner and aborting what it left open), then their jobs from the ledger."""
        owned = {tp.partition for tp in partitions if tp.topic == self.topics.jobs}
        started = time.monotonic()
        self._drop(self.producers.owned - owned)
        self.producers.open(owned)
        opened = time.monotonic()
        self._rebuild(owned)
        log.info("owning job partitions=%s jobs rebuilt=%d active=%d (producers %.2f s, "
                 "rebuild %.2f s)", sorted(owned), len(self.book.jobs),
                 _active(self.book.jobs), opened - started, time.monotonic() - opened)

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """Drop the revoked partitions, producers too, even those the next assignment gives
        back (an eager rebalance revokes all): records fetched before the revoke are then
        left to the committed offset, and a kept partition's new producer, whose init
        returns only once this replica's last transaction is complete, comes before its
        replay. A commit returns before its markers are written and a read_committed replay
        ends at the last marker written: a replay right after this replica's own commit
        could miss that commit's ledger entries (a job accepted then was lost)."""
        self._drop({tp.partition for tp in partitions if tp.topic == self.topics.jobs})

    def _rebuild(self, indexes: set[int]) -> None:
        """The jobs of `indexes` forgotten, then read again from the standby's copy of the
        ledger and what was committed after it."""
        self.book.forget(indexes)
        held, start = self.standby.copy(sorted(indexes))
        try:
            records = read_ledger(self.config, self.topics.ledger, sorted(indexes),
                                  self.clients, start=start, onto=held)
        except TopicRefusedError as exc:  # an ACL deleted since the start
            raise topic_refused(self.config, exc) from exc
        self.book.adopt(records, now_ms())

    def _drop(self, indexes: set[int]) -> None:
        """No longer own `indexes`: their jobs and producers go."""
        self.book.forget(indexes)
        self.producers.close(indexes)


def _active(jobs: dict[str, Any]) -> int:
    """How many of a replica's jobs run: it keeps finished ones `retain_finished_s` too."""
    return sum(state.status == LedgerStatus.ACTIVE for state in jobs.values())


def _lost(revoke: Callable[[Any, list[TopicPartition]], None], jobs_topic: str,
          session_timeout_ms: int, consumer: Any, partitions: list[TopicPartition]) -> None:
    """A replica's `on_lost`: a revoke, said in one line. The group expired the replica
    (paused, stalled or cut off past its session timeout), so another replica has its
    partitions and has fenced its producers; a replica that woke up logged nothing of it,
    only its next "owning" line, as after any rebalance."""
    lost = sorted({tp.partition for tp in partitions if tp.topic == jobs_topic})
    if lost:
        log.warning("lost job partitions=%s: this replica was out of the controller group "
                    "past its session timeout (%d ms: paused, stalled or cut off from the "
                    "cluster); another replica owns their jobs now, its transactions fencing "
                    "this one's; rejoining", lost, session_timeout_ms)
    revoke(consumer, partitions)
