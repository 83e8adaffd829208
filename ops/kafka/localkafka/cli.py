"""Run a local Apache Kafka (KRaft) cluster from Maven Central jars, for development and tests.

Needs only Java 17+, Maven and the Python 3 standard library. See ops/kafka/README.md.

    cluster start   [--brokers 1|3] [--dir DIR] [--port BASE|auto] [--set K=V] [--timeout S]
                    [--security plaintext|sasl_ssl|ssl]
    cluster stop    [--dir DIR] [--timeout S] [--wipe]
    cluster status  [--dir DIR] [--json]
    cluster kill    ID [--dir DIR]          # kill -9 one broker
    cluster restart ID [--dir DIR]          # (stop and) start one broker again, wait until back
    cluster logs    ID [--dir DIR] [-n N] [-f]
    cluster clean   [--dir DIR]             # kill -9 the brokers, delete the cluster's files
    cluster bootstrap [--dir DIR]           # print the bootstrap servers
    cluster classpath                        # resolve the jars, print the classpath
    cluster tool CLASS [ARGS...]             # run a Kafka tool class with the jars

`start`, `status` and `restart` print the bootstrap servers (127.0.0.1:9092,...) as the last
line of stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING

from .commands import (
    Args,
    cmd_bootstrap,
    cmd_classpath,
    cmd_clean,
    cmd_kill,
    cmd_logs,
    cmd_restart,
    cmd_start,
    cmd_stop,
    cmd_tool,
)
from .common import CONTROLLER_OFFSET, DEFAULT_DIR, DEFAULT_PORT, ClusterError, log
from .security import MODES
from .status import cmd_status

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]  # noqa: SLF001


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `cluster status | head` exits quietly
    a = build_parser().parse_args(argv, namespace=Args())
    try:
        return a.func(a)
    except ClusterError as e:
        log(f"cluster: error: {e}")
        return 2
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir", help=f"cluster directory (default $INFERSTREAM_KAFKA_DIR or {DEFAULT_DIR})"
    )
    p = argparse.ArgumentParser(
        prog="cluster",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    _add_start(sub, common)
    _add_stop_clean_status(sub, common)
    _add_broker_commands(sub, common)
    _add_jar_commands(sub)
    return p


def _add_start(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "start",
        parents=[common],
        help="format (first time) and start the brokers; wait until ready",
    )
    s.add_argument(
        "--brokers",
        type=int,
        help="number of brokers (default 1; fixed when the cluster is created)",
    )
    s.add_argument(
        "--port",
        help=f"client port of broker 1 (default {DEFAULT_PORT}); broker i gets BASE+i-1; "
        "'auto' picks a free range",
    )
    s.add_argument(
        "--controller-port",
        help=f"controller port of node 1 (default BASE+{CONTROLLER_OFFSET}); node i gets "
        "CBASE+i-1, and several brokers get a dedicated KRaft controller, node N+1",
    )
    s.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server.properties entry for every node, kept for the cluster's life "
        "(repeatable), e.g. --set broker.session.timeout.ms=9000",
    )
    s.add_argument(
        "--security",
        choices=MODES,
        help="plaintext (default), sasl_ssl (SCRAM-SHA-512 users) or ssl (mTLS): a CA, users "
        "and a settings file per user in DIR/clients; fixed when the cluster is created",
    )
    s.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for readiness (default 180)"
    )
    s.set_defaults(func=cmd_start)


def _add_stop_clean_status(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "stop", parents=[common], help="stop all brokers (SIGTERM, then SIGKILL); keeps the data"
    )
    s.add_argument(
        "--timeout", type=float, default=30.0, help="seconds before SIGKILL (default 30)"
    )
    s.add_argument("--wipe", action="store_true", help="then delete the cluster's files")
    s.set_defaults(func=cmd_stop)

    s = sub.add_parser(
        "clean", parents=[common], help="kill -9 the brokers, then delete the cluster's files"
    )
    s.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds before SIGKILL where brokers stop gracefully (to write a CDS archive)",
    )
    s.set_defaults(func=cmd_clean)

    s = sub.add_parser(
        "status", parents=[common], help="exit 0: all running, 1: some, 3: none/no cluster"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)


def _add_broker_commands(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("kill", parents=[common], help="kill -9 one broker")
    s.add_argument("id", type=int)
    s.set_defaults(func=cmd_kill)

    s = sub.add_parser(
        "restart", parents=[common], help="start one broker again (stopping it first if running)"
    )
    s.add_argument("id", type=int)
    s.add_argument("--timeout", type=float, default=180.0)
    s.add_argument("--stop-timeout", type=float, default=30.0)
    s.set_defaults(func=cmd_restart)

    s = sub.add_parser("logs", parents=[common], help="print the end of a broker's log")
    s.add_argument("id", type=int)
    s.add_argument("-n", "--lines", type=int, default=200)
    s.add_argument("-f", "--follow", action="store_true")
    s.set_defaults(func=cmd_logs)

    s = sub.add_parser("bootstrap", parents=[common], help="print the bootstrap servers")
    s.set_defaults(func=cmd_bootstrap)


def _add_jar_commands(sub: Subparsers) -> None:
    s = sub.add_parser("classpath", help="resolve the jars (once) and print the classpath")
    s.set_defaults(func=cmd_classpath)

    s = sub.add_parser(
        "tool", help="run a Kafka tool class, e.g. org.apache.kafka.tools.TopicCommand"
    )
    s.add_argument("main")
    s.add_argument("args", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_tool)
