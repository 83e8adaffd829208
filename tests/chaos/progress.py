"""The job's progress as a chaos run sees it: its events, followed on a thread through broker
faults (`ProgressFollower`)."""

from __future__ import annotations

import threading
import time

from inferstream.client.client import JobStatus
from inferstream.config import Config
from inferstream.jobs.output import open_job_partition
from inferstream.kafka.errors import PartitionReadError
from inferstream.kafka.reader import PartitionReader
from inferstream.schemas import Codec, SchemaError


class ProgressFollower:
    """Follows the job's events on a thread; `status` is the latest one."""

    def __init__(self, config: Config, job_id: str) -> None:
        self.config = config
        self.job_id = job_id
        self.status: JobStatus | None = None
        self.read_errors: list[str] = []
        self._codec = Codec.for_config(config)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-events", daemon=True)

    def start(self) -> ProgressFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    @property
    def done_items(self) -> int:
        return self.status.done_items if self.status else 0

    def _run(self) -> None:
        consumer, partition = None, 0
        while consumer is None and not self._stop.is_set():
            try:
                consumer, partition = open_job_partition(
                    self.config, self.config.topic("job-events"), self.job_id, follow=True)
            except Exception as exc:  # a broker going away: note it, try again
                self.read_errors.append(repr(exc))
                time.sleep(1)
        try:
            while not self._stop.is_set():
                try:
                    for record in PartitionReader(consumer, [partition], follow=True,
                                                  timeout_s=1.0):
                        self._take(record.value)
                except PartitionReadError as exc:  # a broker going away: note it, read on
                    self.read_errors.append(str(exc))
                    time.sleep(0.5)
        finally:
            if consumer is not None:
                consumer.close()

    def _take(self, value: bytes) -> None:
        try:
            event = self._codec.decode(value, expected="JobEvent")
        except SchemaError:
            return
        if event["job_id"] == self.job_id:
            self.status = JobStatus.from_event(event)
