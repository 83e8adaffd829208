"""Shared Kafka plumbing: the partitioner every client agrees on, and client factories."""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from aiokafka.partitioner import murmur2
from confluent_kafka import KafkaError

from inferstream.config import Config
from inferstream.streams.errors import StuckCallError

T = TypeVar("T")

#: librdkafka's "reached the end of the partition" event (enable.partition.eof).
PARTITION_EOF: int = KafkaError._PARTITION_EOF  # noqa: SLF001


def partition_for(key: str, partitions: int) -> int:
    """The partition of `key`, exactly as the Java client and aiokafka's default choose it.

    confluent-kafka's default partitioner (CRC32) disagrees with Java's murmur2, so every
    record that must be co-partitioned by job id (jobs, results, job-events, ledger) is
    produced to the partition this function names.
    """
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def aiokafka_kwargs(config: Config, cls: type, **extra: Any) -> dict[str, Any]:
    """aiokafka keyword arguments for `cls`, pass-through keys it does not accept dropped."""
    accepted = set(inspect.signature(cls).parameters)
    kwargs = {k: v for k, v in config.aiokafka_config().items() if k in accepted}
    kwargs.update(extra)
    return kwargs


#: librdkafka's own log lines go through Python logging under this name.
LIBRDKAFKA_LOG = logging.getLogger("inferstream.librdkafka")


def producer_config(config: Config, **extra: Any) -> dict[str, Any]:
    """confluent-kafka producer settings: idempotent, acks=all, Java-compatible partitioner."""
    return config.confluent_config(
        **{
            "logger": LIBRDKAFKA_LOG,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "message.max.bytes": 16 * 1024 * 1024,
            "linger.ms": 5,
            **extra,
        }
    )


def consumer_config(config: Config, group_id: str | None, **extra: Any) -> dict[str, Any]:
    """confluent-kafka consumer settings: manual commits, read_committed."""
    settings: dict[str, Any] = {
        "logger": LIBRDKAFKA_LOG,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "fetch.message.max.bytes": 16 * 1024 * 1024,
    }
    if group_id is not None:
        settings["group.id"] = group_id
    else:
        settings["group.id"] = "inferstream-reader-unused"
    settings.update(extra)
    return config.confluent_config(**settings)


def dead_letter_record(topic: str, partition: int, offset: int, reason: str,
                       value: bytes | None, consumer: str, key: bytes | None = None,
                       timestamp_ms: int = 0) -> dict[str, Any]:
    """A DeadLetter record: an unreadable record with where it came from and why."""
    return {
        "origin_topic": topic, "origin_partition": partition, "origin_offset": offset,
        "reason": reason, "key": key, "value": value or b"",
        "timestamp": timestamp_ms if timestamp_ms > 0 else int(time.time() * 1000),
        "consumer": consumer,
    }


def call_with_deadline(call: Callable[..., T], *args: Any, deadline_s: float) -> T:
    """`call(*args)` on a helper thread; StuckCallError if it has not returned in `deadline_s`.

    For librdkafka calls that can block past their own timeout. Known case:
    `send_offsets_to_transaction` after the group coordinator's broker dies, in librdkafka up
    to at least 2.16.0 (https://github.com/confluentinc/librdkafka/issues/5456 and
    https://github.com/confluentinc/librdkafka/issues/5511, fix proposed in
    https://github.com/confluentinc/librdkafka/pull/5457). The chaos suite hit it as a
    controller that stopped for good after a broker kill -9. Drop this wrapper once the
    confluent-kafka we pin ships a librdkafka with that fix.

    A call that is given up on keeps running on its daemon thread, which also keeps its
    client object alive; the caller must stop using that client (for a transactional
    producer: replace it, and the new one's init_transactions fences the old one).
    """
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call(*args))
        except BaseException as exc:  # re-raised on the caller's thread below
            failure.append(exc)

    name = getattr(call, "__name__", "call")
    thread = threading.Thread(target=run, name=f"deadline-{name}", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        raise StuckCallError(f"{name} did not return in {deadline_s:g}s")
    if failure:
        raise failure[0]
    return outcome[0]  # type: ignore[no-any-return]
