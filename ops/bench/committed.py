"""What the benchmarks read back: the committed records of a fleet's topics.

`CommittedResults` reads the results topic with `isolation.level=read_committed` on a
background thread and stamps each TaskResult with the moment it became visible;
`TaskPlacements` reads the task topic the same way, for the partition each task went to;
`audit` counts one job's duplicate and lost items in what was read.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Self

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))

from p1_stack import BenchError

from inferstream.config import Config
from inferstream.jobs.output import keep_result
from inferstream.jobs.pieces import WholeResults
from inferstream.kafka.settings import PARTITION_EOF, consumer_config
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import Task, read_record


@dataclass(frozen=True)
class SeenResult:
    """A committed TaskResult and when the reader saw it (epoch seconds)."""

    seen_at: float
    job_id: str
    task_id: int
    attempt: int
    worker: str
    finished_at: float
    names: tuple[str, ...]


class _CommittedReader:
    """Reads every partition of `topic`, read_committed, from the beginning, on a thread;
    `_keep` takes each record's value and partition."""

    def __init__(self, config: Config, topic: str) -> None:
        self.config = config
        self.topic = topic
        self.codec = Codec.for_config(config)
        self._end: dict[int, int] = {}
        self.failure: Exception | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"read-{topic}", daemon=True)

    def _consumer(self) -> Consumer:
        return Consumer(consumer_config(self.config, f"bench-reader-{uuid.uuid4().hex[:6]}", **{
            "enable.partition.eof": True, "fetch.wait.max.ms": 50}))

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _partitions(self, consumer: Consumer) -> list[int]:
        """The topic's partitions, once metadata of the freshly created topic has them."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            meta = consumer.list_topics(self.topic, timeout=30).topics.get(self.topic)
            if meta is not None and meta.error is None and meta.partitions:
                return sorted(meta.partitions)
            time.sleep(0.2)
        raise BenchError(f"topic {self.topic} has no partitions")

    def _run(self) -> None:
        try:
            self._read()
        except Exception as exc:
            self.failure = exc
            raise

    def _read(self) -> None:
        consumer = self._consumer()
        partitions = self._partitions(consumer)
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
        try:
            while not self._stop.is_set():
                message = consumer.poll(0.05)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == PARTITION_EOF:
                        with self._lock:
                            self._end[message.partition() or 0] = message.offset() or 0
                    continue
                self._keep(message.value() or b"", message.partition() or 0)
        finally:
            consumer.close()

    def _keep(self, value: bytes, partition: int) -> None:
        raise NotImplementedError

    def read_to_end(self, timeout_s: float = 120) -> None:
        """Wait until the reader has passed every committed record written so far."""
        probe = self._consumer()
        try:
            high = {p: probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1]
                    for p in self._partitions(probe)}
        finally:
            probe.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.failure is not None:
                raise BenchError(f"reader of {self.topic} failed: {self.failure!r}")
            with self._lock:
                if all(self._end.get(p, -1) >= h for p, h in high.items() if h > 0):
                    return
            time.sleep(0.1)
        raise BenchError(f"reader of {self.topic} did not reach {high} in {timeout_s}s: "
                         f"{self._end}")


class CommittedResults(_CommittedReader):
    """The TaskResults of `<prefix>results`, each stamped with when it became visible: read
    as a job's output reads them (`keep_result`: a result in pieces is whole with its last
    record), every attempt kept."""

    def __init__(self, config: Config) -> None:
        super().__init__(config, config.topic("results"))
        self._whole = WholeResults(self.codec)
        self.seen: list[SeenResult] = []

    def _keep(self, value: bytes, partition: int) -> None:
        seen_at = time.time()
        keep_result(self._whole, None, value)
        records = [SeenResult(
            seen_at, result["job_id"], result["task_id"], result["attempt"], result["worker"],
            _seconds(result["finished_at"]), tuple(item["name"] for item in result["items"]))
            for result in self._whole.take()]
        with self._lock:
            self.seen.extend(records)

    def snapshot(self) -> list[SeenResult]:
        with self._lock:
            return list(self.seen)

    def done_items(self, job_id: str) -> int:
        """Items of `job_id` with a committed result (each task counted once)."""
        tasks = {r.task_id: len(r.names) for r in self.snapshot() if r.job_id == job_id}
        return sum(tasks.values())



def _seconds(finished: datetime | int) -> float:
    return finished.timestamp() if isinstance(finished, datetime) else finished / 1000


class TaskPlacements(_CommittedReader):
    """The partition of `pool`'s task topic each (job, task, attempt) was issued to: a paced
    task goes wherever its worker has room, not where `task_partition` would put it."""

    def __init__(self, config: Config, pool: str | None = None) -> None:
        super().__init__(config, config.task_topic(pool))
        self._placed: dict[tuple[str, int, int], int] = {}

    def _keep(self, value: bytes, partition: int) -> None:
        try:
            task = read_record(self.codec, value, Task)
        except SchemaError:
            return
        with self._lock:
            self._placed[(task["job_id"], task["task_id"], task["attempt"])] = partition

    def partition_of(self, result: SeenResult) -> int | None:
        """Where `result`'s task attempt was issued; None if not read yet."""
        with self._lock:
            return self._placed.get((result.job_id, result.task_id, result.attempt))


def audit(results: list[SeenResult], job_id: str, expected: list[str]) -> dict[str, int]:
    """Duplicate (job, task, attempt) records and lost or extra items of one job."""
    mine = [r for r in results if r.job_id == job_id]
    keys = Counter((r.task_id, r.attempt) for r in mine)
    got = {name for r in mine for name in r.names}
    return {
        "records": len(mine),
        "duplicate_records": sum(c - 1 for c in keys.values()),
        "duplicated_tasks": sum(1 for c in keys.values() if c > 1),
        "duplicate_items": sum(len(r.names) for r in mine) - len(got),
        "lost_items": len(set(expected) - got),
        "unknown_items": len(got - set(expected)),
    }
