"""Listing recent jobs from the job-events topic (for `inferstream status`)."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition

from inferstream.config import Config
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import read_job_event
from inferstream.streams.client.client import JobStatus
from inferstream.streams.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.streams.kafka.reader import PartitionReader, reader_consumer


def recent_jobs(config: Config, codec: Codec, since_s: float = 86_400,
                clients: KafkaClients = REAL_CLIENTS) -> list[JobStatus]:
    """The latest status of every job with an event in the last `since_s` seconds."""
    topic = config.topic("job-events")
    consumer = reader_consumer(config, clients)
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        since_ms = int((time.time() - since_s) * 1000)
        starts = consumer.offsets_for_times(
            [TopicPartition(topic, p, since_ms) for p in partitions], timeout=30)
        live = [tp for tp in starts if tp.offset >= 0]
        if not live:
            return []
        consumer.assign(live)
        latest: dict[str, JobStatus] = {}
        for record in PartitionReader(consumer, [tp.partition for tp in live], timeout_s=30):
            try:
                event = read_job_event(codec, record.value)
            except SchemaError:
                continue
            latest[event["job_id"]] = JobStatus.from_event(event)
        return sorted(latest.values(), key=lambda s: s.job_id)
    finally:
        consumer.close()
