"""The controller's commit path when librdkafka calls fail or never return, without a broker."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from inferstream.config import Config, ControllerConfig
from inferstream.streams.controller import controller as controller_module
from inferstream.streams.controller.controller import Controller
from inferstream.streams.controller.outbox import Outbox
from inferstream.streams.errors import StuckCallError
from inferstream.streams.kafka.deadline import call_with_deadline


def test_call_with_deadline_returns_the_value_and_reraises_the_error() -> None:
    assert call_with_deadline(lambda a, b: a + b, 2, 3, deadline_s=5) == 5

    def fails() -> None:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    with pytest.raises(KafkaException):
        call_with_deadline(fails, deadline_s=5)


def test_call_with_deadline_gives_up_on_a_call_that_does_not_return() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(StuckCallError, match=r"wait did not return in 0\.3s"):
        call_with_deadline(release.wait, deadline_s=0.3)
    assert time.monotonic() - started < 5
    release.set()


class FakeProducer:
    """Records the transactional calls; the first one made blocks `send_offsets` forever."""

    made: ClassVar[list[FakeProducer]] = []
    release: ClassVar[threading.Event] = threading.Event()

    def __init__(self, settings: dict[str, Any]) -> None:
        self.transactional_id = settings["transactional.id"]
        self.calls: list[str] = []
        self.stuck = not FakeProducer.made
        FakeProducer.made.append(self)

    def init_transactions(self, _timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, *_: Any, **__: Any) -> None:
        self.calls.append("produce")

    def send_offsets_to_transaction(self, positions: list[TopicPartition], _meta: object,
                                    _timeout: float) -> None:
        self.calls.append(f"send_offsets {[tp.offset for tp in positions]}")
        if self.stuck:
            FakeProducer.release.wait()
            raise KafkaException(KafkaError(KafkaError._FENCED))

    def commit_transaction(self, _timeout: float) -> None:
        self.calls.append("commit")

    def abort_transaction(self, _timeout: float) -> None:
        self.calls.append("abort")

    def flush(self, _timeout: float) -> int:
        return 0


class FakeConsumer:
    """Owns jobs[0]; has read to offset 7; its group committed offset 3."""

    def __init__(self, _settings: dict[str, Any]) -> None:
        self.seeks: list[tuple[str, int, int]] = []

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("t.jobs", 0)]

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in tps]

    def consumer_group_metadata(self) -> object:
        return object()

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 3) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))


class FakeClients:
    def producer(self, settings: dict[str, Any]) -> FakeProducer:
        return FakeProducer(settings)

    def consumer(self, settings: dict[str, Any]) -> FakeConsumer:
        return FakeConsumer(settings)


@pytest.fixture
def controller(monkeypatch: pytest.MonkeyPatch) -> Controller:
    FakeProducer.made = []
    FakeProducer.release = threading.Event()
    monkeypatch.setattr(controller_module, "read_ledger", lambda *_, **__: [])
    monkeypatch.setattr(controller_module, "CALL_GRACE_S", 0.2)
    config = Config(bootstrap_servers="127.0.0.1:1", topic_prefix="t.",
                    controller=ControllerConfig(commit_timeout_s=0.1))
    return Controller(config, clients=FakeClients())  # type: ignore[arg-type]


def test_a_stuck_send_offsets_replaces_the_producer_and_rolls_back(
        controller: Controller) -> None:
    """librdkafka#5456: send_offsets_to_transaction can block past its timeout for good."""
    out = Outbox(controller.topics, controller.codec, controller.partitions)
    out.add("t.job-events", 0, b"k", b"v")
    try:
        assert controller._commit(out) is False
        stuck, fresh = FakeProducer.made
        assert stuck.calls == ["begin", "produce", "send_offsets [7]"]
        assert controller._producer is fresh
        assert fresh.calls == ["init"]  # fences the stuck one under the same id
        assert fresh.transactional_id == stuck.transactional_id == "t.controller"
        consumer = controller._consumer
        assert isinstance(consumer, FakeConsumer)
        assert consumer.seeks == [("t.jobs", 0, 3)]  # back to the last commit

        assert controller._commit(out) is True
        assert fresh.calls == ["init", "begin", "produce", "send_offsets [7]", "commit"]
    finally:
        FakeProducer.release.set()


def test_a_failed_abort_also_replaces_the_producer(controller: Controller,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer.made[0]
    producer.stuck = False

    def abort_fails(_timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._STATE))

    monkeypatch.setattr(producer, "abort_transaction", abort_fails)
    controller._recover(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    assert controller._producer is FakeProducer.made[1]
    assert FakeProducer.made[1].calls == ["init"]
