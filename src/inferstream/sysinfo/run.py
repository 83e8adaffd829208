"""`inferstream sysinfo`: one replica of the sysinfo app; its settings are `SysinfoConfig`."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from inferstream.config import Config
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.preflight import Needs, check_groups
from inferstream.supervise.child import note_running

if TYPE_CHECKING:
    from inferstream.sysinfo.app import Topology

log = logging.getLogger(__name__)

def needs(config: Config) -> Needs:
    """The sysinfo app (Faust, on aiokafka) gets no pass-through settings: librdkafka's check
    covers the cluster and topics; its HTTP port must be free; its strategies must load."""
    from inferstream.sysinfo.fleet import Fleet  # sysinfo only (no faust here)

    Fleet(config.sysinfo, {}).check_strategies()  # a wrong name fails before any connection
    return Needs(topics=config.topics("sysinfo", "policy", "dlq"),
                 metrics_port=config.sysinfo.port, port_flag="--port",
                 metrics_addr=config.sysinfo.bind, addr_flag="--bind", role="sysinfo",
                 groups=(config.sysinfo_app_id(),))


def run(args: argparse.Namespace, config: Config) -> int:
    from prometheus_client import CollectorRegistry

    from inferstream.sysinfo.app import SysinfoApp
    from inferstream.sysinfo.fleet import Fleet
    from inferstream.sysinfo.metrics import SysinfoMetrics

    Fleet(config.sysinfo, {}).check_strategies()  # a wrong name fails before any connection
    topology = probe(config)
    # A restarted replica's consumer, refused its group at the join, would wait for ever in
    # silence (Faust asks it for nothing before an assignment): one line instead.
    check_groups(config, (config.sysinfo_app_id(),), role="sysinfo")
    note_running()  # Faust's worker retries the cluster from here on
    _quiet_libraries()
    app = SysinfoApp(config, topology, SysinfoMetrics(CollectorRegistry()))
    return app.run()


def probe(config: Config) -> Topology:
    """The partition counts of the topics the app needs; KafkaSetupError (one line) when the
    broker does not answer, a topic is missing or this principal may not describe it (a
    restarted replica's ACL removed: not "does not exist")."""
    from inferstream.kafka.preflight import absent, cluster_metadata, forbidden, plural
    from inferstream.kafka.refusals import not_authorized
    from inferstream.sysinfo.app import Topology

    names = {name: config.topic(name) for name in ("sysinfo", "policy", "dlq")}
    metadata = cluster_metadata(config, tuple(names.values()))
    hidden = forbidden(metadata.topics, names.values())
    if hidden:
        raise not_authorized(config, "sysinfo",
                             f"describe {plural(hidden, 'topic')} {', '.join(hidden)}")
    missing = absent(metadata.topics, names.values())
    if missing:
        raise KafkaSetupError(f"topic {missing[0]} does not exist: run "
                              "`inferstream topics create`")
    partitions = {name: metadata.topics[topic].partitions for name, topic in names.items()}
    replicas = max(len(next(iter(p.values())).replicas) for p in partitions.values())
    return Topology(sysinfo_partitions=len(partitions["sysinfo"]),
                    dlq_partitions=len(partitions["dlq"]), replication=max(1, replicas))


def _quiet_libraries() -> None:
    """Faust, mode and aiokafka narrate every step at INFO; keep their warnings."""
    if logging.getLogger().level > logging.DEBUG:
        for name in ("faust", "mode", "aiokafka"):
            logging.getLogger(name).setLevel(logging.WARNING)
