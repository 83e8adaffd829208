"""The worker's source: its pool's task topic in, task results (or declines) out.

A task record becomes the pipeline's task; or, at once, a dead letter (it cannot be read), a
commit with no result (the task-control topic says the controller wants none: `controls.py`),
or a `TaskDeclined` (no model of this worker serves it, in the version it names, nor can it
load one on demand). A run
becomes one `TaskResult` on the results partition of the task's home (one too large for a
record goes in pieces before it: `oversize.py`); a run refused because
its model could not load on demand becomes a `TaskDeclined`; one whose job ended while it ran
(a cancel) is committed with no result, so that what a cancelled job's readers find is what
its counts say, but for the results of the moment the cancel took to reach the worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients, Outgoing, Record
from inferstream.kafka.deadletters import dead_letter
from inferstream.kafka.settings import results_partition
from inferstream.models import LoadedModel
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import (
    Task,
    TaskDeclined,
    TaskResult,
    encodable,
    encode_result,
    now_ms,
    read_record,
    task_ref,
)
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loader import ModelLoader
from inferstream.serving.loop import Worker
from inferstream.serving.pipeline import TaskRun
from inferstream.serving.source import Source, WorkerContext
from inferstream.worker.controls import TaskControls
from inferstream.worker.oversize import result_records

log = logging.getLogger(__name__)

#: The outputs' bytes from which a task's result is encoded on a thread, not the loop (about
#: 30 ms of encoding).
RENDER_ON_THREAD_BYTES = 1 << 20


def new_worker(config: Config, models: LoadedModel | Sequence[LoadedModel], *,
               hooks: WorkerHooks | None = None, codec: Codec | None = None,
               clients: KafkaClients = REAL_CLIENTS, loader: ModelLoader | None = None
               ) -> Worker:
    """A worker of `config.pool`: its task topic in, task results out (`inferstream worker`).

    `loader` loads the models that tasks ask for where `load_on_demand` is set."""
    codec = codec or Codec.for_config(config)
    return Worker(config, models, TaskSource(config, codec, clients), hooks=hooks, codec=codec,
                  clients=clients, loader=loader)


class TaskSource(Source):
    """The pool's task topic, read from its beginning, answered on the results topic."""

    def __init__(self, config: Config, codec: Codec, clients: KafkaClients = REAL_CLIENTS
                 ) -> None:
        self.config = config
        self.codec = codec
        self.group_id = config.worker_group()
        self.topic = config.task_topic()
        self.results = config.topic("results")
        self.dlq = config.topic("dlq")
        self.outputs = (self.results, self.dlq)
        #: the follower of the controller's task-control topic (what tasks to skip)
        self.controls = TaskControls(config, clients, codec)

    async def start(self, worker: WorkerContext) -> None:
        await super().start(worker)
        self.controls.start()

    async def stop(self) -> None:
        await asyncio.to_thread(self.controls.stop)

    def admit(self, record: Record) -> Task | list[Outgoing]:
        """The task; a dead letter if it cannot be read; nothing if it is to be skipped; a
        decline if no model of this worker serves it (now or loaded on demand)."""
        hooks = self.worker.hooks
        try:
            task = read_record(self.codec, record.value or b"", Task)
        except SchemaError as exc:
            hooks.after_dead_letter(str(exc))
            return [self._dead_letter(record, f"undecodable task record: {exc}")]
        skip = self.controls.skip_reason(task)
        if skip is not None:  # committed with no result: the controller wants none
            hooks.after_skip(task["model"])
            log.debug("skipped job=%s task=%d attempt=%d: %s", task["job_id"], task["task_id"],
                      task["attempt"], skip)
            return []
        refusal = self.worker.served.refusal(task_ref(task))
        if refusal is not None:
            return [self._declined(task, refusal)]
        return task

    def render(self, run: TaskRun, record: Record) -> list[Outgoing]:
        """The task's result; its decline where its model could not load; nothing where its
        job ended (cancelled, say) while it ran."""
        task = run.task
        if run.refusal is not None:
            return [self._declined(task, run.refusal)]
        ended = self.controls.job_ended(task["job_id"])
        if ended is not None:  # cancelled while it ran: committed with no result, as if
            self.worker.hooks.after_skip(task["model"])  # skipped when it came
            log.info("no result for job=%s task=%d attempt=%d: %s", task["job_id"],
                     task["task_id"], task["attempt"], ended)
            return []
        result = TaskResult(
            job_id=task["job_id"], task_id=task["task_id"], attempt=task["attempt"],
            worker=self.worker.worker_id, model=run.model, model_version=run.model_version,
            items=[outcome for outcome in run.outcomes if outcome is not None],
            started_at=int(run.started_at * 1000), finished_at=int(run.finished_at * 1000),
            decode_seconds=run.decode_seconds, inference_seconds=run.inference_seconds,
        )
        values = result_records(self.codec, result, encode_result(self.codec, result))
        if len(values) > 1 and self.controls.job_ended(task["job_id"]) is not None:
            return []  # cancelled while its pieces were made (seconds): no result after all
        return [self._result(task, value, first=n < len(values) - 1)  # its pieces first
                for n, value in enumerate(values)]

    def render_on_thread(self, run: TaskRun) -> bool:
        """Whether the run's outputs take `RENDER_ON_THREAD_BYTES` or more (embeddings,
        tensors): their result's encoding goes to a thread."""
        size = 0
        for outcome in run.outcomes:
            if outcome is not None:
                size += 4 * len(outcome["embedding"] or ()) + sum(
                    len(tensor["data"]) for tensor in outcome["tensors"])
                if size >= RENDER_ON_THREAD_BYTES:
                    return True
        return False

    def _declined(self, task: Task, reason: str) -> Outgoing:
        """The TaskDeclined that answers `task`, committed with its offset like a result."""
        worker = self.worker
        worker.hooks.after_decline(task["model"])
        log.info("declined job=%s task=%d model=%s: %s", task["job_id"], task["task_id"],
                 task_ref(task), reason)
        declined = TaskDeclined(
            job_id=task["job_id"], task_id=task["task_id"], attempt=task["attempt"],
            worker=worker.worker_id, model=task["model"],
            served_models=worker.served.references,
            reason=encodable(f"worker {worker.worker_id} {reason}"),  # a path in it
            task=self.codec.encode("Task", task), declined_at=now_ms())
        return self._result(task, self.codec.encode("TaskDeclined", declined))

    def _result(self, task: Task, value: bytes, first: bool = False) -> Outgoing:
        partition = results_partition(task, self.worker.partitions[self.results])
        return Outgoing(self.results, partition, task["job_id"].encode(), value, first=first)

    def _dead_letter(self, record: Record, reason: str) -> Outgoing:
        return dead_letter(self.codec, self.dlq, self.worker.partitions[self.dlq],
                           topic=record.topic, partition=record.partition,
                           offset=record.offset, reason=reason, value=record.value,
                           consumer=self.worker.worker_id, key=record.key,
                           origin_timestamp_ms=record.timestamp)
