"""A controller replica refused its group after start (an ACL removed) stops in words, naming
the group and the `inferstream acls` line that grants it, instead of running on outside it."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from inferstream.controller.replica import Controller
from inferstream.kafka.errors import KafkaSetupError
from inferstream.testing import MemoryKafkaClients
from inferstream.testing.clients.metadata import MemoryMessage
from tests.unit.support.memory import CODEC, make_config, new_broker


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
