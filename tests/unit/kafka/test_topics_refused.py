"""`topics describe` by a principal that may not describe the topics or read their settings:
the not_authorized line with the admin role's grant command, not a traceback or every
topic called missing."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from inferstream.config import Config
from inferstream.kafka.errors import AuthorizationError
from inferstream.kafka.topics import describe_topics, ensure_topics, topic_specs

CONFIG = Config(bootstrap_servers="kafka-1:9093", topic_prefix="xs.")
REFUSED = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)


@dataclass
class Partition:
    replicas: list[int] = field(default_factory=lambda: [1])


@dataclass
class Topic:
    error: KafkaError | None = None
    partitions: dict[int, Any] = field(default_factory=lambda: {0: Partition()})


@dataclass
class Listing:
    topics: dict[str, Topic]


class Admin:
    """A cluster holding every expected topic; `hidden`: not one is listed to this
    principal (named, each is refused); `configs_refused`: their settings are."""

    def __init__(self, hidden: bool, configs_refused: bool) -> None:
        self.hidden, self.configs_refused = hidden, configs_refused

    def admin(self, _settings: dict[str, Any]) -> Admin:
        return self

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Listing:
        if topic is not None:
            return Listing({topic: Topic(REFUSED if self.hidden else None)})
        names = [] if self.hidden else [s.name for s in topic_specs(CONFIG)]
        return Listing({name: Topic() for name in names})

    def describe_configs(self, resources: list[Any], **_: Any) -> dict[Any, Future[Any]]:
        described: dict[Any, Future[Any]] = {}
        for resource in resources:
            future: Future[Any] = Future()
            if self.configs_refused:
                future.set_exception(KafkaException(REFUSED))
            else:
                future.set_result({})
            described[resource] = future
        return described


def test_topics_hidden_from_the_principal_are_refused_not_missing() -> None:
    with pytest.raises(AuthorizationError) as refused:
        describe_topics(CONFIG, clients=Admin(hidden=True, configs_refused=False))  # type: ignore[arg-type]
    line = str(refused.value)
    assert line.startswith("this principal may not describe topics xs.jobs, ")
    assert "inferstream acls" in line and "--role admin" in line and "\n" not in line


def test_settings_refused_are_one_line_naming_the_topic() -> None:
    with pytest.raises(AuthorizationError) as refused:
        describe_topics(CONFIG, clients=Admin(hidden=False, configs_refused=True))  # type: ignore[arg-type]
    assert str(refused.value).startswith(
        "this principal may not read the settings of topic xs.jobs (DescribeConfigs) at "
        "kafka-1:9093")


class CreateRefusedAdmin:
    """A cluster with no topic yet, that refuses this principal every topic it creates."""

    def __init__(self, error: int) -> None:
        self.error = error

    def admin(self, _settings: dict[str, Any]) -> CreateRefusedAdmin:
        return self

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Listing:
        return Listing({})

    def create_topics(self, new: list[Any], **_: Any) -> dict[str, Future[None]]:
        created: dict[str, Future[None]] = {}
        for topic in new:
            future: Future[None] = Future()
            future.set_exception(KafkaException(KafkaError(self.error, "Authorization failed.")))
            created[topic.topic] = future
        return created


@pytest.mark.parametrize("error", [KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                   KafkaError.CLUSTER_AUTHORIZATION_FAILED])
def test_topics_create_refused_names_the_principal_and_the_admin_grant(error: int) -> None:
    """It was `cannot create topic xs.jobs: Authorization failed.`, naming no one."""
    config = Config(bootstrap_servers="kafka-1:9093", topic_prefix="xs.",
                    security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                    sasl_username="client")
    with pytest.raises(AuthorizationError) as refused:
        ensure_topics(config, clients=CreateRefusedAdmin(error))  # type: ignore[arg-type]
    assert str(refused.value) == (
        "User:client may not create topic xs.jobs at kafka-1:9093: no ACL allows it; an "
        "admin grants the admin's ACLs with `inferstream acls --principal User:client --role "
        "admin --topic-prefix 'xs.' --apply`")
