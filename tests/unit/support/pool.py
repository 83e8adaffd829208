"""A stand-in for a pool's workers, for tests of the controller and the client."""

from __future__ import annotations

import threading
from typing import Any

from inferstream.config import Config
from inferstream.kafka.settings import partition_for
from inferstream.schemas.records import (
    Prediction,
    Task,
    TaskResult,
    encode_result,
    error_item,
    ok_item,
    read_record,
)
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC


class Responder(threading.Thread):
    """Answers each task of the pool's task topic with `copies` identical results (more than
    one: what an at-least-once worker may leave), every item labelled goldfish or, with
    `error`, failed with it; after `pause_after` tasks it waits for `resume`."""

    def __init__(self, clients: MemoryKafkaClients, config: Config, copies: int = 1,
                 pause_after: int | None = None, error: str | None = None) -> None:
        super().__init__(name="responder", daemon=True)
        self.clients, self.config, self.copies = clients, config, copies
        self.pause_after, self.error = pause_after, error
        self.paused, self.resume, self.done = threading.Event(), threading.Event(), \
            threading.Event()
        self.answered = 0

    def run(self) -> None:
        consumer = self.clients.consumer({"group.id": "responders",
                                          "auto.offset.reset": "earliest"})
        consumer.subscribe([self.config.task_topic()])
        producer = self.clients.producer({})
        while not self.done.is_set():
            for message in consumer.consume(100, timeout=0.01):
                if message.error() is None:
                    self._answer(producer, message.value() or b"")
        consumer.close()

    def stop(self) -> None:
        self.done.set()
        self.resume.set()
        self.join(5)

    def _answer(self, producer: Any, value: bytes) -> None:
        if self.answered == self.pause_after:
            self.paused.set()
            self.resume.wait(10)
        task = read_record(CODEC, value, Task)
        top = [Prediction(class_id=1, label="goldfish", score=0.9)]
        items = [ok_item(item, top) if self.error is None else error_item(item, self.error)
                 for item in task["items"]]
        result = TaskResult(
            job_id=task["job_id"], task_id=task["task_id"], attempt=task["attempt"],
            worker="responder", model=task["model"], items=items, started_at=0,
            finished_at=0, decode_seconds=0.0, inference_seconds=0.0)
        topic = self.config.topic("results")
        partition = partition_for(task["job_id"], self.config.partitions)
        for _ in range(self.copies):
            producer.produce(topic, encode_result(CODEC, result),
                             task["job_id"].encode(), partition=partition)
        self.answered += 1
