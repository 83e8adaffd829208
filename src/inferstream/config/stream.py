"""`inferstream stream` settings ([stream] in TOML, `INFERSTREAM_STREAM_<NAME>`, flags).

A stream member also takes the worker's settings (`--model`, `--max-batch`, `--max-wait-ms`,
`--device`, the group timeouts, ...): it runs the worker's pipeline on another source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from inferstream.config.fields import at_least, setting
from inferstream.errors import ConfigError

INPUT_FORMATS = ("bytes", "url", "json", "avro")
OUTPUT_FORMATS = ("json", "avro")
ON_ERROR = ("output", "dlq")
START_FROM = ("earliest", "latest")
#: Characters a pool name may not hold; a stream's pool is named after its group.
_NOT_POOL_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class StreamConfig:
    """`inferstream stream`: one member of a stream's consumer group ([stream] in TOML)."""

    input_topic: str = setting("", "topic of the records to label (any producer writes it)")
    output_topic: str = setting("", "topic of the labelled records, one per input record")
    group: str = setting(
        "", "consumer group of the stream's members (empty: <prefix>stream.<input>.<output>)")
    input_format: str = setting(
        "bytes", "bytes: the value is an encoded image; url: a UTF-8 path or file://, "
        "http(s):// URI; json: an object whose --field holds base64 bytes or a URI; avro: a "
        "record (Confluent registry or single-object encoding) with a bytes or string --field",
        choices=INPUT_FORMATS)
    field: str = setting(
        "", "json and avro input: the field holding the image (dots for nested fields)")
    input_schema: str | None = setting(
        None, "avro input in single-object encoding: the writer schema's .avsc file "
        "(registry-framed records are resolved through --schema-registry-url)",
        metavar="FILE")
    output_format: str = setting(
        "json", "json: one UTF-8 JSON object per record; avro: an inferstream.StreamResult "
        "record (single-object encoding, or the registry's wire format)",
        choices=OUTPUT_FORMATS)
    on_error: str = setting(
        "output", "output: a bad record gets an output record with status error and the "
        "reason; dlq: it goes to the dead-letter topic with its origin instead",
        choices=ON_ERROR)
    dead_letter_topic: str = setting("", "dead-letter topic of --on-error dlq (empty: "
                                     "<prefix>dlq)")
    start_from: str = setting(
        "earliest", "where a partition with no committed offset in the group starts",
        choices=START_FROM)
    top_k: int = setting(5, "predictions per output record")

    def __post_init__(self) -> None:
        _validate(self)

    def group_id(self, prefix: str) -> str:
        return self.group or f"{prefix}stream.{self.input_topic}.{self.output_topic}"

    def pool(self, prefix: str) -> str:
        """The pool the stream's members are to sysinfo and the policy table: the group's
        name without the prefix, in the characters a pool name may hold."""
        group = self.group_id(prefix)
        name = group[len(prefix):] if prefix and group.startswith(prefix) else group
        return _NOT_POOL_SAFE.sub("_", name)

    def check_complete(self) -> None:
        """What `inferstream stream` needs before it connects (a section default is empty)."""
        if not self.input_topic or not self.output_topic:
            raise ConfigError("the stream needs --input-topic and --output-topic")
        if self.input_topic == self.output_topic:
            raise ConfigError(f"--input-topic and --output-topic are both {self.input_topic}: "
                              "a stream that reads its own output never ends")
        if self.input_format in ("json", "avro") and not self.field:
            raise ConfigError(f"--input-format {self.input_format} needs --field NAME: the "
                              "field that holds the image bytes or URI")


def _validate(stream: StreamConfig) -> None:
    for name, allowed in (("input_format", INPUT_FORMATS), ("output_format", OUTPUT_FORMATS),
                          ("on_error", ON_ERROR), ("start_from", START_FROM)):
        value = getattr(stream, name)
        if value not in allowed:
            raise ConfigError(f"stream.{name} {value!r} is not one of {', '.join(allowed)}")
    at_least("stream.top_k", stream.top_k, 1)
