"""The worker: a member of a consumer group that runs what it consumes through its models.

One record goes: its source's topic -> `Worker._accept` -> `Source.admit` (a task, or the
records that answer it at once) -> `ServedModels.submit` -> `BatchingPipeline` (decode, batch,
infer) -> `Source.render` -> `PartitionCommitter` (the records and the offset in one
transaction) -> the source's output topics. What the worker consumes and writes is its source's
(`serving.source`): a pool's tasks (`worker.source.TaskSource`) or any topic
(`stream.source.StreamSource`).
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
from inferstream.errors import InferstreamError
from inferstream.kafka.clients import (
    REAL_CLIENTS,
    AsyncConsumer,
    AsyncProducer,
    KafkaClients,
    Record,
)
from inferstream.kafka.errors import (
    KafkaSetupError,
    PartitionLostError,
    TransactionalIdRefusedError,
)
from inferstream.kafka.refusals import not_authorized
from inferstream.kafka.settings import aiokafka_kwargs, worker_consumer_kwargs
from inferstream.kafka.stopping import stop_or_warn
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES
from inferstream.models import LoadedModel
from inferstream.policy.membership import PoolMembership
from inferstream.schemas import Codec
from inferstream.schemas.records import ItemStatus
from inferstream.serving.committers.at_least_once import AtLeastOnceCommitter
from inferstream.serving.committers.base import CommitWindow, PartitionCommitter, PendingTask
from inferstream.serving.committers.exactly_once import (
    TransactionalCommitter,
    quiet_fenced_futures,
    quiet_sender_refusals,
)
from inferstream.serving.fetch import Fetcher
from inferstream.serving.hooks import HookChain, WorkerHooks
from inferstream.serving.loader import ModelLoader
from inferstream.serving.ownership import GroupOwner, Ownership
from inferstream.serving.pipeline import TaskRun
from inferstream.serving.samples import SysInfoPublisher
from inferstream.serving.served import ServedModels
from inferstream.serving.source import Source, WorkerContext, answer, partition_counts

log = logging.getLogger(__name__)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Worker:
    """Consumes its source's topic, runs the data path, commits the answers exactly once.

    Settings: `config.worker`. `run()` returns after SIGTERM (or `request_stop`) once the
    in-flight records are committed, or in bounded mode after `idle_exit_s` with nothing to
    do. From calibration at start to shutdown it publishes samples to `sysinfo`
    (`self.sysinfo`). `codec` and `clients` should be those the source was built with.
    """

    def __init__(self, config: Config, models: LoadedModel | Sequence[LoadedModel],
                 source: Source, *, hooks: WorkerHooks | None = None, codec: Codec | None = None,
                 clients: KafkaClients = REAL_CLIENTS, loader: ModelLoader | None = None
                 ) -> None:
        self.config = config
        self.options = config.worker
        self.source = source
        self.group_id = source.group_id
        self.worker_id = self.options.worker_id or default_worker_id()
        self.codec = codec or Codec.for_config(config)
        self.clients = clients
        self.sysinfo = SysInfoPublisher(config, self.worker_id, clients, self.codec)
        self.hooks = HookChain(hooks or WorkerHooks(), self.sysinfo.performance,
                               self.sysinfo.queue)
        loaded = [models] if isinstance(models, LoadedModel) else list(models)
        self.served = ServedModels(self.options, loaded, self.hooks, loader)
        self.membership = PoolMembership(config, self.worker_id, clients, self.codec,
                                         lambda: self.served.names,
                                         lambda: self.sysinfo.calibration,
                                         self.served.limit_batch)
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._consumer: AsyncConsumer | None = None
        self._commit_tasks: set[asyncio.Task[None]] = set()
        self._shared_producer: AsyncProducer | None = None
        self._run_task: asyncio.Task[Any] | None = None
        self._started = False
        self._fetching = False

    # -- lifecycle --------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Finish what is in flight, commit it, leave the group (SIGTERM does this); before
        the worker has joined its group, give up the start (a connect can hang); a fetch
        waiting for the group's next assignment is given up too (`_fetch`)."""
        self._stopping.set()
        self._wake.set()
        if self._run_task is None or self._run_task.done():
            return
        if not self._started:
            self._run_task.cancel()
        else:  # on the loop's next turn, when the run waits (a hook calls this from the run)
            self._run_task.get_loop().call_soon(self._end_fetch)

    def _end_fetch(self) -> None:
        """Cancel the run where it waits in `_fetch` (it then drains and stops)."""
        if self._fetching and self._run_task is not None:
            self._run_task.cancel()

    async def run(self) -> None:
        self._run_task = asyncio.current_task()
        quiet_fenced_futures(asyncio.get_running_loop())
        quiet_sender_refusals()
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
        return not_authorized(self.config, self.source.role, f"join group {self.group_id}")

    async def _start(self) -> None:
        if self.options.guarantee == "at-least-once":
            self._shared_producer = self.clients.aio_producer(aiokafka_kwargs(
                self.config, AIOKafkaProducer, enable_idempotence=True,
                max_request_size=LARGE_MESSAGE_BYTES))
            await self._shared_producer.start()
        await self.sysinfo.start(self.served, lambda: self._consumer, self.hooks)
        self.membership.start()
        partitions = await partition_counts(self.config, self.clients, self.source.outputs)
        await self.source.start(WorkerContext(self.worker_id, self.hooks, self.served,
                                              partitions))
        self._consumer = consumer = self.clients.aio_consumer(worker_consumer_kwargs(
            self.config, self.group_id, self.worker_id, self.membership.strategies()))
        consumer.subscribe([self.source.topic], listener=_Rebalance(self))
        self.membership.watch(consumer)
        self.ownership = Ownership(consumer, self._new_committer, self.hooks.on_assignment,
                                   self._stopping, start_at_end=self.source.start_at_end,
                                   on_rebalance=self.hooks.after_rebalance,
                                   heartbeat_s=self.options.heartbeat_interval_ms / 1000)
        self.fetcher = Fetcher(self.ownership, self.served, self.hooks)
        await consumer.start()
        self.served.start()

    def _new_committer(self, tp: TopicPartition) -> PartitionCommitter:
        owner = GroupOwner(self.ownership, self.hooks.after_transaction_failed)
        window = CommitWindow(self.options.commit_window_ms / 1000, self.options.commit_max_tasks)
        if self._shared_producer is not None:
            return AtLeastOnceCommitter(tp, self.group_id, owner, self._shared_producer, window)
        return TransactionalCommitter(self.config, self.clients, tp, self.group_id, owner,
                                      window=window)

    # -- the consume loop -------------------------------------------------------------------
    async def _consume_loop(self) -> None:
        idle_since = time.monotonic()
        while not self._stopping.is_set():
            self._stop_if_refused()  # at a commit
            room = self.options.max_in_flight_items - self.served.items_in_flight
            if room <= 0:
                self._wake.clear()
                await _wait(self._wake, 0.2)
                continue
            try:
                batches = await self._fetch(room)
                if batches is None:  # a stop came while the fetch waited
                    return
            except (InconsistentGroupProtocolError, GroupAuthorizationFailedError) as exc:
                raise self._refused(exc) from exc
            except KafkaError as exc:  # a broker restarting: the client reconnects by itself
                log.warning("fetch failed: %r", exc)
                await asyncio.sleep(0.5)
                continue
            self._stop_if_refused()  # at a partition's start, in the fetch's rebalance
            for tp, records in batches.items():
                for record in records:
                    self._accept(tp, record)
            if batches or self._busy():
                idle_since = time.monotonic()
            elif self._idle_for(idle_since):
                log.info("idle for %.1fs: exiting (bounded mode)", self.options.idle_exit_s)
                return

    async def _fetch(self, room: int) -> dict[TopicPartition, list[Record]] | None:
        """The fetcher's records, or None where a stop came while it waited (`_end_fetch`).

        While its group rebalances, aiokafka's getmany waits for the next assignment
        whatever its timeout (`Fetcher.fetched_records`, aiokafka 0.14), and a rebalance
        waits up to the rebalance timeout (max_poll_interval_ms) for every member to join
        again: a stream member SIGTERMed as it joined again after a SIGSTOP past its
        session only began its stop once the group had settled, and was still stopping
        30 s later (exit 143). Nothing is taken from a getmany cancelled while it waits."""
        self._fetching = True
        try:
            return await self.fetcher.fetch(room, self.options.idle_exit_s)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self._stopping.is_set() or task is None or task.uncancel() > 0:
                raise
            return None
        finally:
            self._fetching = False

    def _stop_if_refused(self) -> None:
        """A partition's producer was refused its transactional id, or a model's batch loop
        broke (`ServedModels.broken`): stop in words."""
        if self.ownership.refused_id is not None:
            raise not_authorized(self.config, self.source.role,
                                 f"use transactional id {self.ownership.refused_id}")
        if self.served.broken is not None:
            raise InferstreamError(self.served.broken)

    def _busy(self) -> bool:
        return self.served.items_in_flight > 0 or any(
            c.busy for c in self.ownership.committers.values()
        )

    def _idle_for(self, since: float) -> bool:
        limit = self.options.idle_exit_s
        return limit is not None and time.monotonic() - since >= limit

    def _accept(self, tp: TopicPartition, record: Record) -> None:
        """Queue `record` for its commit, in offset order, and run its task (or answer it at
        once, as its source says)."""
        committer = self.ownership.active(tp)
        if committer is None:
            # Revoked while the fetch was in flight (the new owner reads it again), or our
            # producer was fenced: take the partition back, from its committed offset.
            self.ownership.retake_later(tp)
            return
        admitted = self.source.admit(record)
        pending = PendingTask(record)
        committer.append(pending)
        if isinstance(admitted, list):
            committer.finish(pending, admitted)
            self._schedule_commit(committer)
            return
        pending.run = TaskRun(admitted, on_done=lambda run: self._done(committer, pending))
        self.served.submit(pending.run)

    def _done(self, committer: PartitionCommitter, pending: PendingTask) -> None:
        """The task of `pending` is done: render what answers it (on a thread where that
        takes long: `Source.render_on_thread`), and commit."""
        assert pending.run is not None  # noqa: S101 - called by its run
        if self.source.render_on_thread(pending.run):
            record = pending.record
            self.served.watched(self._spawn(self._render_on_thread(committer, pending), name=(
                f"render of {record.topic}[{record.partition}]@{record.offset}")))
            return
        committer.finish(pending, answer(self.source, pending.run, pending.record))
        self._schedule_commit(committer)

    async def _render_on_thread(self, committer: PartitionCommitter,
                                pending: PendingTask) -> None:
        """`_done`'s render of a large result, off the loop: a 32 MiB result held it for
        1.5-4 s, a 254 MiB one 13 s, past the group's session timeout."""
        assert pending.run is not None  # noqa: S101 - called by its run
        outgoing = await asyncio.to_thread(answer, self.source, pending.run, pending.record)
        committer.finish(pending, outgoing)
        self._schedule_commit(committer)

    # -- commits ----------------------------------------------------------------------------
    def _schedule_commit(self, committer: PartitionCommitter) -> None:
        self._spawn(self.commit_partition(committer))

    def _spawn(self, work: Coroutine[Any, Any, None], name: str | None = None
               ) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)
        return task

    async def commit_partition(self, committer: PartitionCommitter) -> None:
        """Commit what is ready in `committer`; a lost partition is retaken if still ours."""
        started = time.monotonic()
        try:
            committed = await committer.commit_ready()
        except TransactionalIdRefusedError as exc:  # the consume loop stops in words
            log.warning("partition given up, its uncommitted tasks go to the next owner: %s", exc)
            self.ownership.refused_id = exc.transactional_id
            self._wake.set()
            return
        except PartitionLostError as exc:
            log.warning("partition lost, its uncommitted tasks go to its next owner: %s", exc)
            self.ownership.retake_later(committer.tp)
            return
        if committed and self.ownership.committers.get(committer.tp) is committer:
            # (a partition dropped while its commit ran keeps no offset here)
            self.ownership.offsets[committer.tp] = committed[-1].offset + 1
            self.hooks.after_commit(committer.tp.partition, committed[-1].offset + 1,
                                    time.monotonic() - started)
        for pending in committed:
            run = pending.run
            if run is not None and run.refusal is None:
                ok = sum(1 for o in run.outcomes if o and o["status"] == ItemStatus.OK)
                self.hooks.after_task(run.model, ok, len(run.outcomes) - ok)
        self.source.after_commit(committed)
        if committer.has_ready:  # past the window's cap: the rest in the next transaction
            self._schedule_commit(committer)
        self._wake.set()

    # -- stopping ---------------------------------------------------------------------------
    async def _drain(self) -> None:
        """Graceful stop: finish and commit the tasks under way; leave those not started
        to the partitions' next owner, who reads them from the committed offset."""
        await self.ownership.release(set(self.ownership.committers),
                                     self.options.max_poll_interval_ms / 1000,
                                     self.commit_partition,
                                     rebalance=False)

    async def _shutdown(self) -> None:
        """Stop what `_start` started. A client the cluster does not answer (or whose stop
        fails, aiokafka#647) is given up after `connect_timeout_s` with a warning: the stop
        still ends, and a member that could not leave is removed at its session timeout."""
        await self.sysinfo.stop()
        await self.membership.stop()
        await self.source.stop()
        limit_s = self.config.connect_timeout_s
        if self._consumer is not None:  # built with its ownership, after no await
            await self.ownership.close()
            await stop_or_warn(self._consumer.stop(), limit_s,  # leaves the group
                               f"group {self.group_id} not left (its session timeout removes "
                               f"member {self.worker_id})")
        if self._shared_producer is not None:
            await stop_or_warn(self._shared_producer.stop(), limit_s, "producer not closed")
        self.served.close()


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.worker.ownership.release(set(revoked), self.worker.options.revoke_grace_s,
                                            self.worker.commit_partition)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        """The source looks at the new assignment, then the partitions are taken, whatever
        the source's look raised: the revoke left the worker rebalancing, which only the
        take ends, and aiokafka logs a listener's error and goes on, so a stream member whose
        partition count failed (a TLS file read mid-rotation) held no partition, and retook
        none, until the next rebalance."""
        try:
            await self.worker.source.on_assignment()
        except Exception as exc:
            log.warning("the %s source's look at the new assignment failed, its partitions "
                        "taken all the same: %r", self.worker.source.role, exc)
        await self.worker.ownership.acquire(set(assigned))


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except TimeoutError:
        pass
