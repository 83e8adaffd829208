"""The `inferstream` command: one subcommand per role (see DESIGN.md "Processes")."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from inferstream import __version__
from inferstream.config import Config, load_config, parse_kafka_config
from inferstream.errors import InferstreamError

log = logging.getLogger("inferstream")

Command = Callable[[argparse.Namespace, Config], int]


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection (also INFERSTREAM_<NAME> or a TOML file)")
    group.add_argument("--config", dest="config_file", metavar="FILE",
                       help="TOML settings file (or INFERSTREAM_CONFIG)")
    group.add_argument("--bootstrap-servers", help="Kafka servers (default localhost:9092)")
    group.add_argument("--topic-prefix", help="topic name prefix (default 'inferstream.')")
    group.add_argument("--pool", help="worker pool (default 'default')")
    group.add_argument("--security-protocol", help="PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
    group.add_argument("--sasl-mechanism", help="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512")
    group.add_argument("--sasl-username")
    group.add_argument("--sasl-password")
    group.add_argument("--ssl-cafile")
    group.add_argument("--ssl-certfile")
    group.add_argument("--ssl-keyfile")
    group.add_argument("--ssl-key-password")
    group.add_argument("--schema-registry-url", help="use the Confluent wire format")
    group.add_argument("--kafka-config", action="append", default=None, metavar="KEY=VALUE",
                       help="client setting passed through untouched (repeatable)")
    group.add_argument("--partitions", type=int, help="partitions of created topics")
    group.add_argument("--replication-factor", type=int, help="replication of created topics")
    group.add_argument("--log-level", default="INFO")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inferstream", description="Deep-learning inference scheduled through Kafka.")
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    from inferstream import commands

    for name, (helptext, add_args, _) in commands.COMMANDS.items():
        child = sub.add_parser(name, help=helptext, description=helptext)
        add_args(child)
        _connection_flags(child)
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    flags: dict[str, Any] = {
        key: getattr(args, key, None)
        for key in ("config_file", "bootstrap_servers", "topic_prefix", "pool",
                    "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
                    "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_key_password",
                    "schema_registry_url", "partitions", "replication_factor")
    }
    if args.kafka_config:
        flags["kafka_config"] = parse_kafka_config(args.kafka_config)
    return load_config(flags)


def main(argv: Sequence[str] | None = None) -> int:
    from inferstream import commands

    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
    )
    # librdkafka warns about transient states (a coordinator still loading on a fresh broker)
    # that the client retries by itself; show only its errors unless debugging.
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("inferstream.librdkafka").setLevel(logging.ERROR)
    try:
        config = config_from_args(args)
        run: Command = commands.COMMANDS[args.command][2]
        return run(args, config)
    except InferstreamError as exc:
        print(f"inferstream: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))

