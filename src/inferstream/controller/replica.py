"""The controller: accepts jobs, issues their tasks, collects one result per task.

Jobs, results and the ledger are co-partitioned by job id (the same partition index in each
topic), and the controller group uses the range assignor, so the replica that owns a job's
partition also owns its results and its ledger. Every round's output (tasks, events, ledger
entries) is committed in one transaction with the consumed offsets.
"""

from __future__ import annotations

import faulthandler
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from inferstream.config import Config
from inferstream.controller.admission import rejection_reason
from inferstream.controller.deadlines import Deadlines
from inferstream.controller.declines import PoolView, failed_result, redirect
from inferstream.controller.expansion import Item
from inferstream.controller.hooks import ControllerHooks, JobProgress, RoundState
from inferstream.controller.ledger import JobState, LedgerCodec
from inferstream.controller.outbox import ControllerTopics, Outbox, PartitionCounts
from inferstream.controller.pacing import Pacing
from inferstream.controller.placement import task_partition
from inferstream.controller.replay import LedgerStandby, read_ledger
from inferstream.controller.sizing import choose_task_size, sized
from inferstream.controller.transactions import PartitionProducers
from inferstream.jobs.output import write_job_output
from inferstream.kafka.clients import (
    REAL_CLIENTS,
    KafkaClients,
    Message,
    Outgoing,
    SyncConsumer,
    SyncProducer,
    consume_ready,
)
from inferstream.kafka.errors import KafkaSetupError, StuckCallError
from inferstream.kafka.groups import describe_with
from inferstream.kafka.settings import (
    LIBRDKAFKA_LOG,
    consumer_config,
    partition_for,
    poll_timeout_s,
    producer_config,
)
from inferstream.kafka.stuck_calls import call_with_deadline
from inferstream.policy.view import NO_POLICY, ModelRange, PolicyView, model_range
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import (
    ItemStatus,
    Job,
    JobEvent,
    JobEventType,
    LedgerStatus,
    Task,
    TaskControl,
    TaskControlReason,
    TaskDeclined,
    TaskResult,
    as_record,
    new_task,
    now_ms,
    read_record,
    read_result,
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
                 clients: KafkaClients = REAL_CLIENTS, policy: PolicyView = NO_POLICY,
                 hooks: ControllerHooks | None = None) -> None:
        """`policy`: what the policy says of each pool, read for the task size of jobs
        without a chunk size (see `sizing`), the partition range of each model (see
        `placement`), and the workers' speeds and health (see `deadlines`, `pacing`);
        `hooks`: what its metrics hear of each round (see `hooks`)."""
        self.config = config
        self.hooks = hooks or ControllerHooks()
        self.options = config.controller
        self.policy = policy
        self.codec = codec or Codec(config.schema_registry_url)
        self.clients = clients
        self.ledger = LedgerCodec(self.codec)
        self.jobs: dict[str, JobState] = {}
        self.topics = ControllerTopics(
            jobs=config.topic("jobs"), results=config.topic("results"),
            events=config.topic("job-events"), ledger=config.topic("controller-ledger"),
            dlq=config.topic("dlq"), controls=config.topic("task-control"))
        self._stop = threading.Event()
        self._consumer: SyncConsumer = clients.consumer(consumer_config(
            config, controller_group(config), **{
                "partition.assignment.strategy": "range",
                "session.timeout.ms": self.options.session_timeout_ms,
                "heartbeat.interval.ms": self.options.heartbeat_interval_ms,
                # librdkafka's rebalance timeout too: with its 300 s default, a replica
                # SIGSTOPped during a rebalance held the whole group that long (P7)
                "max.poll.interval.ms": self.options.max_poll_interval_ms}))
        self.producers = PartitionProducers(
            self.options.transactional_id or f"{config.topic_prefix}controller",
            self._new_producer, self._stop)
        #: partition index -> when to take it back (monotonic): its producer was fenced
        self._retakes: dict[int, float] = {}
        #: output files being written, by job id, and those written (ms), for the ledger
        self._writing: dict[str, threading.Thread] = {}
        self._written: queue.SimpleQueue[tuple[str, int | None]] = queue.SimpleQueue()
        self._counts = PartitionCounts(self._consumer, self.topics)
        #: a warm copy of the whole ledger: a takeover reads only what came after it
        self.standby = LedgerStandby(config, self.topics.ledger, clients)
        admin = clients.admin(config.confluent_config(logger=LIBRDKAFKA_LOG))
        self.pools = PoolView(describe_with(admin))
        self.deadlines = Deadlines(self.pools, policy, config.worker_group,
                                   self.options.migration_slack, self.options.migration_floor_s,
                                   self.options.max_attempts)
        self.pacing = Pacing(self.deadlines, self.pools, policy, self.options.issue_ahead_s)
        self._checked_late = 0.0

    def _new_producer(self, transactional_id: str) -> SyncProducer:
        return self.clients.producer(producer_config(self.config, **{
            "transactional.id": transactional_id}))

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        self._counts.load()
        self.standby.start()
        self._consumer.subscribe([self.topics.jobs, self.topics.results],
                                 on_assign=self._on_assign, on_revoke=self._on_revoke)
        idle_since = time.monotonic()
        try:
            while not self._stop.is_set():
                if self.options.watchdog_s is not None:
                    faulthandler.dump_traceback_later(self.options.watchdog_s)
                busy = self._round()
                faulthandler.cancel_dump_traceback_later()
                if busy or any(j.status == LedgerStatus.ACTIVE or (
                        j.output_due and not j.output_failed) for j in self.jobs.values()):
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
        out = Outbox(self.topics, self.codec, self.partitions)
        # A partition revoked during the fetch (the rebalance callbacks run inside it) or
        # fenced since has no producer here: its owner reads these records again from the
        # committed offset.
        owned = self.producers.owned
        consumed = set()
        for message in messages:
            index = message.partition() or 0
            if index in owned:
                consumed.add(index)
                self._dispatch(message, out)
        self._issue_tasks(out)
        self._migrate_late(out)
        self._emit_events(out)
        self._record_outputs(out)
        if consumed or len(out):
            self._commit(out, consumed)
        self._write_outputs()
        self._forget_finished()
        self.hooks.after_round(time.monotonic() - started, self._round_state())
        return bool(messages) or bool(len(out))

    def _round_state(self) -> RoundState:
        by_state = Counter(str(state.status) for state in self.jobs.values())
        active = [JobProgress(state.job_id, state.done_items, state.total_items)
                  for state in self.jobs.values() if state.status == LedgerStatus.ACTIVE]
        return RoundState(dict(by_state), len(self.producers.owned), active)

    def _dispatch(self, message: Message, out: Outbox) -> None:
        if message.error() is not None:
            log.warning("consume error: %s", message.error())
            return
        try:
            if message.topic() == self.topics.jobs:
                name, named = self.codec.decode_named(message.value() or b"")
                if name == "TaskControl":  # a cancel (Job.cancel)
                    self._on_cancel(as_record(TaskControl, named),
                                    message.partition() or 0, out)
                elif name == "Job":
                    self._on_job(cast(Job, named), message.partition() or 0, out)
                else:
                    raise SchemaError(f"a {name} record, not a Job, on {self.topics.jobs}")
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
            total_tasks=None, done_items=0, ok_items=0, error_items=0, rate_items_per_s=None,
            home_partition=message.partition() or 0), message.partition() or 0)
        log.info("job %s rejected: its record could not be read (%s)", job_id, reason)

    def _on_job(self, job: Job, partition: int, out: Outbox) -> None:
        if job["job_id"] in self.jobs:
            log.info("job %s seen again: ignored", job["job_id"])
            return
        size = choose_task_size(job, self.policy, self.options.default_chunk_size)
        state = JobState(sized(job, size), partition)
        self.jobs[state.job_id] = state
        reason = rejection_reason(job, self.partitions, self.config.task_topic(job["pool"]))
        if reason is None and state.cursor().finished:
            reason = "empty input: the job names no items"
        if reason is not None:
            state.status = LedgerStatus.REJECTED
            out.event(state.event(JobEventType.REJECTED, reason), partition)
            out.ledger(*self.ledger.job_entry(state), partition)
            log.info("job %s rejected: %s", state.job_id, reason)
            return
        out.event(state.event(JobEventType.ACCEPTED), partition)
        out.count(partition, ("jobs_accepted",))
        self._issue_first(state, out)
        log.info("job %s accepted model=%s task_size=%d (%s)", state.job_id, job["model"],
                 size.items, size.source)

    def _on_cancel(self, control: TaskControl, partition: int, out: Outbox) -> None:
        """`inferstream cancel`: the job ends CANCELLED with what was done; workers skip
        the rest of its tasks. A job that is not active here (finished, or unknown) stays
        as it is."""
        state = self.jobs.get(control["job_id"])
        if control["reason"] != TaskControlReason.CANCELLED or control["task_id"] >= 0:
            log.warning("unexpected control record on %s: %s", self.topics.jobs, control)
            return
        if state is None or state.status != LedgerStatus.ACTIVE:
            log.info("cancel of job %s ignored: %s", control["job_id"],
                     "not active" if state else "not a job of this replica's partitions")
            return
        state.status = LedgerStatus.CANCELLED
        out.event(state.event(JobEventType.CANCELLED, "cancelled on request"), partition)
        out.ledger(*self.ledger.job_entry(state), state.partition)
        self._control(out, state.partition, state.job_id, -1, 0, TaskControlReason.CANCELLED)
        self.deadlines.forget_job(state.job_id)
        log.info("job %s cancelled at %d/%s items", state.job_id, state.done_items,
                 state.total_items if state.total_items is not None else "?")

    def _issue_first(self, state: JobState, out: Outbox) -> None:
        """A job's first tasks, when it is accepted: all of them, or up to
        `tasks_per_round`, without pacing; with it, the first task whatever the workers
        hold (the rest follow in `_issue_tasks`)."""
        if self.options.issue_ahead_s <= 0:
            self._produce_tasks(state, self._round_robin(state), out)
            return
        self._produce_tasks(state, self._paced(state, force=True), out)
        self.pacing.begin()  # what it planned is outstanding now

    def _issue_tasks(self, out: Outbox) -> None:
        """More tasks of the jobs not fully issued: up to `tasks_per_round` per job; with
        pacing, as far as the workers have room (see `pacing`), one task per job in turn,
        so that a long job does not hold a later one back."""
        waiting = [state for state in self.jobs.values()
                   if state.status == LedgerStatus.ACTIVE and not state.expanded]
        if self.options.issue_ahead_s <= 0:
            for state in waiting:
                self._produce_tasks(state, self._round_robin(state), out)
            return
        self.pacing.begin()
        placed: dict[str, list[tuple[int, list[Item], int]]] = {s.job_id: [] for s in waiting}
        turn = waiting
        while turn:
            again = []
            for state in turn:
                task = self._paced(state)
                placed[state.job_id].extend(task)
                if task and len(placed[state.job_id]) < self.options.tasks_per_round:
                    again.append(state)
            turn = again
        for state in waiting:
            if placed[state.job_id]:
                self._produce_tasks(state, placed[state.job_id], out)

    def _round_robin(self, state: JobState) -> list[tuple[int, list[Item], int]]:
        topic = self.config.task_topic(state.job["pool"])
        tasks = state.cursor().next_tasks(self.options.tasks_per_round)
        n = self.partitions(topic)
        within = self._model_range(state.job) if tasks else None
        return [(task_id, items, task_partition(state.job_id, task_id, n, within))
                for task_id, items in tasks]

    def _paced(self, state: JobState, *, force: bool = False
               ) -> list[tuple[int, list[Item], int]]:
        """The job's next task and its partition, if a worker has room for it (`force`:
        even if none has)."""
        cursor = state.cursor()
        if cursor.finished:
            return []
        pool = state.job["pool"]
        partition = self.pacing.place(
            pool, state.job["model"], self._model_range(state.job),
            self.partitions(self.config.task_topic(pool)), state.job_id, cursor.next_task_id,
            cursor.next_size, force=force)
        if partition is None:
            return []
        return [(task_id, items, partition) for task_id, items in cursor.next_tasks(1)]

    def _produce_tasks(self, state: JobState, tasks: list[tuple[int, list[Item], int]],
                       out: Outbox) -> None:
        topic = self.config.task_topic(state.job["pool"])
        now = now_ms()
        for task_id, items, partition in tasks:
            task = new_task(state.job, task_id, [i.as_record() for i in items],
                            home_partition=state.partition)
            encoded = self.codec.encode("Task", task)
            out.add(state.partition, topic, partition, state.job_id.encode(), encoded)
            self._track(task, encoded, state.partition, partition, now)
            state.issued_tasks += 1
            state.issued_items += len(items)
        out.count(state.partition, ("tasks_issued", state.job["pool"]), len(tasks))
        state.expanded = state.cursor().finished
        state.changed = True
        out.ledger(*self.ledger.job_entry(state), state.partition)

    # -- deadlines and migration ------------------------------------------------------------
    def _track(self, task: Task, encoded: bytes, home: int, partition: int, now: int) -> None:
        if self.options.migration_slack > 0 or self.options.issue_ahead_s > 0:
            self.deadlines.issued(task, encoded, home, partition, now)

    def _migrate_late(self, out: Outbox) -> None:
        """Issue the late tasks again elsewhere (at most every `migration_check_s`), telling
        workers to skip the attempt they hold; fail those out of attempts."""
        now = time.monotonic()
        if (self.options.migration_slack <= 0 or not len(self.deadlines)
                or now - self._checked_late < self.options.migration_check_s):
            return
        self._checked_late = now
        for late in self.deadlines.late(now_ms()):
            task, home = late.outstanding.task, late.outstanding.home
            if self.jobs.get(task["job_id"]) is None:
                continue
            if late.partition is None:
                reason = f"task {task['task_id']} {late.reason}"
                log.warning("job %s: %s: its items fail", task["job_id"], reason)
                out.add(home, self.topics.results, home, task["job_id"].encode(),
                        self.codec.encode("TaskResult", failed_result(task, reason)))
                continue
            again = Task(**{**task, "attempt": task["attempt"] + 1, "issued_at": now_ms()})
            encoded = self.codec.encode("Task", again)
            out.add(home, self.config.task_topic(task["pool"]), late.partition,
                    task["job_id"].encode(), encoded)
            self._control(out, home, task["job_id"], task["task_id"], again["attempt"],
                          TaskControlReason.MIGRATED)
            self._track(again, encoded, home, late.partition, now_ms())
            out.count(home, ("tasks_reissued", task["pool"], "migrated"))
            log.info("job %s task %d %s: re-issued as attempt %d on partition %d",
                     task["job_id"], task["task_id"], late.reason, again["attempt"],
                     late.partition)

    def _control(self, out: Outbox, home: int, job_id: str, task_id: int, attempt: int,
                 reason: TaskControlReason) -> None:
        """A task-control entry: workers skip the job's tasks, or the task's earlier
        attempts."""
        topic = self.topics.controls
        key = job_id if task_id < 0 else f"{job_id}/{task_id}"
        control = TaskControl(job_id=job_id, task_id=task_id, attempt=attempt, reason=reason,
                              at=now_ms())
        out.add(home, topic, partition_for(key, self.partitions(topic)), key.encode(),
                self.codec.encode("TaskControl", control))

    def _model_range(self, job: Job) -> ModelRange | None:
        try:
            return model_range(job["model"], self.policy.model_ranges(job["pool"]))
        except Exception as exc:  # a policy table that cannot answer: all partitions
            log.warning("no model range from the policy for pool %s: %r", job["pool"], exc)
            return None

    def _on_declined(self, declined: TaskDeclined, out: Outbox) -> None:
        state = self.jobs.get(declined["job_id"])
        if (state is None or state.status != LedgerStatus.ACTIVE
                or declined["task_id"] in state.done):
            return
        again = redirect(self.pools, self.config, self.codec, declined, self.partitions)
        out.append(state.partition, again)
        if again.topic != self.topics.results:  # re-issued, not failed: it gets a deadline
            self._track(read_record(self.codec, again.value, Task), again.value,
                        state.partition, again.partition, now_ms())
            out.count(state.partition, ("tasks_reissued", state.job["pool"], "declined"))

    def _on_result(self, result: TaskResult, out: Outbox) -> None:
        self.pools.record_result(result["worker"], result["model"])
        self.deadlines.observe(result["worker"], len(result["items"]),
                               result["inference_seconds"])
        state = self.jobs.get(result["job_id"])
        if state is None:
            return  # a job of another replica's partition, or long finished
        ok = sum(1 for item in result["items"] if item["status"] == ItemStatus.OK)
        errors = len(result["items"]) - ok
        if not state.record_result(result["task_id"], ok, errors):
            self.deadlines.dropped_late += 1
            out.count(state.partition, ("late_results_dropped",))
            log.info("duplicate result dropped job=%s task=%d attempt=%d worker=%s",
                     state.job_id, result["task_id"], result["attempt"], result["worker"])
            return
        self.deadlines.done(state.job_id, result["task_id"])
        out.count(state.partition, ("tasks_done", state.job["pool"]))
        out.count(state.partition, ("items_done", "ok"), ok)
        out.count(state.partition, ("items_done", "error"), errors)
        key, value = self.ledger.task_entry(
            state.job_id, result["task_id"], LedgerStatus.DONE, ok=ok, errors=errors,
            worker=result["worker"], attempt=result["attempt"])
        out.ledger(key, value, state.partition)

    def _emit_events(self, out: Outbox) -> None:
        now = now_ms()
        interval_ms = self.options.progress_interval_s * 1000
        for state in self.jobs.values():
            if state.complete:
                state.status = LedgerStatus.COMPLETED
                out.event(state.event(JobEventType.COMPLETED), state.partition)
                self._control(out, state.partition, state.job_id, -1, 0,
                              TaskControlReason.FINISHED)
                self.deadlines.forget_job(state.job_id)
                out.ledger(*self.ledger.job_entry(state), state.partition)
                log.info("job %s completed ok=%d error=%d", state.job_id, state.ok_items,
                         state.error_items)
            elif state.status == LedgerStatus.ACTIVE and state.changed and (
                    now - state.last_event_ms >= interval_ms):
                out.event(state.event(JobEventType.PROGRESS), state.partition)
                out.ledger(*self.ledger.job_entry(state), state.partition)

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
        """Write `records` with the consumed offsets of `index`; on failure, roll back."""
        timeout = self.options.commit_timeout_s
        try:
            producer.begin_transaction()
            for record in records:
                self._produce(producer, record)
            positions = [tp for tp in self._consumer.position(self._home(index))
                         if tp.offset >= 0]
            if positions:
                self._bounded(producer.send_offsets_to_transaction, timeout, positions,
                              self._consumer.consumer_group_metadata())
            self._bounded(producer.commit_transaction, 2 * timeout)
            return True
        except (KafkaException, StuckCallError) as exc:
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

    @staticmethod
    def _produce(producer: SyncProducer, record: Outgoing) -> None:
        while True:
            try:
                producer.produce(record.topic, record.value, record.key,
                                 partition=record.partition)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)

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
        results to the committed offsets; retried until it works or the controller stops."""
        attempt = 0
        while not self._stop.is_set():
            attempt += 1
            try:
                self._forget(indexes)
                self._rebuild(indexes)
                partitions = [tp for i in sorted(indexes) for tp in self._home(i)]
                for tp in self._consumer.committed(partitions, timeout=30):
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
                return
            except (KafkaException, KafkaSetupError) as exc:
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
        self._forget(owned)
        self._rebuild(owned)
        log.info("owning job partitions=%s active jobs rebuilt=%d (producers %.2f s, "
                 "rebuild %.2f s)", sorted(owned), len(self.jobs), opened - started,
                 time.monotonic() - opened)

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
        """The active jobs of `indexes` from the ledger, and the completed ones whose output
        file the ledger does not show as written (the next rounds write it)."""
        held, start = self.standby.records(sorted(indexes))
        records = held + read_ledger(self.config, self.topics.ledger, sorted(indexes),
                                     self.clients, start=start)
        recent = now_ms() - self.options.retain_finished_s * 1000
        for job_id, state in self.ledger.rebuild(records).items():
            if state.status == LedgerStatus.ACTIVE or (
                    state.output_due and state.last_event_ms >= recent):
                self.jobs[job_id] = state

    def _forget(self, indexes: set[int]) -> None:
        for job_id in [j for j, s in self.jobs.items() if s.partition in indexes]:
            del self.jobs[job_id]
        self.deadlines.forget_homes(indexes)

    def _drop(self, indexes: set[int]) -> None:
        """No longer own `indexes`: their jobs and producers go."""
        self._forget(indexes)
        self.producers.close(indexes)

    def _forget_finished(self) -> None:
        horizon = now_ms() - self.options.retain_finished_s * 1000
        for job_id in [j for j, s in self.jobs.items()
                       if s.status != LedgerStatus.ACTIVE
                       and not (s.output_due and not s.output_failed)
                       and s.last_event_ms < horizon]:
            del self.jobs[job_id]

    # -- output files: part of a job's state -----------------------------------------------
    def _write_outputs(self) -> None:
        """Start writing the file of every committed, completed job that has one due (on
        threads: a large output takes a while); the ledger records each when it is done."""
        for state in self.jobs.values():
            if (state.output_due and not state.output_failed
                    and state.job_id not in self._writing
                    and state.partition in self.producers.owned):
                thread = threading.Thread(target=self._write_output, args=(state,),
                                          name=f"output-{state.job_id}", daemon=True)
                self._writing[state.job_id] = thread
                thread.start()

    def _write_output(self, state: JobState) -> None:
        path = str(state.job.get("output_path"))
        try:
            count = write_job_output(self.config, state.job_id, path, clients=self.clients,
                                     partition=state.partition)
        except Exception as exc:  # a bad path must not stop the controller
            log.error("job %s: cannot write its output to %s: %s", state.job_id, path, exc)
            self._written.put((state.job_id, None))
            return
        log.info("job %s: output written to %s (%d lines)", state.job_id, path, count)
        self._written.put((state.job_id, now_ms()))

    def _record_outputs(self, out: Outbox) -> None:
        """Ledger entries for the output files written since the last round."""
        while not self._written.empty():
            job_id, at = self._written.get()
            self._writing.pop(job_id, None)
            state = self.jobs.get(job_id)
            if state is None or state.output_written_at is not None:
                continue
            if at is None:
                state.output_failed = True
            else:
                state.output_written_at = at
                out.ledger(*self.ledger.job_entry(state), state.partition)


def _job_id_of(key: bytes | None) -> str | None:
    """The job id a jobs record is keyed by, if its key is one (printable text)."""
    try:
        text = (key or b"").decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if 0 < len(text) <= 256 and text.isprintable() else None
