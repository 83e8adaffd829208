"""The Python SDK: submit jobs, follow them, read their results.

    client = Client(load_config())
    job = client.submit("efficientnet_lite0", ["photos/"])
    job.wait(on_progress=print)
    for line in job.results(): ...
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any

from inferstream.client.stalls import QUIET_S, StallWatch
from inferstream.client.submission import absolute, check_submission, read_inline, whoami
from inferstream.client.submitted import first_submission, job_submitted
from inferstream.config import Config
from inferstream.errors import ConfigError
from inferstream.jobs.errors import (
    InlineTooLargeError,
    InvalidJobError,
    JobCancelledError,
    JobFailedError,
    JobNotAcceptedError,
    JobNotDeliveredError,
    JobRejectedError,
    JobTimeoutError,
    UnknownJobError,
    short_repr,
)
from inferstream.jobs.ids import new_job_id
from inferstream.jobs.output import job_results, open_job_partition, output_lines
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients, SyncProducer
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.groups import describe_with
from inferstream.kafka.preflight import reachable_partitions
from inferstream.kafka.reader import PartitionReader
from inferstream.kafka.settings import LIBRDKAFKA_LOG, partition_for, producer_config
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES
from inferstream.models import UnknownModelError, check_model_name
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import Job as JobRecord
from inferstream.schemas.records import (
    JobEvent,
    JobEventType,
    TaskControl,
    TaskControlReason,
    TaskResult,
    now_ms,
    read_record,
)

if TYPE_CHECKING:
    from inferstream.jobs.npz import NpzWritten

#: Before the controller's first event a job is SUBMITTED; then its latest event's type.
SUBMITTED = "SUBMITTED"
FINAL = (JobEventType.COMPLETED, JobEventType.REJECTED, JobEventType.FAILED,
         JobEventType.CANCELLED)


@dataclass(frozen=True)
class JobStatus:
    """What the latest JobEvent of a job says."""

    job_id: str
    state: str  # SUBMITTED or a JobEventType
    model: str | None = None
    #: the repository model's version the job runs on, once chosen; None: none (yet)
    model_version: int | None = None
    total_items: int | None = None
    total_tasks: int | None = None
    done_items: int = 0
    ok_items: int = 0
    error_items: int = 0
    rate_items_per_s: float | None = None
    reason: str | None = None
    updated_at_ms: int = 0
    #: where the job's results are (the partition it arrived on); None: murmur2 of its id
    home_partition: int | None = None
    #: as submitted (known from the controller's first event on)
    priority: int = 0
    weight: float = 1.0
    #: the pool it was submitted to, where the jobs topic was read (a listing: `status`
    #: without JOB, `top --jobs`); None: not read (a job's events do not name it)
    pool: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINAL

    @classmethod
    def from_event(cls, event: JobEvent) -> JobStatus:
        return cls(
            job_id=event["job_id"], state=str(event["type"]), model=event["model"],
            model_version=event["model_version"], total_items=event["total_items"],
            total_tasks=event["total_tasks"], done_items=event["done_items"],
            ok_items=event["ok_items"], error_items=event["error_items"],
            rate_items_per_s=event["rate_items_per_s"],
            reason=event["reason"], updated_at_ms=event["timestamp"],
            home_partition=event["home_partition"], priority=event["priority"],
            weight=event["weight"],
        )

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Job:
    """A submitted job: follow its events, wait for it, read its output. `pool` and
    `model` are what it was submitted with, where known (for messages about a wait)."""

    def __init__(self, client: Client, job_id: str, pool: str | None = None,
                 model: str | None = None) -> None:
        self.client = client
        self.job_id = job_id
        self.pool = pool or client.config.pool
        self.model = model
        self._status = JobStatus(job_id, SUBMITTED, model=model)

    def __repr__(self) -> str:
        return f"Job(job_id={self.job_id!r}, pool={self.pool!r}, model={self.model!r})"

    def events(self, follow: bool = True, timeout_s: float | None = None,
               on_idle: Callable[[], None] | None = None) -> Iterator[JobStatus]:
        """This job's events in order; with `follow`, waits for new ones until final,
        calling `on_idle` while none arrives."""
        config = self.client.config
        consumer, partition = open_job_partition(config, config.topic("job-events"),
                                                 self.job_id, self.client.clients,
                                                 follow=follow)
        try:
            for record in PartitionReader(consumer, [partition], follow=follow,
                                          timeout_s=timeout_s, on_idle=on_idle):
                try:
                    event = read_record(self.client.codec, record.value, JobEvent)
                except SchemaError:
                    continue
                if event["job_id"] != self.job_id:
                    continue
                self._status = JobStatus.from_event(event)
                yield self._status
                if self._status.finished:
                    return
        finally:
            consumer.close()

    def wait_final(self, timeout_s: float | None = None) -> JobStatus:
        """Follow the job's events until one is final or `timeout_s` passes; the last status
        either way (no error for a job that did not complete)."""
        for _ in self.events(follow=True, timeout_s=timeout_s):
            pass
        return self._status

    def progress(self) -> JobStatus:
        """The latest known status (reads the events written so far): SUBMITTED before a
        controller accepted the job; UnknownJobError when the job was never submitted."""
        for _ in self.events(follow=False):
            pass
        client = self.client
        if self._status.state == SUBMITTED and not job_submitted(
                client.config, self.job_id, client.codec, client.clients):
            raise UnknownJobError(self.job_id, client.config.topic("jobs"))
        return self._status

    def wait(self, timeout_s: float | None = None,
             on_progress: Callable[[JobStatus], None] | None = None,
             on_notice: Callable[[str], None] | None = None,
             quiet_s: float = QUIET_S) -> JobStatus:
        """Block until the job completes; raise if it is rejected, fails or times out. It
        does not ask whether the id names a job (`progress` does): a job produced by another
        client with its own partitioner is not where its id's partition says.

        While the job shows no event for `quiet_s`, `on_notice` is told what it waits for
        (no controller accepted it, no live worker in its pool), once per stall.
        InvalidJobError for a `timeout_s` that is no positive number (None: no limit).
        """
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(
                timeout_s, int | float) or not timeout_s > 0):  # NaN compares false
            raise InvalidJobError("timeout_s", timeout_s, "a positive number of seconds, or "
                                  "None for no limit")
        watch = StallWatch(self.job_id, self.pool, self.model, self.live_workers,
                           on_notice or (lambda _line: None), quiet_s)
        for status in self.events(follow=True, timeout_s=timeout_s, on_idle=watch.idle):
            watch.seen(status)
            if on_progress is not None:
                on_progress(status)
        status = self._status
        if status.state == JobEventType.REJECTED:
            raise JobRejectedError(self.job_id, status.reason or "no reason given")
        if status.state == JobEventType.FAILED:
            raise JobFailedError(self.job_id, status.reason or "no reason given")
        if status.state == JobEventType.CANCELLED:
            raise JobCancelledError(self.job_id, status.done_items, status.total_items)
        if status.state != JobEventType.COMPLETED:
            raise JobTimeoutError(self.job_id, timeout_s or 0.0, str(status.state),
                                  status.done_items)
        return status

    def cancel(self) -> None:
        """Ask the job's controller to cancel it: the job ends CANCELLED with the counts of
        what was done, and workers skip its remaining tasks. Goes to the job's partition of
        the jobs topic (murmur2 of its id, as `submit` sends it), behind the job itself."""
        control = TaskControl(job_id=self.job_id, task_id=-1, attempt=0,
                              reason=TaskControlReason.CANCELLED, at=now_ms())
        self.client._produce(self.client.config.topic("jobs"), self.job_id,  # noqa: SLF001
                             self.client.codec.encode("TaskControl", control), "the cancel")

    def live_workers(self) -> int | None:
        """How many workers the job's pool has now; None when that cannot be known."""
        config = self.client.config
        new_admin = partial(self.client.clients.admin,
                            config.confluent_config(logger=LIBRDKAFKA_LOG))
        try:
            return len(describe_with(new_admin)(config.worker_group(self.pool)))
        except Exception:  # a hint only: unknown is not zero
            return None

    def results(self) -> Iterator[dict[str, Any]]:
        """One output line per input item so far (all of them once COMPLETED), in item
        order; an error for a job unknown, not accepted yet, or rejected."""
        return output_lines(self._task_results())

    def write_npz(self, path: str) -> NpzWritten:
        """Write the outputs so far (as `results`) to `path` as numpy arrays, one row per
        item (`jobs.npz`: `numpy.load(path)["embedding"]`); imports numpy."""
        from inferstream.jobs.npz import write_npz

        return write_npz(self._task_results(), path)

    def _task_results(self) -> Iterator[TaskResult]:
        status = self._status if self._status.finished else self.progress()
        if status.state == SUBMITTED:
            raise JobNotAcceptedError(self.job_id)
        if status.state == JobEventType.REJECTED:
            raise JobRejectedError(self.job_id, status.reason or "no reason given")
        total = status.total_tasks if status.state == JobEventType.COMPLETED else None
        client = self.client
        return job_results(client.config, self.job_id, total, client.codec, client.clients,
                           status.home_partition)


class Client:
    """Produces jobs and reads their events and results, for any number of threads. `close()`,
    or the end of a `with` block, lets go of the producer it holds (a thread sending on it
    finishes); each read opens and closes its own consumer."""

    def __init__(self, config: Config, codec: Codec | None = None,
                 clients: KafkaClients = REAL_CLIENTS) -> None:
        if not isinstance(config, Config):  # was an AttributeError from deep inside
            raise ConfigError("Client needs a Config, as inferstream.config.load_config() "
                              f"makes (the environment, a file or flags), got {short_repr(config)}")
        self.config = config
        self.codec = codec or Codec.for_config(config)
        self.clients = clients
        self._producer: SyncProducer | None = None
        self._producer_lock = threading.Lock()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Deliver what is still queued (up to `connect_timeout_s`) and let go of the
        producer; a second call does nothing. The client and its jobs stay usable: a later
        call opens what it needs again (then close it again)."""
        with self._producer_lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(self.config.connect_timeout_s)

    def submit(self, model: str, inputs: Sequence[str | os.PathLike[str]], *,
               chunk_size: int | None = None, top_k: int = 5, inline: bool = False,
               pool: str | None = None, output_path: str | os.PathLike[str] | None = None,
               job_id: str | None = None, priority: int = 0, weight: float = 1.0) -> Job:
        """Produce a job of `model`, `NAME` or `NAME:VERSION` (pinned to that version of a
        repository model); `inline` sends the files' bytes instead of their paths.

        `chunk_size` None: the controller cuts tasks of the policy's task size for the pool.
        `priority`: a higher one's tasks go before any lower one's in the pool; `weight`:
        the job's share among the running jobs of its priority (see docs/design.md).
        `job_id` None: a new id; one given must be of `ids.JOB_ID_RULE` and name no job
        submitted before (the job's partition of the jobs topic is read to tell).
        InvalidJobError for an argument of the wrong type or out of its range, a job id
        refused; InputError for an inline file that cannot be read; all before anything is
        sent. A model name not well-formed goes: the controller rejects it, saying why."""
        check_submission(model, inputs, pool, output_path, job_id,
                         (chunk_size, top_k, weight, priority))
        try:
            name, version = check_model_name(model)
        except UnknownModelError:
            name, version = model, None
        record = JobRecord(
            job_id=job_id or new_job_id(), model=name, model_version=version,
            pool=pool or self.config.pool, top_k=top_k, chunk_size=chunk_size or 0,
            inputs=[] if inline else [absolute(i) for i in inputs],
            inline_items=read_inline(inputs) if inline else [], submitted_at=now_ms(),
            submitter=whoami(),
            output_path=os.path.abspath(output_path) if output_path else None,
            priority=priority, weight=weight,
        )
        value = self.codec.encode("Job", record)
        if len(value) > LARGE_MESSAGE_BYTES - 64 * 1024:
            raise InlineTooLargeError(
                f"inline job is {len(value)} bytes; the limit is {LARGE_MESSAGE_BYTES}: "
                "submit paths on a shared filesystem or split the job")
        if job_id is None:
            self._produce(self.config.topic("jobs"), record["job_id"], value, "the submission")
        else:
            self._submit_as(job_id, value)
        return Job(self, record["job_id"], record["pool"], model)

    def _submit_as(self, job_id: str, value: bytes) -> None:
        """Send job `value` of an id the caller chose; InvalidJobError where a job of that
        id was submitted before, or by another client at the same time (`_check_first`)."""
        if job_submitted(self.config, job_id, self.codec, self.clients):
            raise InvalidJobError("job_id", job_id, "an id no job was submitted with before "
                                  "(leave it out for a new one)")
        offset = self._produce(self.config.topic("jobs"), job_id, value, "the submission")
        self._check_first(job_id, offset)

    def _check_first(self, job_id: str, offset: int | None) -> None:
        """InvalidJobError where another client's job of the same id came before this one's
        record at `offset`: both had found the id free, and the controller runs the first
        and ignores the second, whose `wait` and `results` were the other job's."""
        first = first_submission(self.config, job_id, self.codec, self.clients)
        if offset is not None and first is not None and first < offset:
            raise InvalidJobError("job_id", job_id, "an id no other job was submitted with: "
                                  "another client submitted a job of this id at the same "
                                  "time, and the controller runs that one (leave it out for "
                                  "a new one)")

    def job(self, job_id: str) -> Job:
        """The job of id `job_id` (any id a job was submitted with, by any client)."""
        if not isinstance(job_id, str) or not job_id:
            raise InvalidJobError("job_id", job_id, "a job's id (a str)")
        return Job(self, job_id)

    def _produce(self, topic: str, key: str, value: bytes, what: str = "the record"
                 ) -> int | None:
        """`value` to `topic` under the job id `key`, delivered before it returns, and the
        offset it was written at (None: not told); JobNotDeliveredError naming `what` it
        was where the cluster did not take it."""
        with self._producer_lock:  # one producer, whichever threads ask; close() may take it
            if self._producer is None:
                self._producer = self.clients.producer(producer_config(self.config))
            producer = self._producer
        try:
            partitions = reachable_partitions(self.config, producer, topic, self.clients)
        except KafkaSetupError:  # it holds nothing; kept, it retried until close() logged it all
            with self._producer_lock:
                if self._producer is producer:
                    self._producer = None
            raise
        errors: list[Any] = []
        offsets: list[int | None] = []

        def delivered(err: Any, msg: Any) -> None:
            if err:
                errors.append(err)
            else:
                offsets.append(msg.offset())

        producer.produce(topic, value, key.encode(),
                         partition=partition_for(key, len(partitions)), on_delivery=delivered)
        remaining = producer.flush(60)
        if remaining or errors:
            reason = "; ".join(e.str() if hasattr(e, "str") else str(e) for e in errors)
            raise JobNotDeliveredError(key, what, f"{topic}: {reason or 'no answer in 60 s'}",
                                       refused=bool(errors))
        return next((offset for offset in offsets if offset is not None and offset >= 0), None)
