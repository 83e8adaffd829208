"""`inferstream dump`: any topic's records as JSON lines, for people and foreign clients.

A record becomes one JSON object: where it is (topic, partition, offset, timestamp), its key
and headers, and its value decoded: an inferstream Avro record (single-object encoding or the
registry's wire format) by its writer schema, else JSON or UTF-8 text; bytes show as their
length and head (hex and printable), or whole in base64. A value that decodes as none of these
gets an `error` and the head of its bytes, never a traceback.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients, Message, SyncConsumer
from inferstream.kafka.errors import AuthorizationError, KafkaSetupError, TopicRefusedError
from inferstream.kafka.reader import PartitionReader, reader_consumer, topic_partitions
from inferstream.kafka.refusals import principal
from inferstream.schemas import Codec
from inferstream.schemas.errors import SchemaError

#: Short names of inferstream's topics (`Config.topic`), and what each stands for.
SHORT_NAMES: dict[str, str] = {
    "jobs": "jobs", "job-events": "job-events", "results": "results", "dlq": "dlq",
    "sysinfo": "sysinfo", "policy": "policy", "task-control": "task-control",
    "ledger": "controller-ledger", "controller-ledger": "controller-ledger",
    "workers": "workers",
}
#: Bytes shown of a bytes value in `head` mode.
HEAD_BYTES = 32


@dataclass(frozen=True)
class DumpTopic:
    """A topic to dump: its full name, and whether inferstream writes it (so its values
    must be inferstream Avro records: anything else is an error, not text)."""

    name: str
    ours: bool


def resolve_topic(config: Config, name: str) -> DumpTopic:
    """`jobs`, `ledger`, `tasks` (the config's pool), `tasks.<pool>`, ... under the prefix;
    any other name is a full topic name (`<prefix>jobs` is ours too)."""
    if name == "tasks":
        return DumpTopic(config.task_topic(), ours=True)
    if name.startswith("tasks."):
        return DumpTopic(config.topic(name), ours=True)
    if name in SHORT_NAMES:
        return DumpTopic(config.topic(SHORT_NAMES[name]), ours=True)
    bare = name.removeprefix(config.topic_prefix) if config.topic_prefix else None
    ours = bare is not None and bare != name and (
        bare in SHORT_NAMES.values() or bare.startswith("tasks."))
    return DumpTopic(name, ours=ours)


def render_bytes(data: bytes, whole: bool = False) -> dict[str, Any]:
    """Bytes readably: length and head (hex, printable ASCII with '.'), or base64 of all."""
    if whole:
        return {"length": len(data), "base64": base64.b64encode(data).decode("ascii")}
    head = data[:HEAD_BYTES]
    return {"length": len(data), "hex": head.hex(),
            "text": "".join(chr(b) if 32 <= b < 127 else "." for b in head)}


def jsonable(value: Any, whole_bytes: bool = False) -> Any:
    """A decoded record with its bytes fields rendered by `render_bytes`."""
    if isinstance(value, bytes | bytearray):
        return render_bytes(bytes(value), whole_bytes)
    if isinstance(value, dict):
        return {k: jsonable(v, whole_bytes) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, whole_bytes) for v in value]
    return value


def _text_or_bytes(data: bytes | str, whole: bool) -> Any:
    """A key or header value: its text when it is printable UTF-8, else `render_bytes`."""
    if isinstance(data, str):
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return render_bytes(data, whole)
    return text if text.isprintable() else render_bytes(data, whole)


def decode_value(codec: Codec, data: bytes | None, ours: bool,
                 whole_bytes: bool = False) -> dict[str, Any]:
    """The value's fields of a dump line: `schema` and `value` of an Avro record, `format`
    and `value` of JSON or text, or `error` and `raw` (the bytes' head)."""
    if data is None:
        return {"value": None}  # a tombstone
    try:
        name, record = codec.decode_named(data)
    except SchemaError as exc:
        if ours or data[:2] == b"\xc3\x01":
            return {"error": str(exc), "raw": render_bytes(data)}
        return _foreign(data, str(exc), whole_bytes)
    return {"schema": name, "value": jsonable(record, whole_bytes)}


def _foreign(data: bytes, avro_error: str, whole_bytes: bool) -> dict[str, Any]:
    """A value on a topic inferstream does not own (a stream's input or output)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"error": f"not JSON or UTF-8 text, and {avro_error}",
                "raw": render_bytes(data, whole_bytes)}
    try:
        return {"format": "json", "value": json.loads(text)}
    except ValueError:
        return {"format": "text", "value": text}


def dump_line(message: Message, codec: Codec, ours: bool, whole_bytes: bool = False
              ) -> dict[str, Any]:
    """One record as `inferstream dump` prints it."""
    kind, timestamp_ms = message.timestamp()
    key = message.key()
    return {
        "topic": message.topic(), "partition": message.partition(), "offset": message.offset(),
        "timestamp": timestamp_ms if kind else None,
        "key": None if key is None else _text_or_bytes(key, whole_bytes),
        "headers": [[name, None if value is None else _text_or_bytes(value, whole_bytes)]
                    for name, value in message.headers() or ()],
        **decode_value(codec, message.value(), ours, whole_bytes),
    }


@dataclass(frozen=True)
class DumpOptions:
    """From the beginning or the end; to the end as of the start, or on (`follow`);
    committed records only, or all (kcat's and the console consumer's default);
    at most `count` records; bytes whole (base64) or as their head."""

    from_beginning: bool = False
    follow: bool = False
    committed: bool = False
    count: int | None = None
    whole_bytes: bool = False


def dump_topic(config: Config, name: str, options: DumpOptions,
               write: Callable[[dict[str, Any]], None], codec: Codec | None = None,
               clients: KafkaClients = REAL_CLIENTS) -> int:
    """Write each record of topic `name` (see `resolve_topic`); returns how many."""
    topic = resolve_topic(config, name)
    codec = codec or Codec.for_config(config)
    consumer = reader_consumer(config, clients, follow=options.follow,
                               read_committed=options.committed)
    written = 0
    try:
        for message in _records(consumer, config, topic, options):
            write(dump_line(message, codec, topic.ours, options.whole_bytes))
            written += 1
            if options.count is not None and written >= options.count:
                break
    except KafkaException as exc:  # a watermark or fetch timed out: a leader gone, say
        raise KafkaSetupError(f"cannot read {topic.name} at {config.bootstrap_servers}: "
                              f"{exc}") from exc
    except TopicRefusedError as exc:
        raise refused(config, exc) from exc
    finally:
        consumer.close()
    return written


def _records(consumer: SyncConsumer, config: Config, topic: DumpTopic, options: DumpOptions
             ) -> Iterator[Message]:
    """The topic's records from the chosen start; without `follow`, those before each
    partition's end as it was at the start (later ones are left for a later dump)."""
    partitions = _partitions(consumer, config, topic)
    start = OFFSET_BEGINNING if options.from_beginning else OFFSET_END
    consumer.assign([TopicPartition(topic.name, p, start) for p in partitions])
    ends: dict[int, int] = {}
    if not options.follow:
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic.name, p),
                                                       timeout=30)
            if options.from_beginning and high > low:
                ends[p] = high
    reader = PartitionReader(consumer, ends, follow=options.follow)
    for message in reader.messages():
        partition, offset = message.partition() or 0, message.offset() or 0
        if options.follow:
            yield message
        elif partition in ends and offset < ends[partition]:
            yield message
            if offset >= ends[partition] - 1:
                reader.waiting.discard(partition)
        else:
            reader.waiting.discard(partition)


def _partitions(consumer: SyncConsumer, config: Config, topic: DumpTopic) -> list[int]:
    try:
        return topic_partitions(consumer, topic.name, timeout_s=config.connect_timeout_s)
    except TopicRefusedError:
        raise  # there, but not to this principal: not "no topic"
    except KafkaSetupError as exc:
        if topic.ours:
            bare = topic.name.removeprefix(config.topic_prefix)  # a pool's: made for that pool
            pool = bare.removeprefix("tasks.") if bare.startswith("tasks.") else config.pool
            hint = (f"run `inferstream topics create` (with --topic-prefix "
                    f"{config.topic_prefix!r} and --pool {pool})")
        else:
            hint = (f"give one of {', '.join([*SHORT_NAMES, 'tasks', 'tasks.<pool>'])} "
                    f"(under --topic-prefix {config.topic_prefix!r}) or a full topic name")
        raise KafkaSetupError(f"no topic {topic.name} at {config.bootstrap_servers}: {hint}"
                              ) from exc


def refused(config: Config, exc: TopicRefusedError) -> AuthorizationError:
    """The line for a topic that no ACL lets this principal describe or read: who it is, and
    the ACL a dump needs (Read on the topic; no role's `inferstream acls` names it)."""
    who = principal(config) or "User:NAME"
    return AuthorizationError(
        f"{who} may not {exc.what} topic {exc.topic} at {config.bootstrap_servers}: no ACL "
        f"allows it; dump needs Read on it (an admin grants it: kafka-acls.sh --add "
        f"--allow-principal {who} --operation Read --topic {exc.topic})")
