"""A job's embeddings written by `results --format npz` and read back with numpy: 200,000
vectors of 1,280 floats, the time and peak RSS of each side; with `--jsonl`, the same job
through the JSON lines output for comparison.

The job's results are produced straight onto the results topic (32 items a task, as workers
commit them, each vector drawn from its task's seed) with its COMPLETED event, as
client_memory.py does, so that only the writer and the reader are measured. The reader checks
the rows: one per item, in index order, every 1,000th vector equal to the one produced. Each
measured process reports its own peak RSS (VmHWM): `ru_maxrss` of a child forked from this
process, which holds the producer's queue, would count this process's RSS at the fork.

    python ops/bench/npz_results.py [--items 200000] [--dim 1280] [--jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_memory import flags, produce_record
from failover_common import source_version, start_broker

from inferstream.config import Config
from inferstream.jobs.ids import new_job_id
from inferstream.kafka.settings import partition_for
from inferstream.kafka.topics import ensure_topics
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    JobEvent,
    JobEventType,
    TaskItem,
    TaskResult,
    now_ms,
    ok_item,
)

CHUNK = 32
CHECK_EVERY = 1000


def vectors(task_id: int, rows: int, dim: int) -> Any:
    """The vectors of task `task_id`'s items: float32, from the task's seed."""
    return np.random.default_rng(task_id).standard_normal((rows, dim), dtype=np.float32)


def produce_job(config: Config, items: int, dim: int) -> str:
    """A finished job of `items` embeddings of `dim` floats on the results topic; its id."""
    codec, job_id = Codec(None), new_job_id()
    producer = Producer({"bootstrap.servers": config.bootstrap_servers, "linger.ms": 50})
    part = partition_for(job_id, config.partitions)
    tasks = (items + CHUNK - 1) // CHUNK
    for task_id in range(tasks):
        first = task_id * CHUNK
        names = [TaskItem(index=i, name=f"/data/photos/{i:08d}.jpg", data=None)
                 for i in range(first, min(first + CHUNK, items))]
        rows = vectors(task_id, len(names), dim).tolist()
        result = TaskResult(job_id=job_id, task_id=task_id, attempt=1, worker="bench-worker",
                            model=f"sim:ms=0,embedding={dim}", model_version="sim",
                            items=[ok_item(n, embedding=r) for n, r in zip(names, rows,
                                                                           strict=True)],
                            started_at=now_ms(), finished_at=now_ms(), decode_seconds=0.0,
                            inference_seconds=0.0)
        produce_record(producer, config.topic("results"), part, job_id,
                 codec.encode("TaskResult", result))
    event = JobEvent(job_id=job_id, type=JobEventType.COMPLETED, timestamp=now_ms(),
                     model=f"sim:ms=0,embedding={dim}", model_version=None, reason=None,
                     total_items=items, total_tasks=tasks, done_items=items, ok_items=items,
                     error_items=0, rate_items_per_s=None, home_partition=None,
                     priority=0, weight=1.0)
    produce_record(producer, config.topic("job-events"), part, job_id,
             codec.encode("JobEvent", event))
    producer.flush(300)
    return job_id


#: `inferstream ARGS...` in a process that writes its peak RSS to the file argv[1] names
CLI = ("import sys\nfrom inferstream.cli import main\ncode = main(sys.argv[2:])\n"
       "from pathlib import Path\nPath(sys.argv[1]).write_text(next(line.split()[1] for line "
       "in Path('/proc/self/status').read_text().splitlines() if line.startswith('VmHWM:')))\n"
       "sys.exit(code)\n")


def measured(cmd: list[str], peak: Path) -> tuple[float, float]:
    """Run `cmd`, which writes its peak RSS in KiB to `peak`; its wall seconds and that
    peak in MiB."""
    started = time.perf_counter()
    done = subprocess.run(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} exited {done.returncode}")
    return time.perf_counter() - started, int(peak.read_text()) / 1024


def write_peak(path: str) -> None:
    """This process's peak RSS in KiB (VmHWM), to `path`."""
    status = Path("/proc/self/status").read_text().splitlines()
    Path(path).write_text(next(line.split()[1] for line in status if line.startswith("VmHWM:")))


def read_npz(path: str, items: int, dim: int) -> None:
    """Load the embeddings as a user would, and check them."""
    data = np.load(path)
    embedding, index = data["embedding"], data["index"]
    _check(embedding, index, items, dim)


def read_jsonl(path: str, items: int, dim: int) -> None:
    """Parse the JSON lines into one float32 array, and check it."""
    embedding = np.empty((items, dim), np.float32)
    with open(path, encoding="utf-8") as handle:
        for row, line in enumerate(handle):
            embedding[row] = json.loads(line)["embedding"]
    _check(embedding, np.arange(items), items, dim)


def _check(embedding: Any, index: Any, items: int, dim: int) -> None:
    if embedding.shape != (items, dim) or index.tolist() != list(range(items)):
        raise SystemExit(f"read {embedding.shape}, index in order: "
                         f"{index.tolist() == list(range(items))}")
    for row in range(0, items, CHECK_EVERY):
        task_id, offset = divmod(row, CHUNK)
        expected = vectors(task_id, min(CHUNK, items - task_id * CHUNK), dim)[offset]
        if not np.array_equal(embedding[row], expected):
            raise SystemExit(f"row {row} differs from the vector produced")


def measure(config: Config, job_id: str, work: Path, args: argparse.Namespace,
            fmt: str) -> dict[str, float]:
    out, peak = work / f"out.{fmt}", work / "peak"
    write_s, write_mib = measured([sys.executable, "-c", CLI, str(peak), "results", job_id,
                                   "--format", fmt, "--output", str(out), *flags(config)], peak)
    read_s, read_mib = measured([sys.executable, __file__, f"--read-{fmt}", str(out),
                                 "--items", str(args.items), "--dim", str(args.dim),
                                 "--peak", str(peak)], peak)
    size_mib = out.stat().st_size / 2**20
    out.unlink()
    return {"write_s": write_s, "write_mib": write_mib, "read_s": read_s,
            "read_mib": read_mib, "size_mib": size_mib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=1280)
    parser.add_argument("--jsonl", action="store_true", help="measure JSON lines too")
    parser.add_argument("--read-npz", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--read-jsonl", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--peak", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak:  # a measured reader, or with nothing to read the readers' baseline
        if args.read_npz or args.read_jsonl:
            reader = read_npz if args.read_npz else read_jsonl
            reader(args.read_npz or args.read_jsonl, args.items, args.dim)
        write_peak(args.peak)
        return
    with tempfile.TemporaryDirectory(prefix="npz-results-") as tmp:
        work = Path(tmp)
        _, base_mib = measured([sys.executable, __file__, "--peak", str(work / "peak")],
                               work / "peak")
        broker = start_broker(work / "kafka")
        try:
            config = Config(bootstrap_servers=broker.bootstrap, partitions=4, task_partitions=4,
                            topic_prefix=f"npz{uuid.uuid4().hex[:6]}.")
            ensure_topics(config)
            started = time.perf_counter()
            job_id = produce_job(config, args.items, args.dim)
            print(f"produced in {time.perf_counter() - started:.0f} s", flush=True)
            runs = {fmt: measure(config, job_id, work, args, fmt)
                    for fmt in ("npz", "jsonl") if fmt == "npz" or args.jsonl}
        finally:
            broker.clean()
    print(f"code {source_version()}; {args.items:,} embeddings of {args.dim} floats; "
          f"a reader that reads nothing (python, numpy and this script's imports): "
          f"{base_mib:.0f} MiB")
    print("| format | write s | write peak MiB | file MiB | read s | read peak MiB |\n"
          "|---|---:|---:|---:|---:|---:|")
    for fmt, run in runs.items():
        print(f"| {fmt} | {run['write_s']:.1f} | {run['write_mib']:.0f} | "
              f"{run['size_mib']:.0f} | {run['read_s']:.1f} | {run['read_mib']:.0f} |")


if __name__ == "__main__":
    main()
