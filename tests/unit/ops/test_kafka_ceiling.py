"""ops/bench/kafka_ceiling.py without a broker: its arguments, the sizes of the records it
sends, reading the perf tools' summaries, and the ceiling worked out from them (the run itself
needs a broker and the Kafka jars: `python ops/bench/kafka_ceiling.py --tasks 2000` takes
under a minute)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import kafka_ceiling

from inferstream.kafka.topics import LARGE_MESSAGE_BYTES

BENCH = Path(kafka_ceiling.__file__)

PRODUCER_OUTPUT = """\
13842 records sent, 2768.4 records/sec (4.95 MB/sec), 320.1 ms avg latency, 905.0 ms max.
40000 records sent, 3112.745 records/sec (5.57 MB/sec), 291.29 ms avg latency, 905.00 ms max \
latency, 280 ms 50th, 512 ms 95th, 704 ms 99th, 890 ms 99.9th.
"""

CONSUMER_OUTPUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-12-05 19:58:01:120, 2026-12-05 19:58:09:470, 170.7844, 20.4532, 40000, 4790.4192, \
3105, 5245, 32.5614, 7626.3108
"""


def test_the_defaults_are_imagenet_s_tasks_of_the_controller_s_default_size() -> None:
    args = kafka_ceiling.parse_args([])
    assert args.chunk == 32 and args.tasks * args.chunk >= 1_281_167
    assert args.result_txn_ms == 1 and args.result_producers >= 1
    args = kafka_ceiling.parse_args(["--tasks", "2000", "--bootstrap", "127.0.0.1:9092",
                                     "--inferstream-items-per-s", "3429"])
    assert (args.tasks, args.bootstrap, args.inferstream_items_per_s) == (
        2000, "127.0.0.1:9092", 3429.0)
    usage = subprocess.run([sys.executable, str(BENCH), "--help"],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "ceiling" in usage and "--result-txn-ms" in usage


def test_records_are_the_avro_sizes_of_a_task_and_its_result() -> None:
    small, typical = kafka_ceiling.record_sizes(1), kafka_ceiling.record_sizes(32)
    assert typical.chunk == 32
    # an item's path in the task, its path and five labelled predictions in the result
    assert 40 < (typical.task - small.task) / 31 < 80
    assert 100 < (typical.result - small.result) / 31 < 250
    assert typical.result > typical.task > 32 * 50


def test_the_perf_tools_summaries_are_read() -> None:
    assert kafka_ceiling.parse_producer(PRODUCER_OUTPUT) == (3112.745, 5.57)
    # the consumer's rate without its group's join
    assert kafka_ceiling.parse_consumer(CONSUMER_OUTPUT) == (7626.3108, 32.5614)
    for parse in (kafka_ceiling.parse_producer, kafka_ceiling.parse_consumer):
        with pytest.raises(kafka_ceiling.BenchError, match="no"):
            parse("Exception in thread main: TimeoutException\n")


def test_the_ceiling_serves_the_four_streams_of_a_task_in_turn() -> None:
    def stream(rate: float, broker_us: float) -> kafka_ceiling.Stream:
        return kafka_ceiling.Stream("s", 100, rate, 1.0, broker_us)
    streams = [stream(1000, 200), stream(4000, 50), stream(500, 800), stream(4000, 150)]
    # a task: 1 ms + 0.25 ms + 2 ms + 0.25 ms = 3.5 ms for 35 items
    assert kafka_ceiling.ceiling_items_per_s(35, streams) == pytest.approx(10_000)
    assert kafka_ceiling.broker_us_per_item(32, streams) == pytest.approx(37.5)
    table = kafka_ceiling.table(35, streams, 2500.0)
    assert "ceiling, chunk 35: 10,000 items/s" in table
    assert "inferstream 2,500 items/s = 0.25 of it" in table
    assert "| s | 100 | 500 | 1.0 | 17,500 | 800 |" in table


def test_the_perf_tools_run_with_the_full_jit_unless_told(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """The ceiling is measured with the JVMs production runs (C2: with C1 alone the tools'
    1 ms transactions took 2.3-2.5x as long); `--c1-only` and a user's own settings are kept."""
    from localkafka import jars  # on the path: kafka_ceiling imports localkafka.common
    from localkafka.common import C1_ONLY

    monkeypatch.setattr(jars, "cds_enabled", lambda: False)
    monkeypatch.setattr(jars, "classpath", lambda: "jars/*")
    for name in ("INFERSTREAM_KAFKA_TOOL_JVM_OPTS", "INFERSTREAM_KAFKA_JVM_OPTS"):
        monkeypatch.setenv(name, "")  # recorded, so what use_full_jit sets is undone after
        monkeypatch.delenv(name)
    assert C1_ONLY in jars.java_cmd("java", "Tool", kind="tool")  # ops/kafka's quick start
    kafka_ceiling.use_full_jit(c1_only=True)
    assert C1_ONLY in jars.java_cmd("java", "Tool", kind="tool")
    kafka_ceiling.use_full_jit(c1_only=False)
    for kind in ("tool", "broker"):
        command = jars.java_cmd("java", "Main", kind=kind)
        assert C1_ONLY not in command and "-XX:+UseSerialGC" in command
    monkeypatch.setenv("INFERSTREAM_KAFKA_TOOL_JVM_OPTS", "-Xmx64m")
    kafka_ceiling.use_full_jit(c1_only=False)
    assert jars.java_cmd("java", "Tool", kind="tool")[1:2] == ["-Xmx64m"]


def test_topics_and_producers_take_records_as_large_as_inferstream_s(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A task of a policy's size (thousands of items) is a record of more than the broker's
    default 1 MiB: the ceiling's topics and producers allow what inferstream's do."""
    created: list[Any] = []

    class Admin:
        def __init__(self, conf: dict[str, str]) -> None:
            pass

        def create_topics(self, topics: list[Any]) -> dict[str, Any]:
            created.extend(topics)
            done: Future[None] = Future()
            done.set_result(None)
            return {topic.topic: done for topic in topics}

    commands: list[list[str]] = []

    def tools(*run: list[str]) -> tuple[list[str], float]:
        commands.extend(run)
        return [PRODUCER_OUTPUT] * len(run), 0.5

    monkeypatch.setattr(kafka_ceiling, "AdminClient", Admin)
    runner = kafka_ceiling.PerfRunner("127.0.0.1:9092", 1, "p.")
    monkeypatch.setattr(runner, "_tools", tools)
    runner.create("results", 12)
    runner.produce("result produced", "p.results", 100, 1_176_527, 1, producers=2)
    limit = str(LARGE_MESSAGE_BYTES)
    assert created[0].config == {"max.message.bytes": limit}
    assert len(commands) == 2
    assert all(f"max.request.size={limit}" in command for command in commands)
