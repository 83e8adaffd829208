"""`inferstream dump TOPIC`: a topic's records as JSON lines on stdout (see
`client.dump`). Exit codes: 0 done (also when a reader of the pipe went away),
2 an error (an unknown topic, no broker), 130 Ctrl-C."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inferstream.config import Config
from inferstream.errors import ConfigError
from inferstream.schemas.json_text import encode, strict_encoder

if TYPE_CHECKING:
    from inferstream.client.dump import DumpOptions


def dump_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC",
                        help="jobs, job-events, results, tasks (the --pool's), tasks.<pool>, "
                        "dlq, ledger, sysinfo, policy, task-control, workers (under "
                        "--topic-prefix), or a full topic name (a stream's input or output)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at each partition's first record and stop at its end as "
                        "it was at the start (default: start at the end and wait for new "
                        "records, like kafka-console-consumer)")
    parser.add_argument("--follow", action="store_true",
                        help="with --from-beginning: go on waiting for new records until "
                        "Ctrl-C or --count (default: stop at the end, as it was at the start)")
    parser.add_argument("--committed", action="store_true",
                        help="read with isolation.level=read_committed: what inferstream's "
                        "readers see (default: read_uncommitted, like kcat and "
                        "kafka-console-consumer: aborted attempts and open transactions too)")
    parser.add_argument("--count", type=int, metavar="N",
                        help="stop after N records (default: no limit)")
    parser.add_argument("--bytes", choices=["head", "base64"], default="head",
                        dest="bytes_mode",
                        help="bytes fields as length + the first 32 bytes (hex and printable), "
                        "or whole in base64 (default: %(default)s)")


def dump(args: argparse.Namespace, config: Config) -> int:
    from inferstream.client.dump import dump_topic

    options = dump_options(args)
    dump_topic(config, args.topic, options, _print_line(options.follow))
    return 0


def dump_options(args: argparse.Namespace) -> DumpOptions:
    """The options of the flags; from the end there is nothing before the end to stop at,
    so a dump without --from-beginning follows."""
    from inferstream.client.dump import DumpOptions

    if args.count is not None and args.count < 1:
        raise ConfigError(f"--count must be >= 1, got {args.count}")
    return DumpOptions(from_beginning=args.from_beginning,
                       follow=args.follow or not args.from_beginning,
                       committed=args.committed, count=args.count,
                       whole_bytes=args.bytes_mode == "base64")


def _print_line(flush: bool) -> Callable[[dict[str, Any]], None]:
    encoder = strict_encoder(ensure_ascii=False)

    def write(line: dict[str, Any]) -> None:
        sys.stdout.write(encode(encoder, line) + "\n")
        if flush:
            sys.stdout.flush()
    return write
