"""`PolicyTable` follows the compacted policy topic of the in-memory broker: latest entry per
key, shares by pool, no policy when the pool entry is missing or too old."""

from __future__ import annotations

from inferstream.config import Config
from inferstream.policy.table import PolicyTable
from inferstream.policy.view import ModelRange, WorkerPolicy
from inferstream.schemas.records import (
    PolicyEntry,
    PolicyKind,
    WorkerHealth,
    plain_record,
)
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import CODEC
from tests.unit.support.policies import entry, write
from tests.unit.support.running import TIMEOUT_S, Running

CONFIG = Config(bootstrap_servers="mem:1", topic_prefix="t.", partitions=2)


def test_the_table_follows_the_topic_latest_entry_per_key(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    write(broker, entry("a", 0.5), entry("b", 0.5), entry("", 1.0))
    table = PolicyTable(CONFIG, clients, CODEC, max_age_s=60)
    table.start()
    try:
        assert table.caught_up.wait(TIMEOUT_S)
        assert table.shares("default") == {"a": 0.5, "b": 0.5}
        write(broker, entry("a", 0.8), entry("b", 0.2), entry("c", 0.0, WorkerHealth.STALE))
        running.wait_for(lambda: table.shares("default").get("c") == 0.0)
        assert table.shares("default") == {"a": 0.8, "b": 0.2, "c": 0.0}
        assert table.workers("default") == {"a": WorkerPolicy(0.8, True, 80.0),
                                            "b": WorkerPolicy(0.2, True, 20.0),
                                            "c": WorkerPolicy(0.0, False, 0.0)}
        assert table.has_policy("default")
        assert not table.has_policy("other")
        found = table.entry("default", "a")
        assert found is not None and found["kind"] == PolicyKind.WORKER
        age = table.age_s()
        assert age is not None and age < 5
    finally:
        table.stop()


def test_a_stale_pool_entry_means_no_policy() -> None:
    table = PolicyTable(CONFIG, codec=CODEC, max_age_s=90, clock=lambda: 1_000_000.0)
    table.apply(b"default", CODEC.encode("PolicyEntry", entry("", 1.0, updated_at=900_000_000)))
    assert not table.has_policy("default")
    assert table.workers("default") is None
    table.apply(b"default", CODEC.encode("PolicyEntry", entry("", 1.0,
                                                             updated_at=999_950_000)))
    assert table.has_policy("default")


def test_an_undecodable_record_is_skipped() -> None:
    table = PolicyTable(CONFIG, codec=CODEC)
    table.apply(b"default/x", b"garbage")
    assert table.entries("default") == []
    assert table.age_s() is None


def test_the_controller_sizes_tasks_by_the_pool_entry_while_the_policy_is_fresh() -> None:
    """`task_size` is the controller's TaskSizer: the POOL entry's size, none when stale."""
    clock = [1_000_000.0]
    table = PolicyTable(CONFIG, codec=CODEC, max_age_s=90, clock=lambda: clock[0])
    assert table.task_size("default") is None
    pool = PolicyEntry(**{**entry("", 1.0, updated_at=999_990_000), "task_size": 37})
    table.apply(b"default", CODEC.encode("PolicyEntry", pool))
    assert table.task_size("default") == 37
    assert table.task_size("other") is None
    clock[0] += 200  # sysinfo stopped writing: its recommendation no longer holds
    assert table.task_size("default") is None


def test_the_model_ranges_of_a_pool_hold_while_the_policy_is_fresh() -> None:
    """`model_ranges` is what the assignor and the controller route by: none when stale."""
    clock = [1_000_000.0]
    table = PolicyTable(CONFIG, codec=CODEC, max_age_s=90, clock=lambda: clock[0])
    assert table.model_ranges("default") == ()
    ranges = [ModelRange("efficientnet_lite0", 0, 3), ModelRange("sim:ms=2", 3, 9)]
    pool = PolicyEntry(**{**entry("", 1.0, updated_at=999_990_000), "model_partitions": ranges})
    table.apply(b"default", CODEC.encode("PolicyEntry", plain_record(PolicyEntry, pool)))
    assert table.model_ranges("default") == (ModelRange("efficientnet_lite0", 0, 3),
                                             ModelRange("sim:ms=2", 3, 9))
    clock[0] += 200
    assert table.model_ranges("default") == ()
