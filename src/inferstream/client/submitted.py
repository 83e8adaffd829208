"""What the jobs topic says: whether a job was submitted, and which jobs were lately.

A job has no event until a controller accepts it, so only its record on the jobs topic
tells a submitted job from an id that names nothing. A cancel (`Job.cancel`) goes to the jobs
topic too, keyed by the job's id: it is no submission, whatever id it names.
"""

from __future__ import annotations

from typing import NamedTuple

from inferstream.config import Config
from inferstream.jobs.output import open_job_partition
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.errors import PartitionReadError
from inferstream.kafka.reader import PartitionReader, assign_since, reader_consumer
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import Job, model_ref, read_record

#: How long the jobs topic's partition is read for a job's record.
READ_S = 30.0


def job_submitted(config: Config, job_id: str, codec: Codec,
                  clients: KafkaClients = REAL_CLIENTS) -> bool:
    """Whether the jobs topic holds a job's record keyed by `job_id` (from about its time on;
    a cancel of that id is none); PartitionReadError where its partition could not be read
    to its end in `READ_S` (an id without a time is looked for from the partition's start):
    not knowing is not "no"."""
    return first_submission(config, job_id, codec, clients) is not None


def first_submission(config: Config, job_id: str, codec: Codec,
                     clients: KafkaClients = REAL_CLIENTS) -> int | None:
    """The offset of the first job record keyed by `job_id` on its partition of the jobs
    topic (the one a controller runs: it ignores a later one of the same id), None where
    there is none; PartitionReadError as for `job_submitted`."""
    consumer, partition = open_job_partition(config, config.topic("jobs"), job_id, clients)
    key = job_id.encode()
    try:
        reader = PartitionReader(consumer, [partition], timeout_s=READ_S)
        for record in reader:
            if record.key == key and not _is_cancel(codec, record.value):
                return record.offset
        if reader.waiting:
            raise PartitionReadError(
                f"cannot tell whether job {job_id} was submitted: partition {partition} of "
                f"{config.topic('jobs')} was not read to its end within {READ_S:g}s")
        return None
    finally:
        consumer.close()


class Submission(NamedTuple):
    """What a job record on the jobs topic says of its job; both None where the record
    cannot be read (the controller rejects it, keyed by its id)."""

    #: `NAME:VERSION` where pinned
    model: str | None
    pool: str | None


def recent_submissions(config: Config, codec: Codec, since_ms: int,
                       clients: KafkaClients = REAL_CLIENTS) -> dict[str, Submission]:
    """Job id -> model and pool of every job record on the jobs topic since `since_ms`."""
    consumer = reader_consumer(config, clients)
    found: dict[str, Submission] = {}
    try:
        partitions = assign_since(consumer, config.topic("jobs"), since_ms)
        for record in PartitionReader(consumer, partitions, timeout_s=30):
            try:
                job = read_record(codec, record.value, Job)
                found[job["job_id"]] = Submission(
                    model_ref(job["model"], job["model_version"]), job["pool"])
            except SchemaError:
                if record.key and not _is_cancel(codec, record.value):
                    found.setdefault(record.key.decode("utf-8", "replace"),
                                     Submission(None, None))
    finally:
        consumer.close()
    return found


def _is_cancel(codec: Codec, value: bytes) -> bool:
    """Whether a record of the jobs topic is a cancel (a TaskControl) rather than a job; a
    record that cannot be read counts as a job (the controller rejects it, keyed by its id)."""
    try:
        return codec.record_name(value) == "TaskControl"
    except SchemaError:
        return False
