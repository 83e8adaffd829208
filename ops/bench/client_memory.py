"""Memory of the client and the controller: peak RSS of `inferstream results JOB --output`
for a large job, and the controller's RSS at rest.

The job's results are produced straight onto the results topic (as workers would have
committed them, 32 items a task, five predictions an item, ImageNet-like path names) with
its COMPLETED event, so that the measurement is the reader alone. `--src DIR` runs the
measured processes on another checkout's `src/` (e.g. the code before a change, from
`git archive`), the producing side always on this one.

    python ops/bench/client_memory.py [--items 200000] [--src DIR]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from failover_common import source_version, start_broker
from p1_cpu import status_mib

from inferstream.config import Config
from inferstream.jobs.ids import new_job_id
from inferstream.kafka.settings import partition_for
from inferstream.kafka.topics import ensure_topics
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    JobEvent,
    JobEventType,
    Prediction,
    TaskItem,
    TaskResult,
    now_ms,
    ok_item,
)

CHUNK = 32
TOP = [Prediction(class_id=c, label=f"label of class {c}", score=0.1) for c in range(5)]
REST_S = 15.0


def produce_job(config: Config, items: int) -> str:
    """A finished job of `items` items on the results and job-events topics; its id."""
    codec = Codec(None)
    job_id = new_job_id()
    producer = Producer({"bootstrap.servers": config.bootstrap_servers, "linger.ms": 50})
    results, events = config.topic("results"), config.topic("job-events")
    part = partition_for(job_id, config.partitions)
    tasks = (items + CHUNK - 1) // CHUNK
    for task_id in range(tasks):
        first = task_id * CHUNK
        task_items = [TaskItem(index=i, name=f"/data/imagenet/train/n{i % 1000:08d}/"
                               f"n{i % 1000:08d}_{i:07d}.JPEG", data=None)
                      for i in range(first, min(first + CHUNK, items))]
        result = TaskResult(job_id=job_id, task_id=task_id, attempt=1, worker="bench-worker",
                            model="sim:ms=0", model_version="sim",
                            items=[ok_item(i, TOP) for i in task_items],
                            started_at=now_ms(), finished_at=now_ms(), decode_seconds=0.0,
                            inference_seconds=0.0)
        produce_record(producer, results, part, job_id, codec.encode("TaskResult", result))
    event = JobEvent(job_id=job_id, type=JobEventType.COMPLETED, timestamp=now_ms(),
                     model="sim:ms=0", model_version=None, reason=None, total_items=items,
                     total_tasks=tasks, done_items=items, ok_items=items, error_items=0,
                     rate_items_per_s=None, home_partition=None,
                     priority=0, weight=1.0)
    produce_record(producer, events, part, job_id, codec.encode("JobEvent", event))
    producer.flush(120)
    return job_id


def produce_record(producer: Producer, topic: str, part: int, key: str, value: bytes) -> None:
    """Produce one record, waiting while the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, value, key.encode(), partition=part)
            return
        except BufferError:
            producer.poll(0.1)


def child_env(src: Path) -> dict[str, str]:
    # restart off: the controller's own process is measured, not a supervisor's
    return {**os.environ, "PYTHONPATH": str(src), "PYTHONUNBUFFERED": "1",
            "INFERSTREAM_RESTART": "off"}


def flags(config: Config) -> list[str]:
    return ["--bootstrap-servers", config.bootstrap_servers, "--topic-prefix",
            config.topic_prefix, "--partitions", str(config.partitions)]


def results_peak_mib(config: Config, job_id: str, src: Path, out: Path) -> tuple[float, int]:
    """Peak RSS of `inferstream results JOB --output out`, and the lines it wrote."""
    cmd = [sys.executable, "-m", "inferstream", "results", job_id, "--output", str(out),
           *flags(config)]
    proc = subprocess.Popen(cmd, env=child_env(src))
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"results exited {os.waitstatus_to_exitcode(status)}")
    with out.open("rb") as handle:
        lines = sum(1 for _ in handle)
    return usage.ru_maxrss / 1024, lines  # ru_maxrss is in KiB on Linux


def controller_rest_mib(config: Config, src: Path, log: Path) -> tuple[float, float]:
    """(RSS, peak RSS) of a controller with nothing to do, `REST_S` after it started."""
    cmd = [sys.executable, "-m", "inferstream", "controller", *flags(config)]
    with log.open("w") as handle:
        proc = subprocess.Popen(cmd, env=child_env(src), stdout=handle, stderr=handle)
    try:
        time.sleep(REST_S)
        return status_mib(proc.pid), status_mib(proc.pid, "VmHWM")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[2] / "src")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="client-memory-") as tmp:
        work = Path(tmp)
        broker = start_broker(work / "kafka")
        try:
            config = Config(bootstrap_servers=broker.bootstrap, partitions=4, task_partitions=4,
                            topic_prefix=f"mem{uuid.uuid4().hex[:6]}.")
            ensure_topics(config)
            job_id = produce_job(config, args.items)
            peak, lines = results_peak_mib(config, job_id, args.src, work / "out.jsonl")
            rest, rest_peak = controller_rest_mib(config, args.src, work / "controller.log")
        finally:
            broker.clean()
    print(f"code {source_version()}, measured src {args.src}")
    print("| what | RSS MiB |\n|---|---:|")
    print(f"| `results` of {args.items:,} items ({lines:,} lines), peak | {peak:.0f} |")
    print(f"| controller at rest ({REST_S:.0f} s after start), now / peak | "
          f"{rest:.0f} / {rest_peak:.0f} |")


if __name__ == "__main__":
    main()
