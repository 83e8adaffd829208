"""Benchmark: what this machine's broker can carry of inferstream's pattern (issue 30.2).

Kafka's own perf tools (org.apache.kafka.tools.ProducerPerformance and ConsumerPerformance,
kafka-producer-perf-test and kafka-consumer-perf-test, from the jars ops/kafka resolves, run by
`ops/kafka/cluster tool`) on one broker (started here, or `--bootstrap` of a running one), with
records of the sizes inferstream writes: a Task of `--chunk` ImageNet-like paths (what the
controller produces) and its TaskResult of top-5 predictions (what a worker produces), both
Avro as the codec encodes them. Each item crosses the broker four times: its task produced
(transactionally, the controller's rounds: `--task-txn-ms`) and consumed (read_committed, by
a worker), its result produced (transactionally: a worker commits each task on its own, so
`--result-txn-ms` is the shortest transaction the tool makes, 1 ms, by `--result-producers`
producers side by side as a worker's members commit theirs) and consumed
(read_committed, by the controller). The four run one after another on the same broker, so
the ceiling in items/s is `chunk / sum(1 / records_per_s)`: the broker and the 2 cores
serving the four streams in turn, with the perf tools' own JVMs as the clients. The broker's
CPU per record of each stream (its JVM's /proc/PID/stat utime + stime) is reported beside.
`--inferstream-items-per-s X` (ops/bench/imagenet_job.py's figure) gives X as a fraction of
the ceiling. Compare like with like: `--chunk` must be the job's items a task (32, the
controller's `default_chunk_size`, for `imagenet_job.py --chunk-size 32`; about 8,160 for its
`--sysinfo` job, whose policy sizes the tasks: items / tasks issued), since a task of
thousands of items costs the broker a fraction of 32-item tasks' per item. The topics and
producers take records of up to inferstream's `LARGE_MESSAGE_BYTES`, as its own do. The
tools' JVMs (and a broker started here) run with the JVM's full JIT, as production's do;
`--c1-only` measures with ops/kafka's quick-start JVMs instead (C1 alone).
A broker given by `--bootstrap` runs as it was started: for the full JIT start it with
`INFERSTREAM_KAFKA_JVM_OPTS` set (localkafka.common.FULL_JIT_JVM_OPTS).

    .venv/bin/python ops/bench/kafka_ceiling.py [--chunk 32] [--tasks 40037]
        [--bootstrap HOST:PORT] [--inferstream-items-per-s X] [--c1-only]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))

from failover_common import start_broker
from imagenet_items import item_name
from imagenet_job import banner, listening_pid
from localkafka.common import FULL_JIT_JVM_OPTS, FULL_JIT_TOOL_JVM_OPTS
from p1_stack import CLUSTER, BenchError
from secure_throughput import cpu_s

from inferstream.kafka.topics import LARGE_MESSAGE_BYTES, LARGE_TOPIC_CONFIGS
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    Job,
    Prediction,
    TaskItem,
    TaskResult,
    new_task,
    now_ms,
    ok_item,
)

PRODUCER = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER = "org.apache.kafka.tools.ConsumerPerformance"
_PRODUCED = re.compile(r"(\d+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\)")


@dataclass(frozen=True)
class RecordSizes:
    """Bytes of the Avro values inferstream writes for one task of `chunk` items."""

    chunk: int
    task: int
    result: int


def record_sizes(chunk: int, top_k: int = 5) -> RecordSizes:
    """Encode a Task of `chunk` ImageNet-like paths and its TaskResult of `top_k`
    predictions, as the controller and a sim worker write them."""
    from inferstream.models.base import imagenet_labels  # imports torch: not for --help

    codec, labels = Codec(None), imagenet_labels()
    job = Job(job_id="20261205-194800-2832ecaa", model="sim:ms=0", model_version=None,
              pool="default", top_k=top_k, chunk_size=0, inputs=["@/data/imagenet.txt"],
              inline_items=[], submitted_at=now_ms(), submitter="bench", output_path=None,
              priority=0, weight=1.0)
    items = [TaskItem(index=i, name=item_name(i), data=None) for i in range(chunk)]
    task = new_task(job, 0, items, home_partition=0)
    task["deadline_ms"] = now_ms()

    def top(i: int) -> list[Prediction]:
        return [Prediction(class_id=(i + k) % 1000, label=labels[(i + k) % 1000],
                           score=0.5 ** (k + 1)) for k in range(top_k)]
    result = TaskResult(job_id=job["job_id"], task_id=0, attempt=1, worker="imagenet-w-3",
                        model=job["model"], model_version="sim",
                        items=[ok_item(item, top(item["index"])) for item in items],
                        started_at=now_ms(), finished_at=now_ms(), decode_seconds=0.001,
                        inference_seconds=0.001)
    return RecordSizes(chunk, len(codec.encode("Task", task)),
                       len(codec.encode("TaskResult", result)))


@dataclass(frozen=True)
class Stream:
    """One perf-tool run: records/s, MB/s, broker CPU microseconds per record."""

    name: str
    record_bytes: int
    records_per_s: float
    mb_per_s: float
    broker_us_per_record: float


def parse_producer(output: str) -> tuple[float, float]:
    """(records/s, MB/s) of ProducerPerformance's final summary line."""
    found = _PRODUCED.findall(output)
    if not found:
        raise BenchError(f"no summary from the producer perf tool: {output[-2000:]}")
    _, rate, mb = found[-1]
    return float(rate), float(mb)


def parse_consumer(output: str) -> tuple[float, float]:
    """(records/s, MB/s) of ConsumerPerformance's stats line, fetch time only (the
    group's join left out)."""
    lines = [line for line in output.splitlines() if line.strip()]
    for number, line in enumerate(lines[:-1]):
        header = [cell.strip() for cell in line.split(",")]
        if "fetch.nMsg.sec" in header:
            values = dict(zip(header, (c.strip() for c in lines[number + 1].split(",")),
                              strict=False))
            return float(values["fetch.nMsg.sec"]), float(values["fetch.MB.sec"])
    raise BenchError(f"no stats from the consumer perf tool: {output[-2000:]}")


def ceiling_items_per_s(chunk: int, streams: list[Stream]) -> float:
    """Items/s when one broker serves every stream of a task's life in turn."""
    return chunk / sum(1 / stream.records_per_s for stream in streams)


def broker_us_per_item(chunk: int, streams: list[Stream]) -> float:
    """The broker's CPU microseconds per item over the four streams."""
    return sum(stream.broker_us_per_record for stream in streams) / chunk


class PerfRunner:
    """Runs the perf tools against one broker, reading its JVM's CPU around each."""

    def __init__(self, bootstrap: str, broker_pid: int, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.broker_pid = broker_pid
        self.prefix = prefix

    def create(self, topic: str, partitions: int) -> str:
        name = f"{self.prefix}{topic}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        # as inferstream's task and result topics: a task of a policy's size (thousands of
        # items) is a record of more than the broker's default 1 MiB
        new = NewTopic(name, partitions, 1, config=dict(LARGE_TOPIC_CONFIGS))
        for future in admin.create_topics([new]).values():
            future.result(timeout=60)
        return name

    def _tools(self, *commands: list[str]) -> tuple[list[str], float]:
        """Run perf tools side by side; their outputs and the broker's CPU seconds meanwhile."""
        before = cpu_s(self.broker_pid)
        with tempfile.TemporaryDirectory(prefix="perf-") as tmp:
            logs = [Path(tmp) / f"{n}.out" for n in range(len(commands))]
            procs = []
            for command, log in zip(commands, logs, strict=True):
                with log.open("wb") as out:
                    procs.append(subprocess.Popen([*CLUSTER, "tool", *command], stdout=out,
                                                  stderr=subprocess.STDOUT))
            codes = [proc.wait(timeout=900) for proc in procs]
            outputs = [log.read_text(errors="replace") for log in logs]
        if any(codes):
            raise BenchError(f"{commands[0][0]} exited {codes}: {outputs[0][-2000:]}")
        return outputs, cpu_s(self.broker_pid) - before

    def produce(self, name: str, topic: str, records: int, size: int, txn_ms: int,
                producers: int = 1) -> Stream:
        """`producers` transactional producers side by side, `records` in all; their
        records/s and MB/s summed."""
        share = records // producers
        outputs, cpu = self._tools(*([
            PRODUCER, "--bootstrap-server", self.bootstrap, "--topic", topic,
            "--num-records", str(share), "--record-size", str(size), "--throughput", "-1",
            "--transactional-id", f"{topic}-perf-{n}", "--transaction-duration-ms",
            str(txn_ms), "--command-property", "acks=all", "enable.idempotence=true",
            f"max.request.size={LARGE_MESSAGE_BYTES}"]
            for n in range(producers)))
        rates = [parse_producer(output) for output in outputs]
        return Stream(name, size, sum(r for r, _ in rates), sum(mb for _, mb in rates),
                      cpu * 1e6 / (share * producers))

    def consume(self, name: str, topic: str, records: int, size: int) -> Stream:
        (output,), cpu = self._tools([
            CONSUMER, "--bootstrap-server", self.bootstrap, "--topic", topic,
            "--num-records", str(records), "--group", f"{topic}-perf-{uuid.uuid4().hex[:6]}",
            "--timeout", "60000", "--command-property", "isolation.level=read_committed"])
        rate, mb = parse_consumer(output)
        return Stream(name, size, rate, mb, cpu * 1e6 / records)


def measure(args: argparse.Namespace, runner: PerfRunner) -> list[Stream]:
    """A task's life on the broker: its task and its result, each produced and consumed."""
    sizes = record_sizes(args.chunk)
    tasks = runner.create("tasks", args.task_partitions)
    results = runner.create("results", args.partitions)
    answered = args.tasks // args.result_producers * args.result_producers
    streams = [runner.produce("task produced", tasks, args.tasks, sizes.task, args.task_txn_ms),
               runner.consume("task consumed", tasks, args.tasks, sizes.task),
               runner.produce(f"result produced ({args.result_producers} producers)", results,
                              answered, sizes.result, args.result_txn_ms,
                              args.result_producers),
               runner.consume("result consumed", results, answered, sizes.result)]
    for stream in streams:
        print(stream, file=sys.stderr, flush=True)
    return streams


def table(chunk: int, streams: list[Stream], measured: float | None) -> str:
    lines = ["| stream | record bytes | records/s | MB/s | items/s (x chunk) | "
             "broker CPU us per record |", "|---|---:|---:|---:|---:|---:|"]
    for s in streams:
        lines.append(f"| {s.name} | {s.record_bytes:,} | {s.records_per_s:,.0f} | "
                     f"{s.mb_per_s:.1f} | {s.records_per_s * chunk:,.0f} | "
                     f"{s.broker_us_per_record:.0f} |")
    ceiling = ceiling_items_per_s(chunk, streams)
    lines.append(f"\nceiling, chunk {chunk}: {ceiling:,.0f} items/s, the broker's CPU "
                 f"{broker_us_per_item(chunk, streams):.1f} us per item")
    if measured is not None:
        lines.append(f"inferstream {measured:,.0f} items/s = {measured / ceiling:.2f} of it")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ops/bench/kafka_ceiling.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunk", type=int, default=32,
                        help="items per task: the controller's default_chunk_size, or the "
                        "job's own (items / tasks issued) where a policy sized its tasks")
    parser.add_argument("--tasks", type=int, default=40_037,
                        help="records of each stream (ImageNet's 1,281,167 items in tasks of 32)")
    parser.add_argument("--task-partitions", type=int, default=120)
    parser.add_argument("--partitions", type=int, default=12,
                        help="partitions of the results topic")
    parser.add_argument("--task-txn-ms", type=int, default=100,
                        help="transaction length of the task producer (a controller's round)")
    parser.add_argument("--result-txn-ms", type=int, default=1,
                        help="transaction length of the result producer (a worker: per task)")
    parser.add_argument("--result-producers", type=int, default=4,
                        help="result producers side by side, each its own transactional id "
                        "(a worker's members commit their tasks in parallel)")
    parser.add_argument("--bootstrap", default="",
                        help="a running broker's HOST:PORT on this machine (default: start "
                        "one with ops/kafka/cluster)")
    parser.add_argument("--inferstream-items-per-s", type=float, default=None,
                        help="inferstream's measured rate, given as a fraction of the ceiling")
    parser.add_argument("--c1-only", action="store_true",
                        help="the perf tools' JVMs (and the broker this starts) with C1 alone, "
                        "ops/kafka's quick-start default: the ceilings measured before 2026-12-06")
    return parser.parse_args(argv)


def use_full_jit(c1_only: bool) -> None:
    """The perf tools and a broker started here run with the JVM's full JIT (C2), as
    production clients and brokers do, unless `c1_only` or the environment says otherwise:
    with C1 alone the tools' 1 ms transactions took 2.3-2.5x as long, and the ceiling halved."""
    if not c1_only:
        os.environ.setdefault("INFERSTREAM_KAFKA_TOOL_JVM_OPTS", " ".join(FULL_JIT_TOOL_JVM_OPTS))
        os.environ.setdefault("INFERSTREAM_KAFKA_JVM_OPTS", " ".join(FULL_JIT_JVM_OPTS))


def main(argv: list[str] | None = None) -> list[Stream]:
    given = sys.argv[1:] if argv is None else argv
    args = parse_args(given)
    print(banner("ops/bench/kafka_ceiling.py", given), flush=True)
    use_full_jit(args.c1_only)
    prefix = f"ceiling-{uuid.uuid4().hex[:6]}."
    with tempfile.TemporaryDirectory(prefix="kafka-ceiling-") as tmp:
        broker = None if args.bootstrap else start_broker(Path(tmp) / "kafka")
        try:
            bootstrap = broker.bootstrap if broker else args.bootstrap
            pid = broker.pid() if broker else listening_pid(bootstrap)
            if pid is None:
                raise BenchError("the broker has no process")
            streams = measure(args, PerfRunner(bootstrap, pid, prefix))
        finally:
            if broker:
                broker.clean()
    print(table(args.chunk, streams, args.inferstream_items_per_s))
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return streams


if __name__ == "__main__":
    main()
