"""The sysinfo app's own topics as a replica creates them: the fleet topic's hour of retention
takes effect, and the tables' changelogs can be compacted, because their segments roll."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from inferstream.config import load_config
from inferstream.kafka import topics
from inferstream.sysinfo.app import SysinfoApp, Topology
from inferstream.sysinfo.metrics import SysinfoMetrics
from inferstream.testing import MemoryBroker, MemoryKafkaClients


def test_the_fleet_topic_and_the_changelogs_roll_their_segments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker deletes and compacts only closed segments: at its default roll (7 days)
    the fleet topic kept a week of samples for its hour of retention, and a replica restored
    a week of changelog records for a table of a few dozen keys."""
    broker = MemoryBroker()
    clients = MemoryKafkaClients(broker)
    monkeypatch.setattr(topics, "admin_client", lambda config: clients.admin({}))
    config = load_config({"topic_prefix": "t."}, {})
    app = SysinfoApp(config, Topology(2, 2, replication=1), SysinfoMetrics(CollectorRegistry()))

    app.declare_internal_topics()

    made: dict[str, dict[str, Any]] = {name: broker.topic_configs(name) for name in
                                       broker.topics() if name.startswith("t.sysinfo-")}
    fleet = made.pop("t.sysinfo-fleet")
    assert int(fleet["segment.ms"]) < int(fleet["retention.ms"]) == 3_600_000
    assert len(made) == 2, made  # the aggregates' and the workers' changelogs
    for name, configs in made.items():
        assert configs["cleanup.policy"] == "compact", name
        assert int(configs["segment.ms"]) <= 600_000, name
