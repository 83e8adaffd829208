"""The controller: accepts jobs, issues their tasks, collects one result per task.

Jobs, results and the ledger are co-partitioned by job id (the same partition index in each
topic), and the controller group uses the range assignor, so the replica that owns a job's
partition also owns its results and its ledger. Every round's output (tasks, events, ledger
entries) is committed in one transaction with the consumed offsets.
"""

from __future__ import annotations

import faulthandler
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from inferstream.config import Config
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import (
    ItemStatus,
    Job,
    JobEvent,
    JobEventType,
    LedgerStatus,
    TaskDeclined,
    TaskResult,
    new_task,
    now_ms,
    read_job,
    read_result,
)
from inferstream.streams.client.results import write_job_output
from inferstream.streams.controller.admission import rejection_reason
from inferstream.streams.controller.declines import PoolView, redirect
from inferstream.streams.controller.expansion import Item
from inferstream.streams.controller.ledger import JobState, LedgerCodec
from inferstream.streams.controller.outbox import ControllerTopics, Outbox, PartitionCounts
from inferstream.streams.controller.placement import task_partition
from inferstream.streams.controller.replay import read_ledger
from inferstream.streams.controller.sizing import TaskSizer, choose_task_size, no_policy, sized
from inferstream.streams.errors import KafkaSetupError, StuckCallError
from inferstream.streams.kafka.clients import (
    REAL_CLIENTS,
    KafkaClients,
    Message,
    SyncConsumer,
    SyncProducer,
)
from inferstream.streams.kafka.deadline import call_with_deadline
from inferstream.streams.kafka.groups import describe_with
from inferstream.streams.kafka.settings import (
    LIBRDKAFKA_LOG,
    consumer_config,
    poll_timeout_s,
    producer_config,
)
from inferstream.streams.policy.assignment import (
    ModelRange,
    RangeSource,
    model_range,
    no_ranges,
)

log = logging.getLogger(__name__)

#: librdkafka's errors for a producer whose transactional id has a newer owner
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED,  # noqa: SLF001
           KafkaError.INVALID_PRODUCER_EPOCH}


def controller_group(config: Config) -> str:
    return f"{config.topic_prefix}controllers"


class Controller:
    """One controller replica; `run()` blocks until stopped. Settings: `config.controller`."""

    def __init__(self, config: Config, *, codec: Codec | None = None,
                 clients: KafkaClients = REAL_CLIENTS, task_sizer: TaskSizer = no_policy,
                 model_ranges: RangeSource = no_ranges) -> None:
        """`task_sizer(pool)`: the policy's task size for a pool, for jobs without a chunk
        size (see `sizing`); `model_ranges(pool)`: the policy's partition range per model,
        where a job's tasks go (see `placement`)."""
        self.config = config
        self.options = config.controller
        self.task_sizer = task_sizer
        self.model_ranges = model_ranges
        self.codec = codec or Codec(config.schema_registry_url)
        self.clients = clients
        self.ledger = LedgerCodec(self.codec)
        self.jobs: dict[str, JobState] = {}
        self.topics = ControllerTopics(
            jobs=config.topic("jobs"), results=config.topic("results"),
            events=config.topic("job-events"), ledger=config.topic("controller-ledger"),
            dlq=config.topic("dlq"))
        self._stop = threading.Event()
        self._consumer: SyncConsumer = clients.consumer(consumer_config(
            config, controller_group(config), **{"partition.assignment.strategy": "range"}))
        self.transactional_id = (self.options.transactional_id
                                 or f"{config.topic_prefix}controller")
        self._counts = PartitionCounts(self._consumer, self.topics)
        self._producer = self._new_producer()
        admin = clients.admin(config.confluent_config(logger=LIBRDKAFKA_LOG))
        self.pools = PoolView(describe_with(admin))

    def _new_producer(self) -> SyncProducer:
        return self.clients.producer(producer_config(self.config, **{
            "transactional.id": self.transactional_id}))

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        self._counts.load()
        self._init_transactions()
        self._consumer.subscribe([self.topics.jobs, self.topics.results],
                                 on_assign=self._on_assign, on_revoke=self._on_revoke)
        idle_since = time.monotonic()
        try:
            while not self._stop.is_set():
                if self.options.watchdog_s is not None:
                    faulthandler.dump_traceback_later(self.options.watchdog_s)
                busy = self._round()
                faulthandler.cancel_dump_traceback_later()
                if busy or any(j.status == LedgerStatus.ACTIVE for j in self.jobs.values()):
                    idle_since = time.monotonic()
                elif self._idle(idle_since):
                    break
        finally:
            faulthandler.cancel_dump_traceback_later()
            self._consumer.close()
            self._producer.flush(10)

    def _idle(self, since: float) -> bool:
        limit = self.options.idle_exit_s
        return limit is not None and time.monotonic() - since >= limit

    def partitions(self, topic: str) -> int:
        return self._counts.of(topic)

    # -- one round: consume, decide, commit ------------------------------------------------
    def _round(self) -> bool:
        messages = self._consumer.consume(num_messages=500, timeout=poll_timeout_s(
            self.options.idle_exit_s))
        out = Outbox(self.topics, self.codec, self.partitions)
        for message in messages:
            self._dispatch(message, out)
        self._issue_tasks(out)
        finished = self._emit_events(out)
        if not messages and not out.records:
            return False
        if self._commit(out):
            for state in finished:
                self._write_output(state)
        self._forget_finished()
        return True

    def _dispatch(self, message: Message, out: Outbox) -> None:
        if message.error() is not None:
            log.warning("consume error: %s", message.error())
            return
        try:
            if message.topic() == self.topics.jobs:
                self._on_job(read_job(self.codec, message.value() or b""),
                             message.partition() or 0, out)
                return
            record = read_result(self.codec, message.value() or b"")
            if "served_models" in record:
                self._on_declined(cast(TaskDeclined, record), out)
            else:
                self._on_result(record, out)
        except SchemaError as exc:
            out.dead_letter(message, f"undecodable record: {exc}")
            if message.topic() == self.topics.jobs:
                self._reject_unreadable(message, str(exc), out)

    def _reject_unreadable(self, message: Message, reason: str, out: Outbox) -> None:
        """A job record that cannot be read, keyed by what looks like a job id: tell whoever
        waits for that job, with a REJECTED event, instead of leaving it SUBMITTED forever."""
        job_id = _job_id_of(message.key())
        if job_id is None or job_id in self.jobs:
            return
        out.event(JobEvent(
            job_id=job_id, type=JobEventType.REJECTED, timestamp=now_ms(), model=None,
            reason=f"the job record could not be read: {reason}", total_items=None,
            total_tasks=None, done_items=0, ok_items=0, error_items=0, rate_items_per_s=None))
        log.info("job %s rejected: its record could not be read (%s)", job_id, reason)

    def _on_job(self, job: Job, partition: int, out: Outbox) -> None:
        if job["job_id"] in self.jobs:
            log.info("job %s seen again: ignored", job["job_id"])
            return
        size = choose_task_size(job, self.task_sizer, self.options.default_chunk_size)
        state = JobState(sized(job, size), partition)
        self.jobs[state.job_id] = state
        reason = rejection_reason(job, self.partitions, self.config.task_topic(job["pool"]))
        if reason is None:
            first = state.cursor().next_tasks(self.options.tasks_per_round)
            if not first and state.cursor().finished:
                reason = "empty input: the job names no items"
        if reason is not None:
            state.status = LedgerStatus.REJECTED
            out.event(state.event(JobEventType.REJECTED, reason))
            out.ledger(*self.ledger.job_entry(state), partition)
            log.info("job %s rejected: %s", state.job_id, reason)
            return
        out.event(state.event(JobEventType.ACCEPTED))
        self._produce_tasks(state, first, out)
        log.info("job %s accepted model=%s task_size=%d (%s)", state.job_id, job["model"],
                 size.items, size.source)

    def _issue_tasks(self, out: Outbox) -> None:
        for state in self.jobs.values():
            if state.status == LedgerStatus.ACTIVE and not state.expanded:
                tasks = state.cursor().next_tasks(self.options.tasks_per_round)
                self._produce_tasks(state, tasks, out)

    def _produce_tasks(self, state: JobState, tasks: list[tuple[int, list[Item]]],
                       out: Outbox) -> None:
        topic = self.config.task_topic(state.job["pool"])
        n = self.partitions(topic)
        within = self._model_range(state.job) if tasks else None
        for task_id, items in tasks:
            task = new_task(state.job, task_id, [i.as_record() for i in items])
            out.add(topic, task_partition(state.job_id, task_id, n, within),
                    state.job_id.encode(),
                    self.codec.encode("Task", task))
            state.issued_tasks += 1
            state.issued_items += len(items)
        state.expanded = state.cursor().finished
        state.changed = True
        out.ledger(*self.ledger.job_entry(state), state.partition)

    def _model_range(self, job: Job) -> ModelRange | None:
        try:
            return model_range(job["model"], self.model_ranges(job["pool"]))
        except Exception as exc:  # a policy table that cannot answer: all partitions
            log.warning("no model range from the policy for pool %s: %r", job["pool"], exc)
            return None

    def _on_declined(self, declined: TaskDeclined, out: Outbox) -> None:
        state = self.jobs.get(declined["job_id"])
        if (state is None or state.status != LedgerStatus.ACTIVE
                or declined["task_id"] in state.done):
            return
        out.records.append(redirect(self.pools, self.config, self.codec, declined,
                                    self.partitions))

    def _on_result(self, result: TaskResult, out: Outbox) -> None:
        self.pools.record_result(result["worker"], result["model"])
        state = self.jobs.get(result["job_id"])
        if state is None:
            return  # a job of another replica's partition, or long finished
        ok = sum(1 for item in result["items"] if item["status"] == ItemStatus.OK)
        errors = len(result["items"]) - ok
        if not state.record_result(result["task_id"], ok, errors):
            log.info("duplicate result dropped job=%s task=%d attempt=%d worker=%s",
                     state.job_id, result["task_id"], result["attempt"], result["worker"])
            return
        key, value = self.ledger.task_entry(
            state.job_id, result["task_id"], LedgerStatus.DONE, ok=ok, errors=errors,
            worker=result["worker"], attempt=result["attempt"])
        out.ledger(key, value, state.partition)

    def _emit_events(self, out: Outbox) -> list[JobState]:
        finished = []
        now = now_ms()
        interval_ms = self.options.progress_interval_s * 1000
        for state in self.jobs.values():
            if state.complete:
                state.status = LedgerStatus.COMPLETED
                out.event(state.event(JobEventType.COMPLETED))
                out.ledger(*self.ledger.job_entry(state), state.partition)
                finished.append(state)
                log.info("job %s completed ok=%d error=%d", state.job_id, state.ok_items,
                         state.error_items)
            elif state.status == LedgerStatus.ACTIVE and state.changed and (
                    now - state.last_event_ms >= interval_ms):
                out.event(state.event(JobEventType.PROGRESS))
                out.ledger(*self.ledger.job_entry(state), state.partition)
        return finished

    def _commit(self, out: Outbox) -> bool:
        """Write the round's records with the consumed offsets; on failure, rebuild state."""
        timeout = self.options.commit_timeout_s
        try:
            self._producer.begin_transaction()
            for record in out.records:
                self._produce(*record)
            positions = [tp for tp in self._consumer.position(self._consumer.assignment())
                         if tp.offset >= 0]
            self._bounded(self._producer.send_offsets_to_transaction, timeout, positions,
                          self._consumer.consumer_group_metadata())
            self._bounded(self._producer.commit_transaction, 2 * timeout)
            return True
        except (KafkaException, StuckCallError) as exc:
            self._recover(exc)
            return False

    def _bounded(self, call: Callable[..., object], timeout_s: float, *args: Any) -> None:
        """`call(*args, timeout_s)`, given up on (StuckCallError) `call_grace_s` after that."""
        call_with_deadline(call, *args, timeout_s,
                           deadline_s=timeout_s + self.options.call_grace_s)

    def _produce(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(topic, value, key, partition=partition)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self._producer.poll(0.1)

    def _recover(self, exc: KafkaException | StuckCallError) -> None:
        """After a failed or stuck transaction: abort it, or replace the producer (whose
        init_transactions aborts it) when it is stuck, fatal or cannot abort; then rebuild
        state from what was committed."""
        stuck = isinstance(exc, StuckCallError)
        log.warning("transaction %s (%s): rolling back to the last commit",
                    "stuck" if stuck else "failed", exc if stuck else exc.args[0])
        if stuck or exc.args[0].fatal() or not self._abort():
            self._replace_producer()
        self._reset(self._consumer.assignment())

    def _abort(self) -> bool:
        try:
            self._bounded(self._producer.abort_transaction, self.options.commit_timeout_s)
            return True
        except (KafkaException, StuckCallError) as exc:
            log.warning("abort failed (%s): replacing the transactional producer", exc)
            return False

    def _replace_producer(self) -> None:
        """A new producer under the same transactional id: its init_transactions fences the
        old one and aborts (or completes) whatever transaction the old one left open. A
        producer stuck in a call stays alive on that call's thread; nothing uses it again."""
        self._producer = self._new_producer()
        self._init_transactions()

    def _init_transactions(self) -> None:
        """Fence any earlier holder of the transactional id; a fresh producer per retry,
        until it works or the controller is asked to stop."""
        attempt = 0
        while not self._stop.is_set():
            attempt += 1
            if attempt > 1:
                self._producer = self._new_producer()
            try:
                self._producer.init_transactions(30)
                return
            except KafkaException as exc:
                if exc.args[0].code() in _FENCED:
                    raise KafkaSetupError(f"another controller took over: {exc}") from exc
                log.warning("cannot init transactions (attempt %d): %s", attempt, exc)
                self._stop.wait(min(attempt, 5))

    def _reset(self, assignment: list[TopicPartition]) -> None:
        """Forget in-memory state, rebuild it from the ledger, rewind to committed offsets;
        retried until it works or the controller is asked to stop."""
        attempt = 0
        while not self._stop.is_set():
            attempt += 1
            try:
                self.jobs.clear()
                self._on_assign(self._consumer, assignment)
                for tp in self._consumer.committed(assignment, timeout=30):
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
                return
            except (KafkaException, KafkaSetupError) as exc:
                log.warning("cannot rebuild state yet (attempt %d): %s", attempt, exc)
                self._stop.wait(min(attempt, 5))

    # -- rebalance --------------------------------------------------------------------------
    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        owned = sorted({tp.partition for tp in partitions if tp.topic == self.topics.jobs})
        records = read_ledger(self.config, self.topics.ledger, owned, self.clients)
        for job_id, state in self.ledger.rebuild(records).items():
            if state.status == LedgerStatus.ACTIVE:
                self.jobs[job_id] = state
        log.info("owning job partitions=%s active jobs rebuilt=%d", owned, len(self.jobs))

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        lost = {tp.partition for tp in partitions if tp.topic == self.topics.jobs}
        for job_id in [j for j, s in self.jobs.items() if s.partition in lost]:
            del self.jobs[job_id]

    def _forget_finished(self) -> None:
        horizon = now_ms() - self.options.retain_finished_s * 1000
        for job_id in [j for j, s in self.jobs.items()
                       if s.status != LedgerStatus.ACTIVE and s.last_event_ms < horizon]:
            del self.jobs[job_id]

    def _write_output(self, state: JobState) -> None:
        path = state.job.get("output_path")
        if path:
            threading.Thread(target=write_job_output, name=f"output-{state.job_id}",
                             args=(self.config, state.job_id, path),
                             kwargs={"clients": self.clients}, daemon=True).start()


def _job_id_of(key: bytes | None) -> str | None:
    """The job id a jobs record is keyed by, if its key is one (printable text)."""
    try:
        text = (key or b"").decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if 0 < len(text) <= 256 and text.isprintable() else None
