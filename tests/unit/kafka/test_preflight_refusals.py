"""The start-up check of the cluster ends its wait at a broker's refusal: a wrong password or
certificate is said at once, not after connect_timeout_s (kafka.preflight)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from inferstream.config import Config
from inferstream.kafka import preflight as checks
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.preflight import check_cluster
from inferstream.testing import MemoryBroker, MemoryKafkaClients


class RefusedConsumer:
    """A consumer of a cluster that refuses its credentials: every metadata request times
    out, and librdkafka's log (served by poll) says why."""

    REASON = ("sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication "
              "failed during authentication due to invalid credentials with SASL mechanism "
              "SCRAM-SHA-512 (after 321ms in state AUTH_REQ)")

    def __init__(self, settings: dict[str, Any]) -> None:
        self.logger = settings["logger"]
        self.waits: list[float] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.waits.append(timeout)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    def poll(self, timeout: float) -> None:
        self.logger.error("FAIL [thrd:sasl_ssl://127.0.0.1:9093/bootstrap]: %s", self.REASON)

    def close(self) -> None:
        pass


class RefusingClients(MemoryKafkaClients):
    """Clients of that cluster: each consumer made is kept in `consumers`."""

    def __init__(self, consumers: list[RefusedConsumer]) -> None:
        super().__init__(MemoryBroker())
        self.consumers = consumers

    def consumer(self, settings: dict[str, Any]) -> Any:
        self.consumers.append(RefusedConsumer(settings))
        return self.consumers[-1]


CONFIG = Config(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                sasl_username="nobody", connect_timeout_s=60)


def test_a_refused_credential_ends_the_wait_for_the_cluster_at_once() -> None:
    consumers: list[RefusedConsumer] = []
    with pytest.raises(KafkaSetupError, match="did not accept the credentials of User:nobody"):
        check_cluster(CONFIG, clients=RefusingClients(consumers))
    # one short request, not one that waits out the 60 s of connect_timeout_s
    assert consumers[0].waits == [checks.ANSWER_SLICE_S]


def test_a_client_without_a_start_up_check_says_a_refused_credential_too() -> None:
    """The SDK's producer logs nowhere it can read: a consumer of its own asks why no
    broker answered, and the line names the credentials, not the bootstrap servers."""
    producer = RefusedConsumer({"logger": None})  # no metadata, and no log read
    consumers: list[RefusedConsumer] = []
    with pytest.raises(KafkaSetupError, match="did not accept the credentials of User:nobody"):
        checks.reachable_partitions(CONFIG, producer, "inferstream.jobs",
                                    RefusingClients(consumers))
    assert producer.waits == [checks.ANSWER_SLICE_S] and consumers[0].waits == [
        checks.ANSWER_SLICE_S]


class SlowClients(MemoryKafkaClients):
    """Clients of a loaded broker: a metadata request given less than a second is not
    answered (and a request given up is not answered later)."""

    def consumer(self, settings: dict[str, Any]) -> Any:
        return _slow(super().consumer(settings))

    def producer(self, settings: dict[str, Any]) -> Any:
        return _slow(super().producer(settings))


def _slow(client: Any) -> Any:
    described = client.list_topics

    def list_topics(topic: str | None = None, timeout: float = -1) -> Any:
        if 0 <= timeout < 1.0:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return described(topic, timeout=timeout)

    client.list_topics = list_topics
    return client


def test_a_broker_slower_than_the_first_request_still_answers_within_the_timeout() -> None:
    clients = SlowClients()
    clients.broker.create_topic("inferstream.jobs", 3)
    config = Config(connect_timeout_s=5)
    check_cluster(config, ("inferstream.jobs",), clients)
    producer = clients.producer({})
    assert checks.reachable_partitions(config, producer, "inferstream.jobs",
                                       clients) == [0, 1, 2]
