"""`inferstream sysinfo`: one replica of the sysinfo app; its settings are `SysinfoConfig`."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from inferstream.config import Config
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.preflight import Needs

if TYPE_CHECKING:
    from inferstream.sysinfo.app import Topology

log = logging.getLogger(__name__)

#: Seconds the broker has to answer the start-up probe before the command gives up.
PROBE_TIMEOUT_S = 10.0


def needs(config: Config) -> Needs:
    """The sysinfo app (Faust, on aiokafka) gets no pass-through settings: librdkafka's check
    covers the cluster and topics; its HTTP port must be free; its strategies must load."""
    from inferstream.sysinfo.fleet import Fleet  # sysinfo only (no faust here)

    Fleet(config.sysinfo, {}).check_strategies()  # a wrong name fails before any connection
    return Needs(topics=config.topics("sysinfo", "policy", "dlq"),
                 metrics_port=config.sysinfo.port, port_flag="--port")


def run(args: argparse.Namespace, config: Config) -> int:
    from prometheus_client import CollectorRegistry

    from inferstream.sysinfo.app import SysinfoApp
    from inferstream.sysinfo.fleet import Fleet
    from inferstream.sysinfo.metrics import SysinfoMetrics

    Fleet(config.sysinfo, {}).check_strategies()  # a wrong name fails before any connection
    topology = probe(config)
    _quiet_libraries()
    app = SysinfoApp(config, topology, SysinfoMetrics(CollectorRegistry()))
    return app.run()


def probe(config: Config) -> Topology:
    """The partition counts of the topics the app needs; KafkaSetupError (one line) when the
    broker does not answer or a topic is missing."""
    from confluent_kafka import KafkaException

    from inferstream.kafka.topics import admin_client
    from inferstream.sysinfo.app import Topology

    admin = admin_client(config)
    try:
        topics = admin.list_topics(timeout=PROBE_TIMEOUT_S).topics
    except KafkaException as exc:
        raise KafkaSetupError(f"cannot reach Kafka at {config.bootstrap_servers}: "
                              f"{exc.args[0].str()}") from exc
    counts, replicas = {}, 1
    for name in ("sysinfo", "policy", "dlq"):
        meta = topics.get(config.topic(name))
        if meta is None or not meta.partitions:
            raise KafkaSetupError(f"topic {config.topic(name)} does not exist: run "
                                  "`inferstream topics create`")
        counts[name] = len(meta.partitions)
        replicas = max(replicas, len(meta.partitions[0].replicas))
    return Topology(sysinfo_partitions=counts["sysinfo"], dlq_partitions=counts["dlq"],
                    replication=replicas)


def _quiet_libraries() -> None:
    """Faust, mode and aiokafka narrate every step at INFO; keep their warnings."""
    if logging.getLogger().level > logging.DEBUG:
        for name in ("faust", "mode", "aiokafka"):
            logging.getLogger(name).setLevel(logging.WARNING)
