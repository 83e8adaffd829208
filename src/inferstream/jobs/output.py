"""A job's output: one line per input item, read back from the results topic.

The rule that makes the output exact: results are keyed by job id, so all of a job's results
sit in one partition in a total order, and the first committed result of each task in that
order is the task's outcome. The controller's ledger applies the same rule as it counts.
"""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from itertools import chain
from typing import IO, Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from inferstream.config import Config
from inferstream.jobs.errors import OutputFormatError, OutputIncompleteError, ResultsDeletedError
from inferstream.jobs.ids import job_time_ms
from inferstream.jobs.partial import partial_path
from inferstream.jobs.pieces import ResultKeeper
from inferstream.jobs.spool import ResultSpool
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients, SyncConsumer
from inferstream.kafka.errors import PartitionReadError
from inferstream.kafka.preflight import reachable_partitions
from inferstream.kafka.reader import (
    PartitionReader,
    end_offset,
    offsets_for_times,
    reader_consumer,
    start_offset,
)
from inferstream.kafka.settings import partition_for
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.json_text import encode, strict_encoder
from inferstream.schemas.records import TaskResult, output_json
from inferstream.schemas.records.summary import SUMMARY_FIELDS

#: How far before the time in a job id its records may lie (clock skew between hosts).
SKEW_MS = 5 * 60 * 1000
#: How long a completed job's results are waited for before its output is given up.
READ_TIMEOUT_S = 600.0
_IDS = ("job_id", "task_id")
#: What a reader takes of a ResultChunk (all of it).
_CHUNK_FIELDS = ("job_id", "task_id", "chunk_id", "index", "data")
#: What writes a JSON line: `json.dumps(line, ensure_ascii=False)` would make one of these
#: for every line, a fifth of its time.
_JSON = strict_encoder(ensure_ascii=False)
CSV_FIELDS = ("job_id", "item", "status", "class_id", "label", "score", "error", "worker",
              "attempt", "model", "model_version")


def open_job_partition(config: Config, topic: str, job_id: str,
                       clients: KafkaClients = REAL_CLIENTS,
                       partition: int | None = None, follow: bool = False
                       ) -> tuple[SyncConsumer, int]:
    """A consumer assigned to the partition of `job_id` in `topic` (murmur2 of its id, or
    `partition`: the job's home partition, where it arrived), from about its submission,
    and that partition; `follow` as for `reader_consumer`. KafkaSetupError within
    `connect_timeout_s` when no broker answers."""
    consumer = reader_consumer(config, clients, follow=follow)
    try:
        partitions = reachable_partitions(config, consumer, topic, clients)
    except Exception:
        consumer.close()
        raise
    index = partition if partition is not None and 0 <= partition < len(partitions) else (
        partition_for(job_id, len(partitions)))
    tp = TopicPartition(topic, index, OFFSET_BEGINNING)
    since = job_time_ms(job_id)
    if since is not None:
        try:
            tp = _start_since(consumer, tp, since - SKEW_MS)
        except KafkaException as exc:
            consumer.close()
            raise PartitionReadError(f"cannot find where job {job_id} begins in {topic}: "
                                     f"{exc.args[0]}") from exc
    consumer.assign([tp])
    return consumer, tp.partition


def _start_since(consumer: SyncConsumer, tp: TopicPartition, since_ms: int) -> TopicPartition:
    """Where `tp`'s records of `since_ms` or later begin; its end where it has none."""
    # the end before the lookup: a record written between the two is read, not skipped
    high = end_offset(consumer, tp)
    found = offsets_for_times(consumer, [TopicPartition(tp.topic, tp.partition, since_ms)])[0]
    if found.offset >= 0:
        return found
    if found.offset == -1:  # nothing that new: start at that end
        return TopicPartition(tp.topic, tp.partition, high)
    return tp


def job_results(config: Config, job_id: str, total_tasks: int | None,
                codec: Codec | None = None, clients: KafkaClients = REAL_CLIENTS,
                partition: int | None = None) -> Iterator[TaskResult]:
    """The first committed TaskResult of each task of `job_id`, in task order, one at a
    time: the partition is read into a `ResultSpool` first, so memory stays bounded.

    With `total_tasks` known it reads until it has them all; otherwise up to the end.
    `partition`: the job's home partition (its events say it), else murmur2 of its id.
    """
    codec = codec or Codec.for_config(config)
    with ResultSpool(codec) as spool:
        _spool_results(config, job_id, total_tasks, spool, clients, partition)
        yield from spool.in_task_order()


def _spool_results(config: Config, job_id: str, total_tasks: int | None, spool: ResultSpool,
                   clients: KafkaClients, home: int | None) -> None:
    """Read the job's results into `spool`: to the partition's end, then, where a completed
    job's tasks are missing and were not deleted, on as they come, `READ_TIMEOUT_S` in all."""
    topic = config.topic("results")
    deadline = time.monotonic() + READ_TIMEOUT_S
    consumer, partition = open_job_partition(config, topic, job_id, clients, home)
    try:
        _read_results(spool, job_id, total_tasks,
                      PartitionReader(consumer, [partition], timeout_s=READ_TIMEOUT_S))
        if total_tasks is not None and len(spool) < total_tasks:
            _check_not_deleted(consumer, TopicPartition(topic, partition), job_id,
                               total_tasks - len(spool), total_tasks)
            _read_results(spool, job_id, total_tasks, PartitionReader(
                consumer, [partition], follow=True,
                timeout_s=max(0.0, deadline - time.monotonic())))
    finally:
        consumer.close()
    if total_tasks is not None and len(spool) < total_tasks:
        raise OutputIncompleteError(job_id, total_tasks - len(spool), total_tasks)


def _read_results(spool: ResultSpool, job_id: str, total_tasks: int | None,
                  reader: PartitionReader) -> None:
    for record in reader:
        keep_result(spool, job_id, record.value)
        if total_tasks is not None and len(spool) >= total_tasks:
            break


def _check_not_deleted(consumer: SyncConsumer, tp: TopicPartition, job_id: str, missing: int,
                       total: int) -> None:
    """ResultsDeletedError where records of the job's time may be deleted: the partition's
    log start is past 0 and no record kept is older than the job, so the results a completed
    job misses at the partition's end were before it. Waiting `READ_TIMEOUT_S` for them
    would bring nothing but an error that does not say why."""
    start = start_offset(consumer, tp)
    if start <= 0:
        return
    since = job_time_ms(job_id)
    if since is not None:
        first = offsets_for_times(consumer, [TopicPartition(tp.topic, tp.partition,
                                                            since - SKEW_MS)])[0].offset
        if first not in (start, -1):  # an older record is kept: the job's were not deleted
            return
    raise ResultsDeletedError(job_id, missing, total, f"{tp.topic} partition {tp.partition}",
                              start)


def keep_result(spool: ResultKeeper, job_id: str | None, value: bytes) -> None:
    """Keep a record of the results topic in `spool` (a `ResultSpool`: the first result of
    its task) if it is a result of `job_id` (None: of any job), or a piece of one: its ids
    are read, not its items."""
    codec = spool.codec
    head: dict[str, Any] | None
    try:  # the summary, not the items: all of a result of 32 embeddings takes thousands of
        head = codec.decode_head(value, "TaskResult", SUMMARY_FIELDS)  # times longer
    except SchemaError:
        head = _older_head(spool, job_id, value)
        if head is None:
            return
    if job_id is not None and head["job_id"] != job_id:
        return
    if head["chunks"] > 0:
        spool.add_chunked(head["task_id"], head["chunk_id"], head["chunks"])
    else:
        spool.add(head["task_id"], value)


def _older_head(spool: ResultKeeper, job_id: str | None, value: bytes) -> dict[str, Any] | None:
    """The ids of a TaskResult written before results came in pieces (its items are in
    it); None for any other record, a piece of a result kept in `spool` on the way."""
    try:
        return {**spool.codec.decode_head(value, "TaskResult", _IDS), "chunks": 0}
    except SchemaError:
        _keep_chunk(spool, job_id, value)
        return None


def _keep_chunk(spool: ResultKeeper, job_id: str | None, value: bytes) -> None:
    try:
        chunk = spool.codec.decode_head(value, "ResultChunk", _CHUNK_FIELDS)
    except SchemaError:
        return  # a decline, or a dead letter for the controller: no output
    if job_id in (None, chunk["job_id"]):
        spool.add_chunk(chunk["chunk_id"], chunk["index"], chunk["data"])


def output_lines(results: Iterable[TaskResult]) -> Iterator[dict[str, Any]]:
    """One output line per item, in item order: its output as `output_json` shows it, and
    the model and model version that answered it."""
    for result in results:
        for item in sorted(result["items"], key=lambda i: i["index"]):
            yield {
                "job_id": result["job_id"], "item": item["name"],
                "status": item["status"].lower(), **output_json(item),
                "error": item["error"], "worker": result["worker"],
                "attempt": result["attempt"], "model": result["model"],
                "model_version": result["model_version"],
            }


def write_lines(lines: Iterator[dict[str, Any]], stream: IO[str], fmt: str = "jsonl") -> int:
    """Write lines as JSON lines (NaN and +-inf as null) or CSV (top-1 columns, no embedding
    or tensors); returns how many were written."""
    count = 0
    if fmt == "csv":
        writer = csv.DictWriter(stream, CSV_FIELDS)
        # the results are read before the first line comes: where that fails (gone, not
        # read back in time), or it cannot be a row, no header goes out alone ahead of the
        # error
        rows = map(csv_row, lines)
        head = next(rows, None)
        writer.writeheader()
        for row in chain([head], rows) if head is not None else ():
            writer.writerow(row)
            count += 1
        return count
    for line in lines:
        stream.write(encode(_JSON, line) + "\n")
        count += 1
    return count


def csv_row(line: dict[str, Any]) -> dict[str, Any]:
    """An output line as a CSV row: its top-1 class; OutputFormatError for an item answered
    with an embedding or tensors, which a row of empty class columns would hide."""
    if line["status"] == "ok" and not line["top_k"]:
        what = "an embedding" if "embedding" in line else "tensors" if "tensors" in line \
            else None
        if what is not None:
            raise OutputFormatError(
                f"--format csv holds a classifier's top-1 class, and item {line['item']!r} "
                f"of {line['model']} was answered with {what}: use --format jsonl or npz")
    top = line["top_k"][0] if line["top_k"] else {}
    return {**{k: line[k] for k in CSV_FIELDS if k in line}, "class_id": top.get("class_id"),
            "label": top.get("label"), "score": top.get("score")}


def write_job_output(config: Config, job_id: str, path: str, total_tasks: int | None = None,
                     fmt: str = "jsonl", clients: KafkaClients = REAL_CLIENTS,
                     partition: int | None = None) -> int:
    """Write the job's output to `path` atomically (a temporary file renamed into place),
    line by line; `partition` as for `job_results`."""
    results = job_results(config, job_id, total_tasks, clients=clients, partition=partition)
    with replacing(path) as handle:
        return write_lines(output_lines(results), handle, fmt)


@contextmanager
def replacing(path: str) -> Iterator[IO[str]]:
    """A text file written at `partial_path`, renamed to `path` once the block ends; where
    the block raises, nothing is left."""
    tmp = partial_path(path)
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as handle:
            yield handle
        os.replace(tmp, path)
    finally:
        with suppress(FileNotFoundError):
            os.remove(tmp)
