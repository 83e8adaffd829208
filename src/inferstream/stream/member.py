"""A stream member: the worker's pipeline on a topic that any client writes.

One input record goes: input topic -> `StreamMember._accept` (`formats.InputReader`: the
record's item) -> the worker's `BatchingPipeline` (decode, batch, infer) -> `_render`
(`formats.OutputWriter`: one output record, keyed like the input, with origin headers) ->
the partition's `TransactionalCommitter` (the output and the input offset in one transaction)
-> output topic. The group, its assignor, the committers, sysinfo and the drain on SIGTERM are
the worker's own; only the source and the rendering differ.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence

from aiokafka import TopicPartition

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients, Outgoing, Record
from inferstream.kafka.settings import partition_of_key
from inferstream.models import LoadedModel
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    ItemResult,
    ItemStatus,
    StreamOrigin,
    Task,
    error_item,
    now_ms,
)
from inferstream.serving.committers.base import PartitionCommitter, PendingTask
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.pipeline import TaskRun
from inferstream.serving.worker import Worker
from inferstream.stream.errors import RecordError
from inferstream.stream.formats import (
    InputReader,
    OutputWriter,
    item_name,
    stream_result,
)
from inferstream.worker.controls import TaskControls

log = logging.getLogger(__name__)

#: Headers every output record carries, naming the input record it labels.
ORIGIN_TOPIC, ORIGIN_PARTITION, ORIGIN_OFFSET = (
    "inferstream.origin.topic", "inferstream.origin.partition", "inferstream.origin.offset")


def stream_config(config: Config) -> Config:
    """`config` with the stream's pool: sysinfo and the policy table see its members as the
    pool named after its group (and its transactional ids are the group's own)."""
    return dataclasses.replace(config, pool=config.stream.pool(config.topic_prefix))


class StreamMember(Worker):
    """One member of a stream's group: one output record per input record, exactly once.

    Settings: `config.stream` (topics, formats, errors) and `config.worker` (model, batching,
    group timeouts, bounded mode). `run()` returns as the worker's does.
    """

    def __init__(self, config: Config, model: LoadedModel | Sequence[LoadedModel], *,
                 hooks: WorkerHooks | None = None, codec: Codec | None = None,
                 clients: KafkaClients = REAL_CLIENTS) -> None:
        config = stream_config(config)
        self.stream = config.stream
        super().__init__(config, model, hooks=hooks, codec=codec, clients=clients)
        self.model = self.served.names[0]
        self.reader = InputReader(config)
        self.writer = OutputWriter(config, self.codec)
        self._dlq_topic = self.stream.dead_letter_topic or config.topic("dlq")
        self._input_partitions = 1
        self._output_partitions = 1

    # -- what differs from a worker ---------------------------------------------------------
    def _group_id(self) -> str:
        return self.config.stream.group_id(self.config.topic_prefix)

    def _source_topic(self) -> str:
        return self.stream.input_topic

    def _new_controls(self) -> TaskControls | None:
        return None  # no controller: nothing to skip

    def _start_at_end(self) -> bool:
        return self.stream.start_from == "latest"

    async def _learn_outputs(self) -> None:
        self._input_partitions, self._output_partitions, self._dlq_partitions = (
            await self._partition_counts(self.stream.input_topic, self.stream.output_topic,
                                         self._dlq_topic))
        log.info("stream group=%s: %s (%d partitions, %s) -> %s (%d partitions, %s), model %s",
                 self.group_id, self.stream.input_topic, self._input_partitions,
                 self.stream.input_format, self.stream.output_topic, self._output_partitions,
                 self.stream.output_format, self.model)

    # -- records in -------------------------------------------------------------------------
    def _accept(self, tp: TopicPartition, record: Record) -> None:
        """Hand the record's item to the pipeline; a record that cannot be read gets its
        error outcome (or dead letter) at once, in offset order with the others."""
        committer = self.ownership.active(tp)
        if committer is None:
            self.ownership.retake_later(tp)
            return
        origin = _origin(tp, record)
        try:
            item = self.reader.item(record.value, origin)
        except RecordError as exc:
            log.debug("unreadable record %s: %s", item_name(origin), exc)
            failed = _failed(origin, str(exc))
            self._commit_outgoing(committer, PendingTask(
                record.offset, None, [self._output(record, failed)], record=record))
            return
        task = Task(job_id=self.group_id, task_id=record.offset, attempt=1,
                    pool=self.config.pool, model=self.model, top_k=self.stream.top_k,
                    items=[item], issued_at=now_ms(), deadline_ms=None, home_partition=None)
        run = TaskRun(task, on_done=lambda _run: self._schedule_commit(committer))
        committer.append(PendingTask(record.offset, run, [], record=record))
        pipeline = self.served.find(self.model)
        assert pipeline is not None  # noqa: S101 - the stream's one model is always loaded
        pipeline.submit(run)

    # -- records out ------------------------------------------------------------------------
    def _render(self, pending: PendingTask) -> list[Outgoing]:
        if pending.run is None:
            return pending.outgoing
        outcome = pending.run.outcomes[0]
        assert outcome is not None  # noqa: S101 - rendered once done
        return [self._output(pending.record, outcome)]

    def _output(self, record: Record, outcome: ItemResult) -> Outgoing:
        """The output record of `outcome`: keyed like the input, on the input's partition
        index when the output has as many partitions, else on the key's; or, with
        `--on-error dlq`, the dead letter of a failed record."""
        tp = TopicPartition(record.topic, record.partition)
        if outcome["status"] == ItemStatus.ERROR and self.stream.on_error == "dlq":
            return self._dead_letter(tp, record, outcome["error"] or "error")
        origin = _origin(tp, record)
        result = stream_result(outcome, self.model, self.worker_id, origin, now_ms())
        if self._output_partitions == self._input_partitions or record.key is None:
            partition = tp.partition % self._output_partitions
        else:
            partition = partition_of_key(record.key, self._output_partitions)
        headers = (*((k, bytes(v)) for k, v in record.headers or ()),
                   (ORIGIN_TOPIC, tp.topic.encode()),
                   (ORIGIN_PARTITION, str(tp.partition).encode()),
                   (ORIGIN_OFFSET, str(record.offset).encode()))
        return Outgoing(self.stream.output_topic, partition, record.key,
                        self.writer.value(result), headers)

    def _after_committed(self, committer: PartitionCommitter,
                         committed: list[PendingTask]) -> None:
        super()._after_committed(committer, committed)
        if not committed:
            return
        now = time.time()
        for pending in committed:
            record = pending.record
            latency = now - record.timestamp / 1000 if record.timestamp > 0 else None
            self.hooks.after_stream_record(self._status(pending), latency)

    def _status(self, pending: PendingTask) -> str:
        outcome = pending.run.outcomes[0] if pending.run is not None else None
        if outcome is not None and outcome["status"] == ItemStatus.OK:
            return "ok"
        return "dead_letter" if self.stream.on_error == "dlq" else "error"


def _origin(tp: TopicPartition, record: Record) -> StreamOrigin:
    return StreamOrigin(topic=tp.topic, partition=tp.partition, offset=record.offset,
                        timestamp=record.timestamp if record.timestamp >= 0 else None)


def _failed(origin: StreamOrigin, reason: str) -> ItemResult:
    return error_item({"index": origin["offset"], "name": item_name(origin), "data": None},
                      reason)
