"""A stream whose topics gain partitions while it runs places its outputs as docs/stream.md
says with the counts of now, not of its start: on the input's partition index while the
output has as many partitions, else by the key's murmur2, from the next rebalance on."""

from __future__ import annotations

import ssl

import pytest

from inferstream.kafka.settings import partition_of_key
from inferstream.models import load_model
from inferstream.stream import source as stream_source
from inferstream.stream.source import new_member
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.stream.test_stream_memory import IN, OUT, all_read, make_config, outputs, streams
from tests.unit.stream.test_stream_start import holding_all
from tests.unit.support.memory import CODEC
from tests.unit.support.running import Running

#: a key whose murmur2 places it on partition 1 of 2: neither 2 % 2 nor 2
KEY = next(k for k in (f"k{i}".encode() for i in range(100)) if partition_of_key(k, 2) == 1)


def test_outputs_follow_the_partition_counts_after_the_topics_grow(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    streams(broker, (2, 2))
    member = new_member(make_config(), load_model("sim:ms=0"), codec=CODEC, clients=clients)
    running.workers(member)
    running.wait_for(holding_all(member, 2))

    broker.add_partitions(IN, 3)  # the output has fewer partitions now: by the key
    broker.rebalance(member.group_id)
    running.wait_for(holding_all(member, 3))
    broker.produce(IN, 2, KEY, b"on a new partition")
    running.wait_for(all_read(broker, [member]))
    assert [(r.key, r.partition) for r in outputs(broker)] == [(KEY, 1)]

    broker.add_partitions(OUT, 3)  # as many again: the input's partition index
    broker.rebalance(member.group_id)
    running.wait_for(holding_all(member, 3))
    broker.produce(IN, 2, KEY, b"after the output grew too")
    running.until(all_read(broker, [member]))
    assert [(r.key, r.partition) for r in outputs(broker)] == [(KEY, 1), (KEY, 2)]


def test_a_recount_that_raises_still_takes_the_partitions(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition count that fails in a way of its own (a TLS file read mid-rotation as the
    probe is made) keeps the counts it had: the rebalance still takes the partitions, where
    the member held none and retook none until the next rebalance."""
    streams(broker, (2, 2))
    member = new_member(make_config(), load_model("sim:ms=0"), codec=CODEC, clients=clients)
    running.workers(member)
    running.wait_for(holding_all(member, 2))

    async def unreadable(*_args: object, **_kwargs: object) -> dict[str, int]:
        raise ssl.SSLError("[SSL] PEM lib (_ssl.c:3900)")
    monkeypatch.setattr(stream_source, "partition_counts", unreadable)
    broker.add_partitions(IN, 3)
    broker.rebalance(member.group_id)
    running.wait_for(holding_all(member, 3))
    broker.produce(IN, 2, KEY, b"on a new partition")
    running.until(all_read(broker, [member]))
    assert [(r.key, r.partition) for r in outputs(broker)] == [(KEY, 0)]
