"""Where a stream's group starts reading: `--start-from latest` skips what the input held
when the group first took a partition, and nothing written after that, whether or not a
member ran when it was written (a member stopped before its first record, a partition handed
to another member before its first commit)."""

from __future__ import annotations

from inferstream.models import load_model
from inferstream.serving.loop import Worker
from inferstream.stream.source import new_member
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.stream.test_stream_memory import (
    IN,
    all_read,
    decoded,
    make_config,
    outputs,
    streams,
)
from tests.unit.support.memory import CODEC
from tests.unit.support.running import Running


def holding_all(member: Worker, partitions: int) -> object:
    def held() -> bool:
        """the member holds every input partition, each read from where it starts"""
        ownership = getattr(member, "ownership", None)
        return ownership is not None and len(ownership.offsets) == partitions
    return held


def test_records_written_while_no_member_ran_are_answered_after_a_restart(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    config = make_config(start_from="latest")
    streams(broker)
    broker.produce(IN, 0, b"old", b"before the stream")
    first = new_member(config, load_model("sim:ms=0"), codec=CODEC, clients=clients)
    running.workers(first)
    running.until(holding_all(first, 3))  # started at the end, then stopped: no record came

    # where the first member started, committed: the records written since are ahead
    # (read from the group, not from the second member, whose commits move its offsets)
    assert [broker.committed_offset(first.group_id, IN, p) for p in range(3)] == [1, 0, 0]
    broker.produce(IN, 0, b"while-down", b"after the group started, no member running")
    broker.produce(IN, 2, b"later", b"also while down")
    second = new_member(config, load_model("sim:ms=0"), codec=CODEC, clients=clients)
    running.workers(second)
    running.until(all_read(broker, [second]))

    answered = sorted(r.key or b"" for r in outputs(broker))
    assert answered == [b"later", b"while-down"]
    assert {decoded(r)["origin"]["offset"] for r in outputs(broker)} == {0, 1}
