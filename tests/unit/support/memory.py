"""The one configuration of the unit tests, and the in-memory broker holding its topics."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from inferstream.config import Config, ControllerConfig, StreamConfig, WorkerConfig
from inferstream.kafka.topics import topic_specs
from inferstream.schemas import Codec
from inferstream.testing import MemoryBroker

CODEC = Codec(None)
#: The model of the default worker: a simulated one that answers at once.
MODEL = "sim:ms=0"

#: The pool's group as a job book sees it by default: worker -> its task partitions.
POOL = {"w1": [0, 1], "w2": [2, 3]}

#: heartbeats of 50 ms: a fenced partition is taken back 3 of them later (`ownership`)
WORKER = {"models": (MODEL,), "worker_id": "w1", "max_wait_ms": 1.0, "decode_threads": 2,
          "heartbeat_interval_ms": 50}
CONTROLLER = {"watchdog_s": None, "progress_interval_s": 0.0}


def make_config(*, worker: Mapping[str, Any] | None = None,
                controller: Mapping[str, Any] | None = None,
                stream: Mapping[str, Any] | None = None, **fields: Any) -> Config:
    """A Config for the in-memory broker: topic prefix `t.`, 2 partitions per topic and task
    topic; worker `w1` serving `MODEL` with batches that wait 1 ms, heartbeats of 50 ms; a
    controller with no watchdog that reports progress every round. `worker`, `controller`
    and `stream` change settings of those sections, `fields` the Config's own
    (`partitions=8`, `pool="gpu"`).

    No role has an idle exit: a test runs them until its outcome (`Running.until`)."""
    base: dict[str, Any] = {"bootstrap_servers": "mem:1", "topic_prefix": "t.",
                            "partitions": 2, "task_partitions": 2}
    return Config(**{**base, **fields},
                  worker=WorkerConfig(**{**WORKER, **(worker or {})}),
                  controller=ControllerConfig(**{**CONTROLLER, **(controller or {})}),
                  stream=StreamConfig(**(stream or {})))


def as_worker(config: Config, worker_id: str, **settings: Any) -> Config:
    """`config` for another worker: `worker_id`, and `settings` changed in its section."""
    return dataclasses.replace(config, worker=dataclasses.replace(
        config.worker, worker_id=worker_id, **settings))


def new_broker(config: Config | None = None) -> MemoryBroker:
    """An in-memory broker holding the topics of `config` (default: `make_config()`'s)."""
    broker = MemoryBroker()
    broker.create_topics(topic_specs(config or make_config()))
    return broker
