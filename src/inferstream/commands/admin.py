"""`inferstream config` and `inferstream topics`: what a process would run with, and topics."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from inferstream.config import Config


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["show", "check"],
                        help="show: the settings, secrets masked; check: the start-up checks "
                        "of every role (settings, metrics port, cluster, topics)")


def config_show(args: argparse.Namespace, config: Config) -> int:
    if args.action == "check":
        return config_check(config)
    print_json(config.masked())
    return 0


def config_check(config: Config) -> int:
    """Every start-up check of every role; a failure is an error (one line, exit 2)."""
    from inferstream.streams.kafka.preflight import Needs, preflight
    from inferstream.streams.kafka.topics import topic_specs

    topics = tuple(spec.name for spec in topic_specs(config))
    preflight(config, Needs(librdkafka=True, aiokafka=True, topics=topics,
                            metrics_port=config.worker.metrics_port))
    print(f"ok: settings, cluster at {config.bootstrap_servers}, {len(topics)} topics "
          f"under {config.topic_prefix!r} for pool {config.pool}")
    return 0


def topics_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["create", "describe"])
    parser.add_argument("--pools", nargs="+", metavar="POOL",
                        help="pools whose task topics to include (default: --pool)")


def topics(args: argparse.Namespace, config: Config) -> int:
    from inferstream.streams.kafka.topics import describe_topics, ensure_topics

    pools = tuple(args.pools) if args.pools else None
    for pool in pools or ():
        dataclasses.replace(config, pool=pool)  # validates the name: ConfigError if unsafe
    if args.action == "create":
        report = ensure_topics(config, pools)
        for name in report.created:
            print(f"created  {name}")
        for name in report.existing:
            print(f"exists   {name}")
        for name, problems in report.mismatched.items():
            print(f"MISMATCH {name}: {'; '.join(problems)}", file=sys.stderr)
        return 0 if report.ok else 1
    rows = describe_topics(config, pools)
    for row in rows:
        state = "; ".join(row.problems) or "ok"
        extra = (f"partitions={row.partitions} replication={row.replication} "
                 f"compacted={row.compacted}") if row.exists else ""
        print(f"{row.topic:<45} {extra} {state}")
    return 0 if all(not r.problems for r in rows) else 1
