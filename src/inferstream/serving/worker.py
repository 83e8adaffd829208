"""The worker: a member of its pool's consumer group that turns tasks into task results.

One task record goes: task topic -> `Worker._accept` -> `BatchingPipeline` (decode, batch,
infer) -> `PartitionCommitter` (result and offset in one transaction) -> results topic.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    InconsistentGroupProtocolError,
    KafkaError,
)

from inferstream.config import Config
from inferstream.kafka.clients import (
    REAL_CLIENTS,
    AsyncConsumer,
    AsyncProducer,
    KafkaClients,
    Outgoing,
    Record,
)
from inferstream.kafka.deadletters import dead_letter
from inferstream.kafka.errors import KafkaSetupError, PartitionLostError
from inferstream.kafka.settings import (
    aiokafka_kwargs,
    poll_timeout_s,
    results_partition,
    worker_consumer_kwargs,
)
from inferstream.models import LoadedModel, ModelError
from inferstream.policy.membership import PoolMembership
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import (
    ItemStatus,
    Task,
    TaskDeclined,
    TaskResult,
    now_ms,
    read_record,
)
from inferstream.serving.committers.at_least_once import AtLeastOnceCommitter
from inferstream.serving.committers.base import PartitionCommitter, PendingTask
from inferstream.serving.committers.exactly_once import (
    TransactionalCommitter,
    quiet_fenced_futures,
)
from inferstream.serving.hooks import HookChain, WorkerHooks
from inferstream.serving.loader import ModelLoader
from inferstream.serving.ownership import Ownership
from inferstream.serving.pipeline import TaskRun
from inferstream.serving.samples import SysInfoPublisher
from inferstream.serving.served import ServedModels
from inferstream.worker.controls import TaskControls

log = logging.getLogger(__name__)

#: Seconds between two reports of the in-flight items and the consumer lag.
LOAD_INTERVAL_S = 1.0


def worker_group(config: Config) -> str:
    return config.worker_group()


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Worker:
    """Consumes the pool's task topic, runs the data path, commits results exactly once.

    Settings: `config.worker`. `run()` returns after SIGTERM (or `request_stop`) once the
    in-flight tasks are committed, or in bounded mode after `idle_exit_s` with nothing to do.
    From calibration at start to shutdown it publishes samples to `sysinfo` (`self.sysinfo`).
    """

    def __init__(self, config: Config, models: LoadedModel | Sequence[LoadedModel], *,
                 hooks: WorkerHooks | None = None, codec: Codec | None = None,
                 clients: KafkaClients = REAL_CLIENTS, loader: ModelLoader | None = None
                 ) -> None:
        self.config = config
        self.options = config.worker
        self.worker_id = self.options.worker_id or default_worker_id()
        self.codec = codec or Codec(config.schema_registry_url)
        self.clients = clients
        self.sysinfo = SysInfoPublisher(config, self.worker_id, clients, self.codec)
        self.controls: TaskControls | None = self._new_controls()
        self.hooks = HookChain(hooks or WorkerHooks(), self.sysinfo.performance,
                               self.sysinfo.queue)
        loaded = [models] if isinstance(models, LoadedModel) else list(models)
        self.served = ServedModels(self.options, loaded, self.hooks, loader)
        self.membership = PoolMembership(config, self.worker_id, clients, self.codec,
                                         lambda: self.served.names,
                                         lambda: self.sysinfo.calibration)
        self.group_id = self._group_id()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._consumer: AsyncConsumer | None = None
        self._results_partitions = 1
        self._dlq_topic = config.topic("dlq")
        self._dlq_partitions = 1
        self._commit_tasks: set[asyncio.Task[None]] = set()
        self._shared_producer: AsyncProducer | None = None
        self._run_task: asyncio.Task[Any] | None = None
        self._started = False
        self._load_at = 0.0

    # -- what a worker reads and writes (a stream member reads another source) -------------
    def _group_id(self) -> str:
        return worker_group(self.config)

    def _source_topic(self) -> str:
        return self.config.task_topic()

    def _new_controls(self) -> TaskControls | None:
        """The follower of the controller's task-control topic (what tasks to skip)."""
        return TaskControls(self.config, self.clients, self.codec)

    async def _learn_outputs(self) -> None:
        """Partition counts of the topics `_render` writes to."""
        self._results_partitions, self._dlq_partitions = await self._partition_counts(
            self.config.topic("results"), self._dlq_topic)

    def _start_at_end(self) -> bool:
        """Whether a partition with no committed offset starts at its end, not its start."""
        return False

    # -- lifecycle --------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Finish what is in flight, commit it, leave the group (SIGTERM does this); before
        the worker has joined its group, give up the start (a connect can hang)."""
        self._stopping.set()
        self._wake.set()
        if not self._started and self._run_task is not None:
            self._run_task.cancel()

    async def run(self) -> None:
        self._run_task = asyncio.current_task()
        quiet_fenced_futures(asyncio.get_running_loop())
        try:
            await self._connect()
            self._started = True
            await self._consume_loop()
            await self._drain()
        except asyncio.CancelledError:
            if self._started or not self._stopping.is_set():
                raise
            log.info("stopped before joining the group")
        finally:
            await self._shutdown()

    async def _connect(self) -> None:
        """Start the clients; a cluster that cannot be used is one KafkaSetupError."""
        try:
            await self._start()
        except (InconsistentGroupProtocolError, GroupAuthorizationFailedError) as exc:
            raise self._refused(exc) from exc
        except KafkaError as exc:  # aiokafka: KafkaConnectionError, UnsupportedVersion, ...
            raise KafkaSetupError(f"cannot start the worker's Kafka clients at "
                                  f"{self.config.bootstrap_servers}: {exc!r}") from exc

    def _refused(self, exc: KafkaError) -> KafkaSetupError:
        """The one-line error for a group that will not have this worker (fatal in aiokafka:
        its consumer raises the same error on every later call)."""
        if isinstance(exc, InconsistentGroupProtocolError):
            return KafkaSetupError(
                f"the workers of pool {self.config.pool} (group {self.group_id}) use another "
                f"assignor than this one's {self.options.assignor!r}: start every worker of "
                "a pool with the same --assignor (INFERSTREAM_WORKER_ASSIGNOR)")
        return KafkaSetupError(f"not authorised to join group {self.group_id}: {exc}")

    async def _start(self) -> None:
        if self.options.guarantee == "at-least-once":
            self._shared_producer = self.clients.aio_producer(aiokafka_kwargs(
                self.config, AIOKafkaProducer, enable_idempotence=True,
                max_request_size=16 * 1024 * 1024))
            await self._shared_producer.start()
        await self.sysinfo.start(self.served, lambda: self._consumer, self.hooks)
        self.membership.start()
        if self.controls is not None:
            self.controls.start()
        self._consumer = self._new_consumer()
        self.membership.watch(self._consumer)
        self.ownership = Ownership(self._consumer, self._new_committer,
                                   self.hooks.on_assignment, self._stopping,
                                   start_at_end=self._start_at_end(),
                                   on_rebalance=self.hooks.after_rebalance)
        await self._consumer.start()
        await self._learn_outputs()
        self.served.start()

    def _new_consumer(self) -> AsyncConsumer:
        consumer = self.clients.aio_consumer(worker_consumer_kwargs(
            self.config, self.group_id, self.worker_id, self.membership.strategies()))
        consumer.subscribe([self._source_topic()], listener=_Rebalance(self))
        return consumer

    async def _partition_counts(self, *topics: str) -> list[int]:
        """Partitions of each topic, asked through one short-lived plain producer."""
        probe = self.clients.aio_producer(aiokafka_kwargs(self.config, AIOKafkaProducer))
        await probe.start()
        try:
            counts = []
            for topic in topics:
                try:
                    partitions = await asyncio.wait_for(probe.partitions_for(topic), 30)
                except (TimeoutError, KafkaError) as exc:  # aiokafka: KafkaTimeoutError
                    raise KafkaSetupError(
                        f"topic {topic} not found; run `inferstream topics create`"
                    ) from exc
                counts.append(len(partitions))
            return counts
        finally:
            await probe.stop()

    # -- the consume loop -------------------------------------------------------------------
    async def _consume_loop(self) -> None:
        assert self._consumer is not None  # noqa: S101
        idle_since = time.monotonic()
        while not self._stopping.is_set():
            room = self.options.max_in_flight_items - self.served.items_in_flight
            if room <= 0:
                self._wake.clear()
                await _wait(self._wake, 0.2)
                continue
            try:
                batches = await self._fetch(room)
            except (InconsistentGroupProtocolError, GroupAuthorizationFailedError) as exc:
                raise self._refused(exc) from exc
            except KafkaError as exc:  # a broker restarting: the client reconnects by itself
                log.warning("fetch failed: %r", exc)
                await asyncio.sleep(0.5)
                continue
            for tp, records in batches.items():
                for record in records:
                    self._accept(tp, record)
            if batches or self._busy():
                idle_since = time.monotonic()
            elif self._idle_for(idle_since):
                log.info("idle for %.1fs: exiting (bounded mode)", self.options.idle_exit_s)
                return

    async def _fetch(self, room: int) -> dict[TopicPartition, list[Any]]:
        """Up to about `room / 8` task records, taken evenly from every owned partition.

        aiokafka hands out buffered records one partition at a time, so a single `getmany`
        would run one partition's whole backlog before the next (a partition that just moved
        here would wait behind it); asking each partition in turn keeps them interleaved.
        """
        assert self._consumer is not None  # noqa: S101
        if time.monotonic() - self._load_at >= LOAD_INTERVAL_S:
            self._load_at = time.monotonic()
            self._report_load()
        owned = sorted(self._consumer.assignment())
        share = max(1, room // (8 * max(1, len(owned))))
        batches: dict[TopicPartition, list[Any]] = {}
        for tp in owned:
            got = await self._consumer.getmany(tp, timeout_ms=0, max_records=share)
            batches.update(got)
        if batches:
            return batches
        got_any: dict[TopicPartition, list[Any]] = await self._consumer.getmany(
            timeout_ms=int(poll_timeout_s(self.options.idle_exit_s) * 1000), max_records=share)
        return got_any

    def _report_load(self) -> None:
        """The items in flight, and the consumer lag of each owned partition: its last
        stable offset (the end a read_committed consumer sees) after its committed one, as
        kafka-consumer-groups counts it: the commit marker of the controller's last
        transaction lies past the last task, so an idle partition it wrote to shows 1
        (aiokafka's position does not move past a marker either)."""
        assert self._consumer is not None  # noqa: S101
        lags = {}
        for tp in self._consumer.assignment():
            offset = self.ownership.offsets.get(tp)
            stable = self._consumer.last_stable_offset(tp)
            if offset is not None and stable is not None:
                lags[tp.partition] = max(0, stable - offset)
        self.hooks.on_load(self.served.items_in_flight, lags)

    def _busy(self) -> bool:
        return self.served.items_in_flight > 0 or any(
            c.busy for c in self.ownership.committers.values()
        )

    def _idle_for(self, since: float) -> bool:
        limit = self.options.idle_exit_s
        return limit is not None and time.monotonic() - since >= limit

    def _accept(self, tp: TopicPartition, record: Record) -> None:
        """Hand one task record to the pipeline of its model; decline it when no model of
        this worker serves it; dead-letter it when it cannot be read."""
        committer = self.ownership.active(tp)
        if committer is None:
            # Revoked while the fetch was in flight (the new owner reads it again), or our
            # producer was fenced: take the partition back, from its committed offset.
            self.ownership.retake_later(tp)
            return
        try:
            task = read_record(self.codec, record.value or b"", Task)
        except SchemaError as exc:
            self.hooks.after_dead_letter(str(exc))
            dead = self._dead_letter(tp, record, f"undecodable task record: {exc}")
            self._commit_outgoing(committer, PendingTask(record.offset, None, [dead]))
            return
        skip = self.controls.skip_reason(task) if self.controls is not None else None
        if skip is not None:  # committed with no result: the controller wants none
            self.hooks.after_skip(task["model"])
            log.debug("skipped job=%s task=%d attempt=%d: %s", task["job_id"], task["task_id"],
                      task["attempt"], skip)
            self._commit_outgoing(committer, PendingTask(record.offset, None, []))
            return
        refusal = self.served.refusal(task["model"])
        if refusal is not None:
            self._decline(committer, PendingTask(record.offset, None, []), task, refusal)
            return
        run = TaskRun(task, on_done=lambda _run: self._schedule_commit(committer))
        pending = PendingTask(record.offset, run, [])
        committer.append(pending)
        pipeline = self.served.find(task["model"])
        if pipeline is not None:
            pipeline.submit(run)
        else:
            self._spawn(self._load_then_submit(committer, pending, task))

    async def _load_then_submit(self, committer: PartitionCommitter, pending: PendingTask,
                                task: Task) -> None:
        """Load the task's model on demand, then run it; decline it if it cannot load."""
        try:
            pipeline = await self.served.load(task["model"])
        except ModelError as exc:
            pending.run = None
            self._decline(committer, pending, task, f"cannot load {task['model']}: {exc}",
                          queued=True)
            return
        if pending.run is not None and not pending.run.cancelled:
            pipeline.submit(pending.run)

    def _decline(self, committer: PartitionCommitter, pending: PendingTask, task: Task,
                 reason: str, queued: bool = False) -> None:
        """Answer the task with a TaskDeclined, committed with its offset like a result."""
        self.hooks.after_decline(task["model"])
        log.info("declined job=%s task=%d model=%s: %s", task["job_id"], task["task_id"],
                 task["model"], reason)
        declined = TaskDeclined(
            job_id=task["job_id"], task_id=task["task_id"], attempt=task["attempt"],
            worker=self.worker_id, model=task["model"], served_models=self.served.names,
            reason=f"worker {self.worker_id} {reason}", task=self.codec.encode("Task", task),
            declined_at=now_ms())
        partition = results_partition(task, self._results_partitions)
        pending.outgoing = [Outgoing(self.config.topic("results"), partition,
                                     task["job_id"].encode(),
                                     self.codec.encode("TaskDeclined", declined))]
        if queued:
            self._schedule_commit(committer)
        else:
            self._commit_outgoing(committer, pending)

    def _commit_outgoing(self, committer: PartitionCommitter, pending: PendingTask) -> None:
        committer.append(pending)
        self._schedule_commit(committer)

    def _dead_letter(self, tp: TopicPartition, record: Record, reason: str) -> Outgoing:
        return dead_letter(self.codec, self._dlq_topic, self._dlq_partitions,
                           topic=tp.topic, partition=tp.partition, offset=record.offset,
                           reason=reason, value=record.value, consumer=self.worker_id,
                           key=record.key, origin_timestamp_ms=record.timestamp)

    # -- results ----------------------------------------------------------------------------
    def _render(self, pending: PendingTask) -> list[Outgoing]:
        if pending.run is None:
            return pending.outgoing
        run = pending.run
        task = run.task
        result = TaskResult(
            job_id=task["job_id"], task_id=task["task_id"], attempt=task["attempt"],
            worker=self.worker_id, model=run.model,
            items=[outcome for outcome in run.outcomes if outcome is not None],
            started_at=int(run.started_at * 1000), finished_at=int(run.finished_at * 1000),
            decode_seconds=run.decode_seconds, inference_seconds=run.inference_seconds,
        )
        partition = results_partition(task, self._results_partitions)
        value = self.codec.encode("TaskResult", result)
        return [Outgoing(self.config.topic("results"), partition, task["job_id"].encode(), value)]

    def _schedule_commit(self, committer: PartitionCommitter) -> None:
        self._spawn(self.commit_partition(committer))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)

    async def commit_partition(self, committer: PartitionCommitter) -> None:
        """Commit what is ready in `committer`; a lost partition is retaken if still ours."""
        started = time.monotonic()
        try:
            committed = await committer.commit_ready()
        except PartitionLostError as exc:
            log.warning("partition lost, its uncommitted tasks go to its next owner: %s", exc)
            self.ownership.retake_later(committer.tp)
            return
        if committed and self.ownership.committers.get(committer.tp) is committer:
            # (a partition dropped while its commit ran keeps no offset here)
            self.ownership.offsets[committer.tp] = committed[-1].offset + 1
            self.hooks.after_commit(committer.tp.partition, committed[-1].offset + 1,
                                    time.monotonic() - started)
        self._after_committed(committer, committed)
        self._wake.set()

    def _after_committed(self, committer: PartitionCommitter,
                         committed: list[PendingTask]) -> None:
        for pending in committed:
            if pending.run is not None:
                ok = sum(1 for o in pending.run.outcomes if o and o["status"] == ItemStatus.OK)
                self.hooks.after_task(pending.run.model, ok, len(pending.run.outcomes) - ok)

    # -- what the committers ask of their owner (commits.Owner) ----------------------------
    def owns(self, tp: TopicPartition) -> bool:
        return self.ownership.assigned(tp) and not self.ownership.rebalancing

    async def committed_offset(self, tp: TopicPartition) -> int | None:
        assert self._consumer is not None  # noqa: S101
        offset: int | None = await self._consumer.committed(tp)
        return offset

    async def commit_offset(self, tp: TopicPartition, offset: int) -> None:
        assert self._consumer is not None  # noqa: S101
        await self._consumer.commit({tp: offset})

    def transaction_failed(self, tp: TopicPartition, fenced: bool) -> None:
        log.debug("transaction on %s %s", tp, "fenced" if fenced else "aborted")
        self.hooks.after_transaction_failed(fenced)

    def _new_committer(self, tp: TopicPartition) -> PartitionCommitter:
        if self._shared_producer is not None:
            return AtLeastOnceCommitter(tp, self.group_id, self._render, self,
                                        self._shared_producer)
        return TransactionalCommitter(self.config, self.clients, tp, self.group_id,
                                      self._render, self)

    # -- stopping ---------------------------------------------------------------------------
    async def _drain(self) -> None:
        """Graceful stop: finish every in-flight task and commit it."""
        await self.ownership.release(set(self.ownership.committers),
                                     self.options.max_poll_interval_ms / 1000,
                                     self.commit_partition,
                                     rebalance=False)

    async def _shutdown(self) -> None:
        await self.sysinfo.stop()
        await self.membership.stop()
        if self.controls is not None:
            await asyncio.to_thread(self.controls.stop)
        if self._consumer is not None:  # built with its ownership, after no await
            await self.ownership.close()
            await self._consumer.stop()  # leaves the group
        if self._shared_producer is not None:
            await self._shared_producer.stop()
        self.served.close()


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.worker.ownership.release(set(revoked), self.worker.options.revoke_grace_s,
                                            self.worker.commit_partition)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.worker.ownership.acquire(set(assigned))


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except TimeoutError:
        pass
