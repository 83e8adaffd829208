"""Kafka client settings every role shares: the partitioner all clients agree on, the
confluent-kafka producer and consumer settings, aiokafka keyword arguments."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import murmur2
from confluent_kafka import KafkaError

from inferstream.config import Config

#: librdkafka's "reached the end of the partition" event (enable.partition.eof).
PARTITION_EOF: int = KafkaError._PARTITION_EOF  # noqa: SLF001


def results_partition(task: Mapping[str, Any], partitions: int) -> int:
    """Where a task's result (or decline) goes: the task's home partition, the partition
    of the jobs topic its job arrived on, whose controller replica owns the same partition
    of the results topic; murmur2 of the job id for a task from an older controller, or a
    home that the results topic does not have."""
    home = task.get("home_partition")
    if home is not None and 0 <= home < partitions:
        return int(home)
    return partition_for(str(task["job_id"]), partitions)


def partition_for(key: str, partitions: int) -> int:
    """The partition of `key`, exactly as the Java client and aiokafka's default choose it.

    confluent-kafka's default partitioner (CRC32) disagrees with Java's murmur2, so every
    record that must be co-partitioned by job id (jobs, results, job-events, ledger) is
    produced to the partition this function names.
    """
    return partition_of_key(key.encode(), partitions)


def partition_of_key(key: bytes, partitions: int) -> int:
    """`partition_for` of a key as bytes (a foreign producer's key)."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


def aiokafka_kwargs(config: Config, cls: type, **extra: Any) -> dict[str, Any]:
    """aiokafka keyword arguments for `cls`, pass-through keys it does not accept dropped."""
    accepted = set(inspect.signature(cls).parameters)
    kwargs = {k: v for k, v in config.aiokafka_config().items() if k in accepted}
    kwargs.update(extra)
    return kwargs


#: How old a worker's view of its task topic's partitions may get (milliseconds).
TASK_METADATA_MAX_AGE_MS = 30_000


def worker_consumer_kwargs(config: Config, group_id: str, client_id: str,
                           strategies: tuple[Any, ...]) -> dict[str, Any]:
    """aiokafka consumer arguments of a pool's worker: manual commits, read_committed, the
    group settings of `config.worker` and the partition assignors `strategies`."""
    opts = config.worker
    kwargs = aiokafka_kwargs(
        config, AIOKafkaConsumer, group_id=group_id, client_id=client_id,
        group_instance_id=opts.instance_id, enable_auto_commit=False,
        auto_offset_reset="earliest", isolation_level="read_committed",
        session_timeout_ms=opts.session_timeout_ms,
        heartbeat_interval_ms=opts.heartbeat_interval_ms,
        max_poll_interval_ms=opts.max_poll_interval_ms,
        # As Java's consumer: a member may take its listener's time to rejoin (a worker
        # opens a transactional producer per assigned partition); aiokafka's default, the
        # session timeout, evicts a member that takes over 20 partitions, again and again.
        rebalance_timeout_ms=opts.max_poll_interval_ms,
        max_partition_fetch_bytes=16 * 1024 * 1024,
        partition_assignment_strategy=strategies)
    # Partitions added to the task topic reach the group when its leader's metadata shows
    # them (it then rebalances): within 30 s, not aiokafka's default 5 minutes. A
    # pass-through `metadata.max.age.ms` wins.
    kwargs.setdefault("metadata_max_age_ms", TASK_METADATA_MAX_AGE_MS)
    return kwargs


#: librdkafka's own log lines go through Python logging under this name. A program that set
#: up no logging (a script or notebook using the SDK) shows none of them: Python's last-resort
#: handler printed each connection retry to stderr, some 65 lines "FAIL ... Connection
#: refused" for one SDK call with no broker answering, before the one error that says so.
#: Where logging is set up, they go to its handlers as any library's lines.
LIBRDKAFKA_LOG = logging.getLogger("inferstream.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())


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


#: How long a librdkafka consumer waits for a broker's answer before it gives the connection
#: up and asks the others where the partition's leader is now: Java's consumer's
#: request.timeout.ms. At librdkafka's default (60 s), a consumer of a partition whose leader
#: hung (SIGSTOP, a frozen VM) read nothing for 70 s (30 s: 41 s), the cluster having moved
#: the leadership after 5 s; a fetch asks the broker to wait at most 5 s (`kafka.reader`).
CONSUMER_SOCKET_TIMEOUT_MS = 30_000


def consumer_config(config: Config, group_id: str | None, **extra: Any) -> dict[str, Any]:
    """confluent-kafka consumer settings: manual commits, read_committed, a broker that does
    not answer given up after `CONSUMER_SOCKET_TIMEOUT_MS`."""
    settings: dict[str, Any] = {
        "logger": LIBRDKAFKA_LOG,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "fetch.message.max.bytes": 16 * 1024 * 1024,
        "socket.timeout.ms": CONSUMER_SOCKET_TIMEOUT_MS,
    }
    if group_id is not None:
        settings["group.id"] = group_id
    else:
        settings["group.id"] = config.reader_group()
    settings.update(extra)
    return config.confluent_config(**settings)


#: How long a role's poll waits for records when there are none (seconds).
POLL_TIMEOUT_S = 0.2


def poll_timeout_s(idle_exit_s: float | None) -> float:
    """The poll timeout of a role that exits after `idle_exit_s` idle (bounded mode):
    at most a quarter of that limit, so it exits on time rather than a poll late."""
    if idle_exit_s is None:
        return POLL_TIMEOUT_S
    return max(0.01, min(POLL_TIMEOUT_S, idle_exit_s / 4))
