"""Listing recent jobs from the job-events topic (for `inferstream status`)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from inferstream.config import Config
from inferstream.schemas import Codec, SchemaError
from inferstream.streams.client import JobStatus
from inferstream.streams.kafka import consumer_config
from inferstream.streams.output import iter_partition


def recent_jobs(config: Config, codec: Codec, since_s: float = 86_400) -> list[JobStatus]:
    """The latest status of every job with an event in the last `since_s` seconds."""
    topic = config.topic("job-events")
    consumer = Consumer(consumer_config(config, None, **{"enable.partition.eof": True}))
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
        waiting = len(live)
        for value in _until_all_eof(consumer, waiting):
            try:
                event = codec.decode(value, expected="JobEvent")
            except SchemaError:
                continue
            latest[event["job_id"]] = JobStatus.from_event(event)
        return sorted(latest.values(), key=lambda s: s.job_id)
    finally:
        consumer.close()


def _until_all_eof(consumer: Consumer, partitions: int) -> list[bytes]:
    values: list[bytes] = []
    for _ in range(partitions):
        values.extend(iter_partition(consumer, follow=False, timeout_s=30))
    return values
