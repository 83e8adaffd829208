"""The stream's source: any topic in, one output record per input record out.

One input record goes: input topic -> `StreamSource.admit` (`formats.InputReader`: the
record's item, or at once the error outcome of a record that cannot be read) -> the worker's
`BatchingPipeline` (decode, batch, infer) -> `StreamSource.render` (`formats.OutputWriter`: one
output record, keyed like the input, with origin headers; or, with `--on-error dlq`, a failed
record's dead letter; an output too large for its topic becomes its record's error:
`kafka.limits`) -> the partition's `TransactionalCommitter` (the output and the input
offset in one transaction) -> output topic. The group, its assignor, the committers, sysinfo
and the drain on SIGTERM are the worker's own (`serving.loop.Worker`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence

from aiokafka.errors import KafkaError

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients, Outgoing, Record
from inferstream.kafka.deadletters import dead_letter
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.limits import record_bytes, record_limits, size_text
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
from inferstream.serving.committers.base import PendingTask
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loop import Worker
from inferstream.serving.pipeline import TaskRun
from inferstream.serving.source import Source, WorkerContext, partition_counts
from inferstream.stream.errors import RecordError
from inferstream.stream.formats import (
    InputReader,
    OutputWriter,
    item_name,
    stream_result,
)

log = logging.getLogger(__name__)

#: Seconds a rebalance waits for the probe's start and for each topic's partition count
#: (`StreamSource.on_assignment`).
RECOUNT_TIMEOUT_S = 5.0
#: What a record too large for its topic leaves out (`StreamSource._output`): a dead
#: letter's copy of the input's value; then also the input's key (and an output's copy of the
#: input's headers).
_SHED_VALUE, _SHED_KEY = 1, 2
#: Headers every output record carries, naming the input record it labels.
ORIGIN_TOPIC, ORIGIN_PARTITION, ORIGIN_OFFSET = (
    "inferstream.origin.topic", "inferstream.origin.partition", "inferstream.origin.offset")


def stream_config(config: Config) -> Config:
    """`config` with the stream's pool: sysinfo and the policy table see its members as the
    pool named after its group (and its transactional ids are the group's own)."""
    return dataclasses.replace(config, pool=config.stream.pool(config.topic_prefix))


def new_member(config: Config, model: LoadedModel, *, hooks: WorkerHooks | None = None,
               codec: Codec | None = None, clients: KafkaClients = REAL_CLIENTS) -> Worker:
    """One member of the stream of `config.stream`: one output record per input record,
    exactly once. Settings: `config.stream` (topics, formats, errors) and `config.worker`
    (batching, group timeouts, bounded mode)."""
    config = stream_config(config)
    codec = codec or Codec.for_config(config)
    return Worker(config, model, StreamSource(config, codec, clients), hooks=hooks,
                  codec=codec, clients=clients)


class StreamSource(Source):
    """The stream's input topic, each record answered on its output topic (or dead-letter
    topic) by the worker's one model."""

    role = "stream"

    def __init__(self, config: Config, codec: Codec, clients: KafkaClients = REAL_CLIENTS
                 ) -> None:
        self.config = config
        self.clients = clients
        self.stream = stream = config.stream
        self.group_id = stream.group_id(config.topic_prefix)
        self.topic = stream.input_topic
        self.start_at_end = stream.start_from == "latest"
        self.dlq = stream.dead_letter_topic or config.topic("dlq")
        self.outputs = (stream.input_topic, stream.output_topic, self.dlq)
        self.codec = codec
        self.reader = InputReader(config)
        self.writer = OutputWriter(config, codec)
        self.model = ""
        self.model_version: str | None = None
        #: the most bytes a record may take on each topic written (`kafka.limits`)
        self.limits: dict[str, int] = {}
        #: the partition count of each topic of `outputs`, read at start and at each
        #: assignment: where an output goes depends on them (`_output`)
        self.partitions: dict[str, int] = {}

    async def start(self, worker: WorkerContext) -> None:
        await super().start(worker)
        self.model = worker.served.names[0]
        # a repository model's pipeline is its version's (NAME:VERSION), found by its name
        pipeline = worker.served.find(self.model)
        assert pipeline is not None  # noqa: S101 - the model it was started with
        self.model_version = pipeline.model.version
        written = (self.stream.output_topic, *((self.dlq,) if self.stream.on_error == "dlq"
                                               else ()))
        self.limits = await asyncio.to_thread(record_limits, self.config, written, self.clients)
        stream, partitions = self.stream, worker.partitions
        self.partitions = dict(partitions)
        log.info("stream group=%s: %s (%d partitions, %s) -> %s (%d partitions, %s), model %s",
                 self.group_id, stream.input_topic, partitions[stream.input_topic],
                 stream.input_format, stream.output_topic, partitions[stream.output_topic],
                 stream.output_format, self.model)

    async def on_assignment(self) -> None:
        """Read the partition counts again: a topic that gained partitions since the last
        assignment (the input's growth is what brought this one on) changes where outputs
        go, as docs/stream.md says, for every member alike."""
        try:
            counts = await partition_counts(self.config, self.clients, self.outputs,
                                            RECOUNT_TIMEOUT_S, RECOUNT_TIMEOUT_S)
        except (KafkaSetupError, KafkaError) as exc:  # the probe's start: unreachable
            log.warning("stream group=%s: partition counts not read again, %s kept: %r",
                        self.group_id, self.partitions, exc)
            return
        if counts != self.partitions:
            log.info("stream group=%s: partitions now %s (were %s)", self.group_id, counts,
                     self.partitions)
        self.partitions = counts

    def admit(self, record: Record) -> Task | list[Outgoing]:
        """The record's item as a task of one; a record that cannot be read gets its error
        outcome (or dead letter) at once, in offset order with the others."""
        origin = _origin(record)
        try:
            item = self.reader.item(record.value, origin)
        except RecordError as exc:
            log.debug("unreadable record %s: %s", item_name(origin), exc)
            return [self._fitting(record, _failed(origin, str(exc)), self.model_version)[0]]
        return Task(job_id=self.group_id, task_id=record.offset, attempt=1,
                    pool=self.config.pool, model=self.model, model_version=None,
                    top_k=self.stream.top_k, items=[item], issued_at=now_ms(), deadline_ms=None,
                    home_partition=None)

    def render(self, run: TaskRun, record: Record) -> list[Outgoing]:
        outcome = run.outcomes[0]
        if outcome is None:  # refused: the model could not load
            outcome = _failed(_origin(record), run.refusal or "not run")
        output, written = self._fitting(record, outcome, run.model_version)
        if written is not outcome:  # an output too large: counted as the error it wrote
            run.outcomes[0] = written
        return [output]

    def after_commit(self, committed: Sequence[PendingTask]) -> None:
        """Each committed record's outcome, and its latency from the input's timestamp."""
        now = time.time()
        for pending in committed:
            record = pending.record
            latency = now - record.timestamp / 1000 if record.timestamp > 0 else None
            self.worker.hooks.after_stream_record(self._status(pending), latency)

    def _status(self, pending: PendingTask) -> str:
        outcome = pending.run.outcomes[0] if pending.run is not None else None
        if outcome is not None and outcome["status"] == ItemStatus.OK:
            return "ok"
        return "dead_letter" if self.stream.on_error == "dlq" else "error"

    def _fitting(self, record: Record, outcome: ItemResult, version: str | None
                 ) -> tuple[Outgoing, ItemResult]:
        """The record of `outcome` (`_output`) and the outcome it writes: where that record
        would not fit its topic (`limits`), the record of an error that says so instead,
        without the input's key and headers where those alone are too large; a dead letter
        too large for the dead-letter topic goes without the input's value, then its key.
        (Written as it was, it would fail every commit of its partition, for ever.)"""
        output, why = self._sized(record, outcome, version)
        if why is None:
            return output, outcome
        if not self._dead_letter(outcome):  # its error instead: an output, or a dead letter
            failed = _failed(_origin(record), why)
            output, again = self._sized(record, failed, version, warn=False)
            if again is None:
                return output, failed
            if self._dead_letter(failed):
                return self._shed_letter(record, failed, version, again), failed
            failed = _failed(_origin(record), f"{why}; the input's key and headers left out")
            return self._output(record, failed, version, shed=_SHED_KEY), failed
        return self._shed_letter(record, outcome, version, why), outcome

    def _sized(self, record: Record, outcome: ItemResult, version: str | None,
               warn: bool = True) -> tuple[Outgoing, str | None]:
        """The record of `outcome`, and why it is too large for its topic (None: it fits),
        logged as a warning (`warn`) once per record."""
        output = self._output(record, outcome, version)
        size, limit = record_bytes(output), self.limits.get(output.topic)
        if limit is None or size <= limit:
            return output, None
        why = (f"{'dead letter' if self._dead_letter(outcome) else 'output'} too large: its "
               f"record takes {size_text(size)}, over the {size_text(limit)} a record of "
               f"{output.topic} holds")
        if warn:
            log.warning("%s: %s", item_name(_origin(record)), why)
        return output, why

    def _shed_letter(self, record: Record, outcome: ItemResult, version: str | None,
                     why: str) -> Outgoing:
        """The dead letter of `outcome` without the input's value, and without its key too
        where it still does not fit, saying so in its reason."""
        for shed, left_out in ((_SHED_VALUE, "value"), (_SHED_KEY, "value and key")):
            reason = f"{outcome['error'] or 'error'}; the record's {left_out} left out: {why}"
            letter = self._output(record, {**outcome, "error": reason}, version, shed)
            if record_bytes(letter) <= self.limits.get(letter.topic, record_bytes(letter)):
                break
        return letter

    def _dead_letter(self, outcome: ItemResult) -> bool:
        """Whether `outcome` is written as a dead letter (a failure, with `--on-error dlq`)."""
        return outcome["status"] == ItemStatus.ERROR and self.stream.on_error == "dlq"

    def _output(self, record: Record, outcome: ItemResult, version: str | None,
                shed: int = 0) -> Outgoing:
        """The output record of `outcome` (by `version` of the model): keyed like the input,
        on the input's partition index when the output has as many partitions, else on the
        key's; or, with `--on-error dlq`, the dead letter of a failed record. `shed` leaves
        out the input's value (`_SHED_VALUE`: a dead letter's), and its key and headers too
        (`_SHED_KEY`)."""
        partitions = self.partitions
        key = record.key if shed < _SHED_KEY else None
        if self._dead_letter(outcome):
            return dead_letter(self.codec, self.dlq, partitions[self.dlq], topic=record.topic,
                               partition=record.partition, offset=record.offset,
                               reason=outcome["error"] or "error",
                               value=record.value if shed < _SHED_VALUE else None,
                               consumer=self.worker.worker_id, key=key,
                               origin_timestamp_ms=record.timestamp)
        result = stream_result(outcome, self.model, version, self.worker.worker_id,
                               _origin(record), now_ms())
        outputs = partitions[self.stream.output_topic]
        if outputs == partitions[self.stream.input_topic] or record.key is None:
            partition = record.partition % outputs
        else:
            partition = partition_of_key(record.key, outputs)
        headers = (*((k, bytes(v)) for k, v in record.headers or () if shed < _SHED_KEY),
                   (ORIGIN_TOPIC, record.topic.encode()),
                   (ORIGIN_PARTITION, str(record.partition).encode()),
                   (ORIGIN_OFFSET, str(record.offset).encode()))
        return Outgoing(self.stream.output_topic, partition, key, self.writer.value(result),
                        headers)


def _origin(record: Record) -> StreamOrigin:
    return StreamOrigin(topic=record.topic, partition=record.partition, offset=record.offset,
                        timestamp=record.timestamp if record.timestamp >= 0 else None)


def _failed(origin: StreamOrigin, reason: str) -> ItemResult:
    return error_item({"index": origin["offset"], "name": item_name(origin), "data": None},
                      reason)
