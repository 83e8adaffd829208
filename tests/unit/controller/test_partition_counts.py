"""The partition counts a controller writes by: its own topics checked at start, the pools'
task topics known from that same metadata request, so a pool's first job asks nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from inferstream.controller.outbox import ControllerTopics, PartitionCounts
from inferstream.kafka.errors import KafkaSetupError
from tests.unit.support.memory import make_config


@dataclass
class Topic:
    partitions: dict[int, object]
    error: object = None


@dataclass
class Metadata:
    topics: dict[str, Topic]


@dataclass
class CountingConsumer:
    """Answers metadata requests from `topics` (name -> partitions), counting them."""

    topics: dict[str, int]
    asked: list[str | None] = field(default_factory=list)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Metadata:
        self.asked.append(topic)
        shown = {name: Topic(dict.fromkeys(range(n))) for name, n in self.topics.items()
                 if topic is None or name == topic}
        return Metadata(shown)


def counts(topics: dict[str, int]) -> tuple[PartitionCounts, CountingConsumer]:
    consumer = CountingConsumer(topics)
    own = ControllerTopics.of(make_config())
    return PartitionCounts(consumer, own), consumer  # type: ignore[arg-type]


def own_topics(partitions: int = 2) -> dict[str, int]:
    t = ControllerTopics.of(make_config())
    return dict.fromkeys((t.jobs, t.results, t.events, t.ledger, t.dlq, t.controls), partitions)


def test_a_task_topic_the_cluster_showed_at_start_is_not_asked_for_again() -> None:
    config = make_config()
    known, consumer = counts({**own_topics(), config.task_topic(): 12})
    known.load()
    assert known.of(config.task_topic()) == 12
    assert consumer.asked == [None]  # the one request of `load`


def test_a_topic_created_after_the_start_is_asked_for_once_and_a_missing_one_is_an_error(
        ) -> None:
    config = make_config()
    topics: dict[str, Any] = own_topics()
    known, consumer = counts(topics)
    known.load()
    topics[config.task_topic("gpu")] = 4
    assert known.of(config.task_topic("gpu")) == 4
    assert known.of(config.task_topic("gpu")) == 4
    assert consumer.asked == [None, config.task_topic("gpu")]
    with pytest.raises(KafkaSetupError, match="does not exist"):
        known.of(config.task_topic("tpu"))
