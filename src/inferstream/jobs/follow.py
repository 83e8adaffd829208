"""`OutputFollower`: a job's output lines written while the job runs.

`submit --wait --output` used to read the job's results partition only once the job had
completed: for 1.28 million items that was about 40 s of its 104.5. The follower reads the
job's results in a thread of its own as workers commit them, and writes each task's lines as
soon as every task before it is written (task ids count from 0), so that when the job
completes only its last tasks are left to write.

The lines and their order are `job_results`'s: the first committed result of each task, tasks
in order, items in order. They go to a temporary file beside `path`, renamed into place only
once every task's lines are in it; a job that fails, is cancelled or is given up leaves no file.
A read error (a broker restarting) is read past, up to `finish`'s deadline; a reading that
failed otherwise is done again from the start once the job completed, as `results` reads a job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from types import TracebackType
from typing import IO

from inferstream.config import Config
from inferstream.jobs.errors import OutputIncompleteError
from inferstream.jobs.output import (
    READ_TIMEOUT_S,
    keep_result,
    open_job_partition,
    output_lines,
    write_job_output,
    write_lines,
)
from inferstream.jobs.partial import partial_path
from inferstream.jobs.spool import ResultSpool
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.errors import PartitionReadError
from inferstream.kafka.reader import PartitionReader
from inferstream.schemas import Codec

#: How long `finish` waits for the job's last results once it completed (as `job_results`).
FINISH_TIMEOUT_S = READ_TIMEOUT_S
#: The pause before reading on after a read error (a broker restarting, leadership moving).
RETRY_S = 0.5
#: How much the reading thread's CPU priority is below its process's (a nice value; Linux
#: sets it for one thread): on a host whose cores it shares with the job's worker, the output
#: takes what the job leaves, and catches up at full speed once the job completed.
NICE = 10

log = logging.getLogger(__name__)


class _Enough(Exception):
    """Raised from the reader's idle callback: stop reading."""


class OutputFollower:
    """Writes the output of `job_id` to `path` as JSON lines while the job runs.

    `start` once the job's home partition is known (its first event), `finish` once the job
    completed. Use it as a context manager: leaving it stops the reading and removes the
    partial file, unless `finish` put the file in place.
    """

    def __init__(self, config: Config, job_id: str, path: str, codec: Codec | None = None,
                 clients: KafkaClients = REAL_CLIENTS) -> None:
        self.config, self.job_id, self.path = config, job_id, path
        self.codec = codec or Codec.for_config(config)
        self.clients = clients
        #: output lines written so far
        self.lines = 0
        self._tmp = partial_path(path)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()  # left: write nothing more
        self._total: int | None = None
        self._until: float | None = None  # set by `finish`: read until then at most
        self._finished = False

    def start(self, partition: int | None = None) -> None:
        """Start reading the job's results (`partition`: its home partition, as its events
        say; None: murmur2 of its id); a second call does nothing."""
        self._started(partition)

    def _started(self, partition: int | None) -> threading.Thread:
        if self._thread is None:
            handle = open(self._tmp, "w", encoding="utf-8", newline="")
            thread = threading.Thread(target=self._run, args=(handle, partition),
                                      name=f"output-{self.job_id}", daemon=True)
            thread.start()  # before it is kept: `close` joins only a thread that started
            self._thread = thread
        return self._thread

    def finish(self, total_tasks: int | None, partition: int | None = None,
               timeout_s: float = FINISH_TIMEOUT_S) -> int:
        """The job completed with `total_tasks` tasks: wait until each one's lines are
        written (for `timeout_s` at most), put the file in place and return how many lines
        it has; `OutputIncompleteError` if some task's result was not read by then.

        Where the reading failed for another reason than a read error, or the total is
        unknown (a controller that did not say it), the job's results are read again from the
        start, as `results` reads them, and what stops that read is raised."""
        if self._finished:
            return self.lines
        if self._stop.is_set():
            raise RuntimeError("OutputFollower.finish after close")
        if total_tasks is not None:
            self._total = total_tasks
            self._until = time.monotonic() + timeout_s  # after `_total`: read both
            self._started(partition).join()
            if self._error is None:
                os.replace(self._tmp, self.path)
                self._finished = True
                return self.lines
            if isinstance(self._error, OutputIncompleteError):
                raise self._error
            log.warning("writing the output during the job failed (%s); reading the job's "
                        "results again", self._error)
        self.close()
        self.lines = write_job_output(self.config, self.job_id, self.path, total_tasks,
                                      clients=self.clients, partition=partition)
        self._finished = True
        return self.lines

    def close(self) -> None:
        """Stop reading and remove the partial file (nothing once `finish` moved it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)  # a daemon: one stuck in a call dies with the process
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._tmp)

    def __enter__(self) -> OutputFollower:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _run(self, handle: IO[str], partition: int | None) -> None:
        _lower_priority(NICE)
        try:
            with handle, ResultSpool(self.codec) as spool:
                failed = self._follow(spool, handle, partition)
                if self._stop.is_set():
                    return
                if self._total is not None and len(spool) < self._total:
                    raise OutputIncompleteError(
                        self.job_id, self._total - len(spool), self._total,
                        f" (the last read error: {failed})" if failed else "")
                self.lines += write_lines(output_lines(spool.in_task_order()), handle)
        except BaseException as exc:  # `finish` raises it in the caller, or reads again
            self._error = exc

    def _follow(self, spool: ResultSpool, handle: IO[str], partition: int | None
                ) -> PartitionReadError | None:
        """Read until `_enough`; the last read error read past, if any."""
        consumer, home = open_job_partition(self.config, self.config.topic("results"),
                                            self.job_id, self.clients, partition, follow=True)

        def idle() -> None:
            if self._enough(len(spool)):
                raise _Enough

        failed: PartitionReadError | None = None
        try:
            while not self._enough(len(spool)):
                try:
                    for record in PartitionReader(consumer, [home], follow=True, on_idle=idle):
                        keep_result(spool, self.job_id, record.value)
                        self.lines += write_lines(output_lines(spool.ready()), handle)
                        if self._enough(len(spool)):
                            break
                except PartitionReadError as exc:  # a broker going away: read on from there
                    if failed is None:
                        log.warning("%s; reading on", exc)
                    failed = exc
                    self._stop.wait(RETRY_S)
        except _Enough:
            pass
        finally:
            consumer.close()
        return failed

    def _enough(self, kept: int) -> bool:
        """Left; or the job completed and every task's result is kept, or time is up."""
        if self._stop.is_set():
            return True
        until, total = self._until, self._total
        return until is not None and total is not None and (
            kept >= total or time.monotonic() >= until)


def _lower_priority(by: int) -> None:
    """Lower the calling thread's CPU priority by `by`, where the system allows it."""
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + by)
    except (AttributeError, OSError):  # no per-thread priority here: the output runs as it is
        pass
