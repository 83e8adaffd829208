"""Listing recent jobs (for `inferstream status`): their latest event, and the jobs submitted
that no controller has accepted yet."""

from __future__ import annotations

import time
from dataclasses import replace

from inferstream.client.client import SUBMITTED, JobStatus
from inferstream.client.submitted import recent_submissions
from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.reader import PartitionReader, assign_since, reader_consumer
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import JobEvent, read_record


def recent_jobs(config: Config, codec: Codec, since_s: float = 86_400,
                clients: KafkaClients = REAL_CLIENTS) -> list[JobStatus]:
    """The latest status of every job submitted or with an event in the last `since_s`
    seconds, by job id, with the pool its record names; a job without an event yet is
    SUBMITTED."""
    since_ms = int((time.time() - since_s) * 1000)
    latest = _latest_events(config, codec, since_ms, clients)
    for job_id, (model, pool) in recent_submissions(config, codec, since_ms, clients).items():
        status = latest.get(job_id)
        latest[job_id] = (JobStatus(job_id, SUBMITTED, model=model, pool=pool)
                          if status is None else replace(status, pool=pool))
    return sorted(latest.values(), key=lambda s: s.job_id)


def _latest_events(config: Config, codec: Codec, since_ms: int,
                   clients: KafkaClients) -> dict[str, JobStatus]:
    consumer = reader_consumer(config, clients)
    latest: dict[str, JobStatus] = {}
    try:
        partitions = assign_since(consumer, config.topic("job-events"), since_ms)
        for record in PartitionReader(consumer, partitions, timeout_s=30):
            try:
                event = read_record(codec, record.value, JobEvent)
            except SchemaError:
                continue
            latest[event["job_id"]] = JobStatus.from_event(event)
    finally:
        consumer.close()
    return latest
