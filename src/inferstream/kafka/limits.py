"""How large a record each topic takes: its `max.message.bytes`, as the cluster says.

A record over its topic's limit never commits: the producer or the broker refuses it
(MESSAGE_TOO_LARGE) in every attempt of the transaction that holds it, so the member that
writes it would give its partition up after its commit attempts, take it again, redo the
record and fail again, for ever, with every later record of the partition behind it. Where
what a role writes is as large as its input or its model make it (a stream's outputs and
dead letters: `stream.source`), it learns its topics' limits at its start and writes a record
that would not fit as an error that says so. (A job's results are held to inferstream's own
results topic's limit by `worker.oversize`.)
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients, Outgoing
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES, admin_client

log = logging.getLogger(__name__)

#: Room left in a record for its batch's framing (its key and headers are counted apart).
RECORD_HEADROOM = 64 * 1024
#: Kafka's default `max.message.bytes` (the brokers' `message.max.bytes`): assumed for a
#: topic whose own this principal may not read.
KAFKA_DEFAULT_RECORD_BYTES = 1_048_588
#: The topic setting.
SETTING = "max.message.bytes"


def record_limits(config: Config, topics: Iterable[str],
                  clients: KafkaClients = REAL_CLIENTS) -> dict[str, int]:
    """The most bytes one record (value, key and headers: `record_bytes`) may take on each
    of `topics`: the topic's `max.message.bytes`, at most what inferstream's producers send
    (`LARGE_MESSAGE_BYTES`), less `RECORD_HEADROOM`. A topic whose setting cannot be read (no
    DescribeConfigs ACL, no answer in `connect_timeout_s`) gets Kafka's default, with a
    warning that says so."""
    resources = {topic: ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in topics}
    if not resources:
        return {}
    admin = admin_client(config, clients)  # held: its futures end with it
    described = admin.describe_configs(list(resources.values()),
                                       request_timeout=config.connect_timeout_s)
    return {topic: min(_limit(config, topic, described[resource]), LARGE_MESSAGE_BYTES)
            - RECORD_HEADROOM for topic, resource in resources.items()}


def _limit(config: Config, topic: str, described: concurrent.futures.Future[object]) -> int:
    try:
        entries = described.result(timeout=config.connect_timeout_s + 1)
        return int(entries[SETTING].value)  # type: ignore[index]
    except (KafkaException, KeyError, TypeError, ValueError,
            concurrent.futures.TimeoutError) as exc:
        log.warning("topic %s: its %s could not be read (%s): Kafka's default, %d bytes, is "
                    "assumed, and a larger record is written as an error; grant DescribeConfigs "
                    "on the topic (inferstream acls) to use its own", topic, SETTING,
                    _reason(exc), KAFKA_DEFAULT_RECORD_BYTES)
        return KAFKA_DEFAULT_RECORD_BYTES


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return str(exc.args[0].name())
    return "no answer in time" if isinstance(exc, concurrent.futures.TimeoutError) else repr(exc)


def record_bytes(record: Outgoing) -> int:
    """What `record` takes of its topic's limit, less the batch's framing."""
    return (len(record.value or b"") + len(record.key or b"")
            + sum(len(name) + len(value) for name, value in record.headers or ()))


def size_text(count: int) -> str:
    """`count` bytes in words: 1.5 MiB, 12.0 KiB, 300 bytes."""
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"
