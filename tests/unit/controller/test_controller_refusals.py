"""A controller replica refused its group, a topic or its transactional id after start (an
ACL removed) stops in words, naming what it may not do and the `inferstream acls` line that
grants it, instead of running on outside the group or retrying for ever."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from inferstream.client.client import Client, Job
from inferstream.config import Config
from inferstream.controller.replica import Controller
from inferstream.kafka.errors import AuthorizationError, KafkaSetupError
from inferstream.kafka.settings import partition_for
from inferstream.testing import MemoryKafkaClients
from inferstream.testing.clients.metadata import MemoryMessage
from tests.unit.support.memory import CODEC, MODEL, make_config, new_broker
from tests.unit.support.running import Running


class GroupRefusedClients(MemoryKafkaClients):
    """librdkafka tells a consumer refused its group in an error message of no partition."""

    def __init__(self, group: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.group = group

    def consumer(self, settings: dict[str, Any]) -> Any:
        consumer = super().consumer(settings)
        if settings.get("group.id") == self.group:
            refused = MemoryMessage(None, None, -1,  # type: ignore[arg-type]
                                    error=KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
            consumer.poll = lambda _timeout=-1: refused
        return consumer


def test_a_controller_refused_its_group_stops_in_words() -> None:
    config = make_config(sasl_username="controller", controller={"idle_exit_s": 2.0})
    clients = GroupRefusedClients(config.controller_group(), broker=new_broker(config))
    controller = Controller(config, codec=CODEC, clients=clients)
    with pytest.raises(KafkaSetupError) as raised:
        controller.run()
    assert str(raised.value) == (
        "User:controller may not join group t.controllers at mem:1: no ACL allows it; an "
        "admin grants the controller's ACLs with `inferstream acls --principal "
        "User:controller --role controller --topic-prefix 't.' --apply`")


def refused(code: int) -> KafkaException:
    """librdkafka's error for a request the broker refused for want of an ACL."""
    return KafkaException(KafkaError(code, "refused", txn_requires_abort=True))


def principal_config() -> Config:
    return make_config(sasl_username="controller")


def grant(what: str) -> str:
    return (f"User:controller may not {what} at mem:1: no ACL allows it; an admin grants "
            "the controller's ACLs with `inferstream acls --principal User:controller "
            "--role controller --topic-prefix 't.' --apply`")


def submit(clients: MemoryKafkaClients) -> Job:
    return Client(make_config(), CODEC, clients).submit(MODEL, ["a", "b", "c"], chunk_size=3)


def home_id(job: Job) -> str:
    return f"t.controller.{partition_for(job.job_id, 2)}"


def stops_with(running: Running, controller: Controller) -> str:
    """The one line the controller stops with (it fails the test if it runs on)."""
    running.controller(controller)
    with pytest.raises(AuthorizationError) as raised:
        running.wait_for(lambda: False)
    return str(raised.value)


def test_a_controller_refused_its_group_at_a_commit_stops_in_words(
        clients: MemoryKafkaClients, running: Running) -> None:
    """The ACL on the group deleted after start: the transaction's offsets are refused."""
    job = submit(clients)
    fault = clients.broker.inject(home_id(job), "send_offsets", times=1000,
                                  error=refused(KafkaError.GROUP_AUTHORIZATION_FAILED))
    controller = Controller(principal_config(), codec=CODEC, clients=clients)

    assert stops_with(running, controller) == grant("use group t.controllers")
    assert fault.reached.is_set()


def test_a_controller_refused_its_committed_offsets_while_rolling_back_stops_in_words(
        clients: MemoryKafkaClients, running: Running) -> None:
    """A commit failed (a timeout), and the look-up of the group's committed offsets that
    rolls the partition back is refused: the replica stops instead of retrying for ever."""
    job = submit(clients)
    clients.broker.inject(home_id(job), "commit")
    fetch = clients.broker.inject("t.controllers", "offset_fetch", times=1000,
                                  error=refused(KafkaError.GROUP_AUTHORIZATION_FAILED))
    controller = Controller(principal_config(), codec=CODEC, clients=clients)

    assert stops_with(running, controller) == grant("use group t.controllers")
    assert fetch.reached.is_set()


def test_a_controller_refused_a_topic_it_writes_stops_in_words(
        clients: MemoryKafkaClients, running: Running) -> None:
    job = submit(clients)
    clients.broker.inject(home_id(job), "commit", times=1000,
                          error=refused(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    controller = Controller(principal_config(), codec=CODEC, clients=clients)

    line = stops_with(running, controller)
    assert line.startswith("User:controller may not write topics t.")
    assert "t.tasks" in line and line.endswith("--role controller --topic-prefix 't.' --apply`")


def test_a_controller_refused_its_transactional_id_at_a_commit_stops_in_words(
        clients: MemoryKafkaClients, running: Running) -> None:
    job = submit(clients)
    clients.broker.inject(home_id(job), "commit", times=1000, error=KafkaException(
        KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "refused", fatal=True)))
    controller = Controller(principal_config(), codec=CODEC, clients=clients)

    assert stops_with(running, controller) == grant(f"use transactional id {home_id(job)}")
