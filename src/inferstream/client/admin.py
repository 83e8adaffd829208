"""`inferstream config` and `inferstream topics`: what a process would run with, and topics."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from inferstream.config import Config
from inferstream.kafka.preflight import Needs
from inferstream.schemas.json_text import encode, strict_encoder


def cluster_needs(_config: Config) -> Needs:
    """The cluster answers (admin commands: they create or describe the topics)."""
    return Needs()


def print_json(value: Any) -> None:
    """`value` as indented JSON on stdout (NaN and +-inf as null, other objects as str)."""
    print(encode(strict_encoder(indent=2, sort_keys=True, default=str), value))


#: The roles `config check --role` checks alone (the names of `inferstream acls --role`).
CHECKED_ROLES = ("worker", "controller", "sysinfo", "stream", "client")


def config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["show", "check"],
                        help="show: the settings, secrets masked; check: the start-up checks "
                        "of every role (settings, metrics port, cluster, topics)")
    parser.add_argument("--role", choices=CHECKED_ROLES,
                        help="check: only this role's start-up checks, as it runs them (its "
                        "principal's ACLs allow its own topics, not every role's); default: "
                        "every role's. show and check take the role's own flags too (--role "
                        "worker --model NAME)")


def config_show(args: argparse.Namespace, config: Config) -> int:
    print_json(config.masked())
    return 0


def config_check(config: Config, needs: Needs | None = None) -> int:
    """Every start-up check of every role, or of one role alone (its `needs`, which name
    it); a failure is an error (one line, exit 2)."""
    from inferstream.kafka.preflight import check_registry, preflight
    from inferstream.kafka.topics import topic_specs

    if needs is None:
        topics = tuple(spec.name for spec in topic_specs(config))
        needs = Needs(librdkafka=True, aiokafka=True, topics=topics,
                      metrics_port=config.worker.metrics_port,
                      metrics_addr=config.worker.metrics_addr)
    preflight(config, needs)
    if needs.role is None:  # every role: each asks the registry (preflight of a role does)
        check_registry(config)
    whose = f"the {needs.role} role" if needs.role else "every role"
    print(f"ok: settings, cluster at {config.bootstrap_servers}, "
          f"{len(needs.topics) + len(needs.user_topics)} topics of {whose} under "
          f"{config.topic_prefix!r} for pool {config.pool}")
    return 0


def topics_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["create", "describe"])
    parser.add_argument("--pools", nargs="+", metavar="POOL",
                        help="pools whose task topics to include (default: --pool)")


def topics(args: argparse.Namespace, config: Config) -> int:
    from inferstream.kafka.topics import describe_topics, ensure_topics

    pools = tuple(args.pools) if args.pools else None
    for pool in pools or ():
        dataclasses.replace(config, pool=pool)  # validates the name: ConfigError if unsafe
    if args.action == "create":
        report = ensure_topics(config, pools)
        for name in report.created:
            print(f"created  {name}")
        for name in report.existing:
            print(f"exists   {name}")
        for name, changes in report.altered.items():
            print(f"altered  {name}: {'; '.join(changes)}")
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


def schemas_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["export"],
                        help="export: write every record's current .avsc file into DIR")
    parser.add_argument("directory", metavar="DIR", help="folder to write (made if missing)")


def schemas(args: argparse.Namespace, _config: Config) -> int:
    """Write `<Name>.avsc` for every record inferstream writes, with its single-object
    encoding header (C3 01 + the 8 fingerprint bytes) printed for foreign clients."""
    from pathlib import Path

    from inferstream.errors import ConfigError
    from inferstream.schemas import SCHEMA_NAMES, load_schema
    from inferstream.schemas.codec import schema_fingerprint

    folder = Path(args.directory)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name in SCHEMA_NAMES:
            schema = load_schema(name)
            path = folder / f"{name}.avsc"
            path.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
            print(f"{path}  header c301{schema_fingerprint(schema).hex()}")
    except OSError as exc:
        raise ConfigError(f"cannot write schemas to {folder}: {exc.strerror}") from exc
    return 0
