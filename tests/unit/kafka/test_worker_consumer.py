"""A worker's consumer settings: partitions added to its pool's task topic reach the group
within `TASK_METADATA_MAX_AGE_MS` (aiokafka's own default is 5 minutes), unless the settings
pass another age through."""

from __future__ import annotations

from inferstream.config import Config
from inferstream.kafka.settings import TASK_METADATA_MAX_AGE_MS, worker_consumer_kwargs


def test_the_group_sees_new_task_partitions_within_thirty_seconds() -> None:
    kwargs = worker_consumer_kwargs(Config(), "g", "c", ())
    assert kwargs["metadata_max_age_ms"] == TASK_METADATA_MAX_AGE_MS == 30_000


def test_a_passed_through_metadata_age_wins() -> None:
    config = Config(kafka_config=(("metadata.max.age.ms", "120000"),))
    assert worker_consumer_kwargs(config, "g", "c", ())["metadata_max_age_ms"] == 120_000
