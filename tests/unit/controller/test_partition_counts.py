"""The partition counts a controller writes by: its own topics checked at start, the pools'
task topics known from that same metadata request, so a pool's first job asks nothing; a task
topic's count asked again once a worker owns a partition beyond it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from inferstream.controller import outbox
from inferstream.controller.book import JobBook
from inferstream.controller.outbox import ControllerTopics, PartitionCounts
from inferstream.kafka.errors import KafkaSetupError
from inferstream.policy.view import NO_POLICY
from inferstream.schemas.records import now_ms
from tests.unit.controller import test_book
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


def test_partitions_added_to_a_task_topic_are_asked_for_when_a_worker_owns_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool grown past its task topic's partitions: the count is asked again once a worker
    owns a partition beyond it, at most once per `REASK_S` while the answer falls short, and
    never shrinks."""
    config = make_config()
    topics: dict[str, Any] = {**own_topics(), config.task_topic(): 4}
    known, consumer = counts(topics)
    known.load()
    topics[config.task_topic()] = 8
    known.reach(config.task_topic(), 4)  # partition 3: nothing new
    assert known.of(config.task_topic()) == 4 and consumer.asked == [None]
    known.reach(config.task_topic(), 6)
    assert known.of(config.task_topic()) == 8
    known.reach(config.task_topic(), 12)  # the cluster's answer lags: not asked again yet
    assert consumer.asked == [None, config.task_topic()]
    monkeypatch.setattr(outbox, "REASK_S", 0.0)
    topics[config.task_topic()] = 2  # a stale answer
    known.reach(config.task_topic(), 12)
    assert len(consumer.asked) == 3 and known.of(config.task_topic()) == 8


def test_a_running_controller_places_tasks_on_partitions_added_to_its_pools_topic() -> None:
    """Workers own partitions 4-7 of a task topic the controller knew with 4: their tasks
    go there (before, only partitions 0-3 got any, and the workers that owned only new ones
    stayed idle until the controller restarted)."""
    config = test_book.make_config(issue_ahead_s=2.0)
    count = {"n": 4}
    told: list[tuple[str, int]] = []

    def partitions(topic: str) -> int:
        return count["n"] if topic == config.task_topic() else config.partitions

    def grown(topic: str, at_least: int) -> None:
        told.append((topic, at_least))
        count["n"] = 8

    book = JobBook(config, codec=test_book.CODEC, policy=NO_POLICY, partitions=partitions,
                   grown=grown, describe=lambda _group: {"w1": [0, 1, 2, 3], "w2": [4, 5, 6, 7]})
    _, first = test_book.accepted(book, test_book.make_job(items=400, chunk_size=10))
    out = book.outbox()
    for task in first:
        book.on_result(test_book.result_of(task), out)
    book.tick(out, now_ms())
    assert told == [(config.task_topic(), 8)]
    placed = {partition for partition, _ in test_book.tasks(book, out)}
    assert placed & {4, 5, 6, 7}, placed
