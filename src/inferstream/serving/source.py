"""What a worker consumes and what it writes: its source.

The consume loop (`loop.Worker`) is one for every kind of worker; its source says what it
consumes and from where, how a record becomes work for the pipeline and how the outcome
becomes output records. `worker.source.TaskSource` reads a pool's tasks and answers them with
task results; `stream.source.StreamSource` reads any topic and writes one output record per
input record. A record goes:

    consumed -> `Source.admit` (a Task for the pipeline, or the records that answer it at once)
    -> the pipeline of the task's model -> `Source.render` (the records that answer it;
    `answer`) -> committed with its offset -> `Source.after_commit`
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from inferstream.config import Config
from inferstream.kafka.clients import KafkaClients, Outgoing, Record
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.settings import aiokafka_kwargs
from inferstream.schemas.records import Task, error_item
from inferstream.serving.committers.base import PendingTask
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.pipeline import TaskRun
from inferstream.serving.served import ServedModels

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerContext:
    """What a source may use of the worker that consumes it (given to `Source.start`)."""

    worker_id: str
    hooks: WorkerHooks
    served: ServedModels
    #: the partition count of each topic that the source named in `Source.outputs`
    partitions: Mapping[str, int]


class Source(ABC):
    """What a worker consumes, and how each record becomes the records that answer it.

    A source sets `group_id`, `topic` and `outputs` (and `start_at_end` where it reads new
    records only) when it is made; the worker it feeds is `self.worker` from `start` on.
    """

    #: the consumer group of the workers that share the topic
    group_id: str
    #: the topic consumed
    topic: str
    #: the topics whose partition counts the worker learns at start, for `render`
    outputs: tuple[str, ...] = ()
    #: whether a partition with no committed offset is read from its end (else its beginning)
    start_at_end: bool = False
    #: the `inferstream acls --role` whose ACLs the group and topics need
    role: str = "worker"
    _worker: WorkerContext | None = None

    @property
    def worker(self) -> WorkerContext:
        """The worker this source feeds (from `start` on)."""
        if self._worker is None:
            raise RuntimeError(f"{type(self).__name__} used before its worker started it")
        return self._worker

    async def start(self, worker: WorkerContext) -> None:
        """Called once the output topics are known, before the worker joins its group."""
        self._worker = worker

    async def stop(self) -> None:  # noqa: B027 - a no-op that a source may override
        """Called once at shutdown, also where the start failed."""

    async def on_assignment(self) -> None:  # noqa: B027 - a no-op, as stop
        """Called at each assignment of the worker's group, before the worker takes its
        partitions (a topic may have gained partitions since `start`)."""

    @abstractmethod
    def admit(self, record: Record) -> Task | list[Outgoing]:
        """The task that `record` asks for, or the records that answer it at once (none: it
        is committed with no output)."""

    @abstractmethod
    def render(self, run: TaskRun, record: Record) -> list[Outgoing]:
        """The records that answer `record`, whose task's `run` is done, or was refused
        (`run.refusal`: its model could not load)."""

    def render_on_thread(self, run: TaskRun) -> bool:
        """Whether `render` of `run` takes long enough to go to a thread (a large result's
        encoding: seconds for tens of MiB) rather than hold the worker's loop, whose
        heartbeats and fetches wait meanwhile; `render` is then thread-safe for it."""
        return False

    def after_commit(self, committed: Sequence[PendingTask]) -> None:  # noqa: B027 - as stop
        """`committed` (in offset order) were committed with the records that answer them."""


def answer(source: Source, run: TaskRun, record: Record) -> list[Outgoing]:
    """The records that answer `record` (`source.render`). Where render raises, a fault of
    the code, not of the task (a value its schema cannot hold), the run's items fail with the
    reason and are rendered again: left to raise, it ended the worker's batch loop of the
    model, whose later tasks then never ran and whose partitions' commits held for good."""
    try:
        return source.render(run, record)
    except Exception as exc:  # any: the task is answered whatever it was
        reason = f"its result could not be written ({type(exc).__name__}: {exc})"
        log.error("%s[%d] offset %d: %s; its items fail with that reason", record.topic,
                  record.partition, record.offset, reason, exc_info=exc)
    run.outcomes = [error_item(item, reason) for item in run.task["items"]]
    return source.render(run, record)


async def partition_counts(config: Config, clients: KafkaClients, topics: Sequence[str],
                           timeout_s: float = 30, start_timeout_s: float | None = None
                           ) -> dict[str, int]:
    """Partitions of each topic, asked through one short-lived plain producer (waiting up
    to `timeout_s` for each); KafkaSetupError where one is not found, or where the probe
    does not start within `start_timeout_s` (None: its own bootstrap's time, up to a request
    timeout for each bootstrap broker, 40 s of a hung one that a rebalance waited out)."""
    probe = clients.aio_producer(aiokafka_kwargs(config, AIOKafkaProducer))
    try:
        try:
            await asyncio.wait_for(probe.start(), start_timeout_s)
        except TimeoutError as exc:
            raise KafkaSetupError(f"no broker answered within {start_timeout_s:g} s for the "
                                  f"partition counts of {', '.join(topics)}") from exc
        counts = {}
        for topic in topics:
            try:
                partitions = await asyncio.wait_for(probe.partitions_for(topic), timeout_s)
            except (TimeoutError, KafkaError) as exc:  # aiokafka: KafkaTimeoutError
                raise KafkaSetupError(
                    f"topic {topic} not found; run `inferstream topics create`"
                ) from exc
            counts[topic] = len(partitions)
        return counts
    finally:
        await probe.stop()
