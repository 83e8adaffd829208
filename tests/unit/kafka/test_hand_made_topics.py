"""Topics made by hand with other settings, or partitions added to one: `topics describe`
says what the cluster has (its compaction too) and what differs, co-partitioning included,
and the start-up check of a command that uses jobs and results refuses them in one line."""

from __future__ import annotations

import pytest

from inferstream.config import Config
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.preflight import check_cluster
from inferstream.kafka.topics import describe_topics, ensure_topics, topic_specs
from inferstream.testing import MemoryBroker, MemoryKafkaClients

CONFIG = Config(topic_prefix="t.", partitions=4, task_partitions=4)


def test_a_ledger_made_without_compaction_is_shown_as_it_is() -> None:
    broker = MemoryBroker()
    broker.create_topic("t.controller-ledger", 4, {"cleanup.policy": "delete",
                                                   "max.message.bytes": str(16 * 1024 * 1024),
                                                   "segment.ms": "600000"})
    broker.create_topics(topic_specs(CONFIG))  # the others as `topics create` makes them

    rows = {row.topic: row for row in describe_topics(CONFIG, clients=MemoryKafkaClients(broker))}

    ledger = rows["t.controller-ledger"]
    assert (ledger.compacted, ledger.problems) == (
        False, ["cleanup.policy=delete (expected compact)"])
    assert rows["t.policy"].compacted
    assert not rows["t.jobs"].problems


def test_a_ledger_of_kafkas_default_record_size_is_a_mismatch() -> None:
    """A ledger that `topics create` made before it took large records (Kafka's default,
    1 MiB) is shown to differ, so that an operator raises it before an inline job of more
    stalls its partition."""
    broker = MemoryBroker()
    broker.create_topic("t.controller-ledger", 4, {"cleanup.policy": "compact",
                                                   "segment.ms": "600000"})
    broker.create_topics(topic_specs(CONFIG))

    report = ensure_topics(CONFIG, clients=MemoryKafkaClients(broker))
    assert report.mismatched == {
        "t.controller-ledger": ["max.message.bytes=1048588 (expected at least 16777216; raise "
                                "it: kafka-configs --alter --entity-type topics --entity-name "
                                "t.controller-ledger --add-config max.message.bytes=16777216)"]}


def test_a_topic_that_takes_larger_records_than_needed_is_no_mismatch() -> None:
    """A ledger that an earlier `topics create` made without the setting, on brokers that
    allow records above 16 MiB, takes every record inferstream writes: `topics create` of
    an upgrade reports no MISMATCH for it and exits 0."""
    broker = MemoryBroker()
    broker.create_topic("t.controller-ledger", 4, {"cleanup.policy": "compact",
                                                   "max.message.bytes": str(32 * 1024 * 1024),
                                                   "segment.ms": "600000"})
    broker.create_topic("t.dlq", 4, {"max.message.bytes": str(16 * 1024 * 1024 - 1)})
    broker.create_topics(topic_specs(CONFIG))

    report = ensure_topics(CONFIG, clients=MemoryKafkaClients(broker))
    rows = {row.topic: row for row in describe_topics(CONFIG, clients=MemoryKafkaClients(broker))}

    assert report.mismatched == {
        "t.dlq": ["max.message.bytes=16777215 (expected at least 16777216; raise it: kafka-configs "
                  "--alter --entity-type topics --entity-name t.dlq --add-config "
                  "max.message.bytes=16777216)"]}
    assert not rows["t.controller-ledger"].problems


def test_a_compacted_topic_rolled_at_kafkas_default_is_lowered_by_topics_create() -> None:
    """A policy topic that an earlier `topics create` made with Kafka's default roll (7 days)
    is never compacted in its open segment: `topics describe` says so, and `topics create`
    lowers it (an upgraded cluster's topics Job would otherwise fail on it); one that rolls
    sooner than needed is left as it is."""
    broker = MemoryBroker()
    broker.create_topic("t.policy", 1, {"cleanup.policy": "compact"})
    broker.create_topic("t.task-control", 1, {"cleanup.policy": "compact", "segment.ms": "60000"})
    broker.create_topic("t.workers", 1, {"cleanup.policy": "delete"})  # not compacted: as it is
    broker.create_topics(topic_specs(CONFIG))
    clients = MemoryKafkaClients(broker)

    rows = {row.topic: row for row in describe_topics(CONFIG, clients=clients)}
    report = ensure_topics(CONFIG, clients=clients)

    assert rows["t.policy"].problems == [
        "segment.ms=604800000 (expected at most 600000; lower it: kafka-configs --alter "
        "--entity-type topics --entity-name t.policy --add-config segment.ms=600000)"]
    assert not rows["t.task-control"].problems
    assert report.altered == {"t.policy": ["segment.ms=604800000 -> 600000"]}
    assert broker.topic_configs("t.policy")["segment.ms"] == "600000"
    assert broker.topic_configs("t.task-control")["segment.ms"] == "60000"
    assert "segment.ms" not in broker.topic_configs("t.workers")
    assert report.mismatched == {"t.workers": [
        "cleanup.policy=delete (expected compact)",
        "segment.ms=604800000 (expected at most 600000; lower it: kafka-configs --alter "
        "--entity-type topics --entity-name t.workers --add-config segment.ms=600000)"]}
    assert all(not row.problems for row in describe_topics(CONFIG, clients=clients)
               if row.topic != "t.workers")


def test_a_roll_the_cluster_refuses_to_lower_stays_a_mismatch_with_its_command() -> None:
    broker = MemoryBroker()
    broker.create_topic("t.policy", 1, {"cleanup.policy": "compact"})
    broker.create_topics(topic_specs(CONFIG))
    clients = MemoryKafkaClients(broker)
    admin = clients.admin
    clients.admin = lambda settings: admin({**settings, "refuse_alter": True})  # no ACL

    report = ensure_topics(CONFIG, clients=clients)

    assert report.altered == {}
    assert report.mismatched == {
        "t.policy": ["segment.ms=604800000 (expected at most 600000; lower it: kafka-configs "
                     "--alter --entity-type topics --entity-name t.policy --add-config "
                     "segment.ms=600000)"]}


def test_jobs_with_more_partitions_than_results_and_ledger_is_a_mismatch() -> None:
    """Partitions added to `jobs` alone pass its own check (not fewer than configured), but
    its jobs' records would have no partition of that index in results and ledger."""
    broker = MemoryBroker()
    broker.create_topic("t.jobs", 6, {"max.message.bytes": str(16 * 1024 * 1024)})
    broker.create_topics(topic_specs(CONFIG))
    clients = MemoryKafkaClients(broker)

    rows = {row.topic: row for row in describe_topics(CONFIG, clients=clients)}
    report = ensure_topics(CONFIG, clients=clients)

    differ = ("partition counts differ (t.jobs 6, t.results 4, t.controller-ledger 4): a job's "
              "records share one partition index")
    for name in ("t.jobs", "t.results", "t.controller-ledger"):
        assert rows[name].problems == [differ], name
        assert report.mismatched[name] == [differ], name
    assert not rows["t.job-events"].problems


def test_a_jobs_topic_with_other_partitions_than_results_and_ledger_is_one_line() -> None:
    """A controller must not start on them (its replay waited for ledger partitions that do
    not exist, and its restarts looped), nor a job go to a partition no controller serves."""
    broker = MemoryBroker()
    config = Config(topic_prefix="t.", connect_timeout_s=0.1)
    broker.create_topic("t.jobs", partitions=6)
    broker.create_topic("t.results", partitions=4)
    broker.create_topic("t.controller-ledger", partitions=4)
    clients = MemoryKafkaClients(broker)
    check_cluster(config, ("t.jobs",), clients)  # a command that reads one of them
    with pytest.raises(KafkaSetupError) as raised:
        check_cluster(config, config.topics("jobs", "results", "controller-ledger"), clients)
    message = str(raised.value)
    assert message.startswith("topics t.jobs (6), t.results (4), t.controller-ledger (4) "
                              "differ in partition count")
    assert "`inferstream topics create`" in message
    assert "\n" not in message
