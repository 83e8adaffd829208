"""`reader.offsets_for_times` and `reader.end_offset` ask again while a partition's leader is
not there yet or moved (what librdkafka hands to the caller), and give any other error back at
once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from inferstream.kafka import reader
from inferstream.kafka.reader import end_offset, offsets_for_times

ASKED = [TopicPartition("t.job-events", 3, 1_000)]


class Answers:
    """A consumer whose offsets_for_times answers with each of `answers` in turn: an
    exception to raise, or the partitions to return."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls = 0

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float = -1
                          ) -> list[TopicPartition]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1
                              ) -> tuple[int, int]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return tuple(answer)  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "OFFSETS_RETRY_S", 0.001)


def not_leader() -> KafkaException:
    return KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))


def test_a_partition_without_its_leader_yet_is_asked_again() -> None:
    # a TopicPartition's error is read-only: a stand-in with the same attributes
    with_error = SimpleNamespace(topic="t.job-events", partition=3, offset=-1,
                                 error=KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
    found = [TopicPartition("t.job-events", 3, 42)]
    consumer = Answers(not_leader(), [with_error], found)
    assert offsets_for_times(consumer, ASKED) == found  # type: ignore[arg-type]
    assert consumer.calls == 3


def test_another_error_is_given_back_at_once() -> None:
    consumer = Answers(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    with pytest.raises(KafkaException):
        offsets_for_times(consumer, ASKED)  # type: ignore[arg-type]
    assert consumer.calls == 1


def test_a_leader_error_past_the_timeout_is_given_back() -> None:
    consumer = Answers(*[not_leader()] * 1000)
    with pytest.raises(KafkaException):
        offsets_for_times(consumer, ASKED, timeout_s=0.02)  # type: ignore[arg-type]
    assert 1 < consumer.calls < 1000


def test_a_partition_end_is_asked_again_while_its_leader_is_not_there() -> None:
    consumer = Answers(not_leader(), not_leader(), (0, 7))
    assert end_offset(consumer, ASKED[0]) == 7  # type: ignore[arg-type]
    assert consumer.calls == 3


@pytest.mark.parametrize("code", [KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT])
def test_a_leader_whose_broker_died_under_the_request_is_asked_again(code: int) -> None:
    """`status` of a job the moment the leader of its events' partition was killed: librdkafka
    gives its broker handle up ("Broker handle destroyed without termination") while the
    cluster fences it, and the next ask reaches the new leader."""
    consumer = Answers(KafkaException(KafkaError(code)), (0, 7))
    assert end_offset(consumer, ASKED[0]) == 7  # type: ignore[arg-type]
    consumer = Answers(KafkaException(KafkaError(code)), [TopicPartition("t.job-events", 3, 9)])
    assert offsets_for_times(consumer, ASKED)[0].offset == 9  # type: ignore[arg-type]
