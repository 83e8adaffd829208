"""A stream's records too large for their topic (`kafka.limits`): an output over the output
topic's `max.message.bytes` is written as its record's error, and a dead letter over the
dead-letter topic's goes without the input's value, so the partition goes on; the limits read
from the cluster, Kafka's default where they cannot be."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry

from inferstream.kafka.clients import Outgoing
from inferstream.kafka.limits import (
    KAFKA_DEFAULT_RECORD_BYTES,
    RECORD_HEADROOM,
    record_bytes,
    record_limits,
)
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES
from inferstream.models import load_model
from inferstream.stream.metrics import StreamMetrics
from inferstream.stream.source import ORIGIN_OFFSET
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.stream.test_stream_memory import IN, OUT, decoded, make_config, outputs, run_members
from tests.unit.support.memory import CODEC
from tests.unit.support.running import Running

#: an output topic's limit that leaves 16 KiB for a record
SMALL = RECORD_HEADROOM + 16 * 1024
#: a sim model's vector of 4,000 floats: about 80 KB as JSON
LARGE_EMBEDDING = "sim:ms=0,embedding=4000"


def test_an_output_over_the_topics_limit_is_written_as_its_records_error(
        broker: MemoryBroker, running: Running) -> None:
    broker.create_topic(IN, 2)
    broker.create_topic(OUT, 2, {"max.message.bytes": str(SMALL)})
    for i in range(4):
        broker.produce(IN, i % 2, f"k{i}".encode(), f"item {i}".encode())
    metrics = StreamMetrics(CollectorRegistry())
    run_members(running, make_config(LARGE_EMBEDDING), load_model(LARGE_EMBEDDING),
                metrics=metrics)

    lines = [decoded(r) for r in outputs(broker)]
    assert len(lines) == 4  # one each, and every input offset committed (run_members)
    for line in lines:
        assert line["status"] == "error" and "embedding" not in line
        assert line["error"].startswith("output too large: its record takes ")
        assert f"a record of {OUT} holds" in line["error"]
    assert metrics.records.labels("error")._value.get() == 4
    assert metrics.records.labels("ok")._value.get() == 0


def test_an_output_that_fits_is_written_as_it_is(
        broker: MemoryBroker, running: Running) -> None:
    broker.create_topic(IN, 1)
    broker.create_topic(OUT, 1, {"max.message.bytes": str(SMALL)})
    broker.produce(IN, 0, b"k", b"item")
    model = "sim:ms=0,embedding=16"
    run_members(running, make_config(model), load_model(model))
    [line] = [decoded(r) for r in outputs(broker)]
    assert line["status"] == "ok" and len(line["embedding"]) == 16


def test_a_dead_letter_over_its_topics_limit_goes_without_the_inputs_value(
        broker: MemoryBroker, running: Running) -> None:
    broker.create_topic(IN, 1)
    broker.create_topic(OUT, 1, {"max.message.bytes": str(SMALL)})
    broker.create_topic("letters", 1, {"max.message.bytes": str(SMALL)})
    small, large = b"small input", bytes(range(256)) * 128  # 32 KiB: over the letters' 16
    broker.produce(IN, 0, b"small", small)
    broker.produce(IN, 0, b"large", large)
    config = make_config(LARGE_EMBEDDING, on_error="dlq", dead_letter_topic="letters")
    run_members(running, config, load_model(LARGE_EMBEDDING))

    assert outputs(broker) == []
    letters = {letter["key"]: letter for letter in (
        CODEC.decode(v, expected="DeadLetter") for v in broker.values("letters",
                                                                       read_committed=True))}
    assert set(letters) == {b"small", b"large"}
    assert letters[b"small"]["value"] == small
    assert letters[b"small"]["reason"].startswith("output too large")
    assert letters[b"large"]["value"] is None
    assert letters[b"large"]["reason"].startswith("output too large")
    assert "the record's value left out: dead letter too large" in letters[b"large"]["reason"]


def test_limits_are_the_topics_own_at_most_the_producers(broker: MemoryBroker) -> None:
    broker.create_topic("default", 1)
    broker.create_topic("small", 1, {"max.message.bytes": "200000"})
    broker.create_topic("huge", 1, {"max.message.bytes": str(4 * LARGE_MESSAGE_BYTES)})
    limits = record_limits(make_config(), ["default", "small", "huge"],
                           MemoryKafkaClients(broker))
    assert limits == {"default": KAFKA_DEFAULT_RECORD_BYTES - RECORD_HEADROOM,
                      "small": 200000 - RECORD_HEADROOM,
                      "huge": LARGE_MESSAGE_BYTES - RECORD_HEADROOM}


class _Refusing:
    """Clients whose admin may not describe any topic's configuration."""

    def admin(self, _settings: dict[str, Any]) -> Any:
        return self

    def describe_configs(self, resources: list[Any], **_: Any) -> dict[Any, Future[Any]]:
        described: dict[Any, Future[Any]] = {}
        for resource in resources:
            future: Future[Any] = Future()
            future.set_exception(KafkaException(KafkaError(
                KafkaError.TOPIC_AUTHORIZATION_FAILED)))
            described[resource] = future
        return described


def test_a_limit_not_read_is_kafkas_default_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="inferstream.kafka.limits"):
        limits = record_limits(make_config(), ["out"], _Refusing())  # type: ignore[arg-type]
    assert limits == {"out": KAFKA_DEFAULT_RECORD_BYTES - RECORD_HEADROOM}
    [line] = caplog.messages
    assert "topic out" in line and "TOPIC_AUTHORIZATION_FAILED" in line
    assert "grant DescribeConfigs" in line


def test_a_records_size_counts_its_value_key_and_headers() -> None:
    record = Outgoing("t", 0, b"key", b"x" * 100, (("name", b"value"),))
    assert record_bytes(record) == 100 + 3 + 4 + 5
    assert record_bytes(Outgoing("t", 0, None, None)) == 0


def test_an_input_whose_headers_alone_overflow_the_output_gets_its_error_without_them(
        broker: MemoryBroker, running: Running) -> None:
    broker.create_topic(IN, 1, {"max.message.bytes": str(LARGE_MESSAGE_BYTES)})
    broker.create_topic(OUT, 1, {"max.message.bytes": str(SMALL)})
    broker.produce(IN, 0, b"heavy", b"item", headers=(("trace", b"t" * 20_000),))
    broker.produce(IN, 0, b"next", b"item", headers=(("trace", b"t-next"),))
    run_members(running, make_config(), load_model("sim:ms=0"))  # no partition held up

    heavy, after = outputs(broker)
    assert heavy.key is None and dict(heavy.headers)[ORIGIN_OFFSET] == b"0"
    assert "trace" not in dict(heavy.headers)
    line = decoded(heavy)
    assert line["status"] == "error" and line["origin"]["offset"] == 0
    assert line["error"].startswith("output too large: its record takes 20.0 KiB, over the "
                                    f"16.0 KiB a record of {OUT} holds")
    assert line["error"].endswith("; the input's key and headers left out")
    assert after.key == b"next" and dict(after.headers)["trace"] == b"t-next"
    assert decoded(after)["status"] == "ok"


def test_a_dead_letter_whose_key_alone_overflows_goes_without_its_key(
        broker: MemoryBroker, running: Running) -> None:
    broker.create_topic(IN, 1, {"max.message.bytes": str(LARGE_MESSAGE_BYTES)})
    broker.create_topic(OUT, 1)
    broker.create_topic("letters", 1, {"max.message.bytes": str(SMALL)})
    broker.produce(IN, 0, b"k" * 20_000, None)  # a tombstone: an error, so a dead letter
    config = make_config(on_error="dlq", dead_letter_topic="letters")
    run_members(running, config, load_model("sim:ms=0"))

    [letter] = [CODEC.decode(v, expected="DeadLetter")
                for v in broker.values("letters", read_committed=True)]
    assert letter["key"] is None and letter["value"] is None and letter["origin_offset"] == 0
    assert letter["reason"].startswith("null value (a tombstone): no item; the record's value "
                                       "and key left out: dead letter too large")
