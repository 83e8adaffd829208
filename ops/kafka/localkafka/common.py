"""Paths, constants and the error type shared by every module of the package."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # ops/kafka
REPO = HERE.parent.parent
POM = HERE / "pom.xml"
LOG4J_CONFIG = HERE / "log4j2.properties"
DEFAULT_DIR = REPO / "var" / "kafka"
STATE_FILE = "cluster.json"
DEFAULT_PORT = 9092
CONTROLLER_OFFSET = 100  # controller port of node i = client port of node i + 100
INTERNAL_OFFSET = 200  # a secured cluster's inter-broker port of node i = client port + 200
MIN_JAVA = 17

#: C1 only: a 3-broker start took ~14 s with C2 and ~7 s without it on two busy cores.
#: For throughput benchmarks, leave it out (FULL_JIT_JVM_OPTS below).
C1_ONLY = "-XX:TieredStopAtLevel=1"

# Small JVMs: two cores are shared between up to a few brokers and the tests.
# Replace wholesale with INFERSTREAM_KAFKA_JVM_OPTS (a space-separated string).
DEFAULT_JVM_OPTS = [
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",  # no parallel GC threads; pauses are short with a 512m heap
    C1_ONLY,
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
]

TOOL_JVM_OPTS = [
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    C1_ONLY,
    "-Dinferstream.log.level=WARN",
    "-Dinferstream.log.target=SYSTEM_ERR",
]

#: The same JVMs with both of the JVM's compilers (C2 after C1), as Kafka runs in production:
#: for a throughput ceiling. C1 alone starts sooner but made the perf tools' 1 ms transactions
#: 2.3-2.5x slower (ops/bench/kafka_ceiling.py, BENCHMARKS.md).
FULL_JIT_JVM_OPTS = [option for option in DEFAULT_JVM_OPTS if option != C1_ONLY]
FULL_JIT_TOOL_JVM_OPTS = [option for option in TOOL_JVM_OPTS if option != C1_ONLY]


class ClusterError(Exception):
    """An error for the user: `main` prints it as `cluster: error: ...` and exits 2."""


class PortRace(ClusterError):
    """A new cluster on --port auto lost a port to another process before its JVM bound it."""


def log(msg: str) -> None:
    """Progress and warnings go to stderr; stdout is for results."""
    print(msg, file=sys.stderr, flush=True)
