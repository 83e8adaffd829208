"""A stream member refused an ACL says the `inferstream acls` line that grants the stream's
ACLs, with the stream's own settings: `inferstream acls --role stream` refuses to run without
its topics, and its group and dead-letter topic change what it grants."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import TransactionalIdAuthorizationFailed

from inferstream.config import Config
from inferstream.kafka.errors import AuthorizationError
from inferstream.kafka.refusals import grant_command
from inferstream.models import load_model
from inferstream.stream.source import new_member, stream_config
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import CODEC
from tests.unit.support.memory import make_config as base_config

IN, OUT = "uploads", "labels"


def make_config(**stream: str) -> Config:
    return base_config(worker={"worker_id": "s1"}, sasl_username="s1",
                       stream={"input_topic": IN, "output_topic": OUT, **stream})


def test_a_member_refused_its_transactional_id_names_the_stream_s_topics(
        broker: MemoryBroker) -> None:
    config = make_config()
    broker.create_topic(IN, 2)
    broker.create_topic(OUT, 2)
    tid = f"{stream_config(config).worker_transactional_prefix()}{IN}.0"
    broker.inject(tid, "init", times=1000, error=TransactionalIdAuthorizationFailed(tid))
    member = new_member(config, load_model("sim:ms=0"), codec=CODEC,
                        clients=MemoryKafkaClients(broker))
    with pytest.raises(AuthorizationError) as raised:
        asyncio.run(asyncio.wait_for(member.run(), 30))
    assert str(raised.value) == (
        f"User:s1 may not use transactional id {tid} at mem:1: no ACL allows it; an admin "
        "grants the stream's ACLs with `inferstream acls --principal User:s1 --role stream "
        f"--topic-prefix 't.' --input-topic {IN} --output-topic {OUT} --apply`")


def test_the_grant_names_the_group_and_dead_letters_the_stream_was_given() -> None:
    config = make_config(group="labellers", on_error="dlq", dead_letter_topic="uploads.bad")
    assert grant_command(stream_config(config), "stream") == (
        "inferstream acls --principal User:s1 --role stream --topic-prefix 't.' "
        f"--input-topic {IN} --output-topic {OUT} --group labellers --on-error dlq "
        "--dead-letter-topic uploads.bad --apply")
