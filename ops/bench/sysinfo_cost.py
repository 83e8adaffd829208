"""What system-information collection costs a worker: CPU ms per sample, and its share.

(a) One sample, alone: the worker-side snapshot (per-model windows full of batches, the queue
of 12 owned partitions), every default collector, the sample's assembly and its Avro
encoding, timed with the process's CPU clock, `--samples` times in a row.
(b) In a busy worker: a `sim:ms=1` worker on the in-memory transport works through a steady
backlog for `--seconds` at the default 2 s interval; the publisher's own count of CPU spent
collecting (its thread's clock) against the whole process's CPU over the run.

    PYTHONPATH=src:. python ops/bench/sysinfo_cost.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from aiokafka import TopicPartition

from inferstream.config import DEFAULT_COLLECTORS, Config, WorkerConfig
from inferstream.kafka.topics import topic_specs
from inferstream.models import load_model
from inferstream.schemas import Codec
from inferstream.schemas.records import Job, TaskItem, new_task
from inferstream.serving.collectors import (
    PerformanceWindows,
    QueueProbe,
    SampleContext,
    ServedModel,
    load_collectors,
)
from inferstream.serving.samples import build_sample, run_collectors
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.worker import new_worker

CODEC = Codec(None)
TOPIC = "inferstream.tasks.default"
#: The models the sampled worker serves: a built-in and a simulated one.
SERVED = (ServedModel("resnet50", "resnet50-11ad3fa6.pth"), ServedModel("sim:ms=1", "sim"))


class OwnedPartitions:
    """The two consumer calls a sample makes, for 12 owned partitions 500 records deep."""

    def __init__(self, count: int = 12) -> None:
        self.owned = {TopicPartition(TOPIC, p) for p in range(count)}

    def assignment(self) -> set[TopicPartition]:
        return self.owned

    def last_stable_offset(self, partition: Any) -> int:
        return 500

    async def committed(self, partition: Any) -> int:
        return 0


async def one_sample(windows: PerformanceWindows, probe: QueueProbe, collectors: Any,
                     consumer: Any) -> float:
    """CPU seconds of one whole sample, the worker side and the collectors together."""
    started = time.process_time()
    context = SampleContext(worker="bench", pool="default", device="cpu", interval_s=2.0,
                            served=SERVED, performance=windows.snapshot(SERVED),
                            queue=await probe.state(consumer, 96))
    fields, _, _ = run_collectors(collectors, context)
    CODEC.encode("SysInfoSample", build_sample(context, fields, "host", []))
    return time.process_time() - started


async def alone(samples: int) -> list[float]:
    windows, probe = PerformanceWindows(), QueueProbe()
    now = time.monotonic()
    for i in range(4000):  # two models at 200 batches/s each over the 10 s window
        for model in SERVED:
            windows.record(model, 32, 0.005, now - 10 + i * 0.0025)
    collectors = load_collectors(DEFAULT_COLLECTORS)
    consumer = OwnedPartitions()
    await one_sample(windows, probe, collectors, consumer)  # psutil's first reading
    return [await one_sample(windows, probe, collectors, consumer) for _ in range(samples)]


def busy_worker(seconds: float) -> tuple[float, float, int]:
    """(collect CPU s, process CPU s, samples) of a worker busy for about `seconds`."""
    config = Config(bootstrap_servers="mem:1", partitions=4, task_partitions=4, worker=WorkerConfig(
        models=("sim:ms=1",), worker_id="bench", idle_exit_s=0.5, decode_threads=2))
    broker = MemoryBroker()
    broker.create_topics(topic_specs(config))
    items = int(seconds * 900)  # a little more than sim:ms=1 runs in `seconds`
    job = Job(job_id="20250101-000000-0000beef", model="sim:ms=1", model_version=None,
              pool="default", top_k=1, chunk_size=32, inputs=[], inline_items=[], submitted_at=0,
              submitter="bench", output_path=None, priority=0, weight=1.0)
    for task_id in range(items // 32):
        names = [TaskItem(index=task_id * 32 + i, name=f"item-{task_id}-{i}", data=None)
                 for i in range(32)]
        broker.produce(config.task_topic(), task_id % 4, job["job_id"].encode(),
                       CODEC.encode("Task", new_task(job, task_id, names)))
    worker = new_worker(config, load_model("sim:ms=1"), codec=CODEC,
                        clients=MemoryKafkaClients(broker))
    started = time.process_time()
    asyncio.run(worker.run())
    sent = len(broker.values(config.topic("sysinfo")))
    return worker.sysinfo.collect_cpu_s, time.process_time() - started, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    costs = sorted(asyncio.run(alone(args.samples)))
    mean_ms = statistics.fmean(costs) * 1000
    p95_ms = costs[int(0.95 * len(costs)) - 1] * 1000
    print(f"(a) one sample: mean {mean_ms:.3f} ms CPU, median "
          f"{statistics.median(costs) * 1000:.3f} ms, p95 {p95_ms:.3f} ms "
          f"({args.samples} samples); at the 2 s interval {mean_ms / 2000 * 100:.3f} % of "
          "one core")
    collect_s, process_s, sent = busy_worker(args.seconds)
    print(f"(b) busy sim:ms=1 worker: {sent} samples, collectors {collect_s * 1000:.1f} ms "
          f"CPU ({collect_s / max(sent, 1) * 1000:.3f} ms per sample) of {process_s:.2f} s "
          f"process CPU: {collect_s / process_s * 100:.3f} % of the worker's CPU")


if __name__ == "__main__":
    main()
