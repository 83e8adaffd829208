"""Checks of the pass-through Kafka settings (`--kafka-config key=value`) for both libraries.

Every key goes untouched to librdkafka (controller, client, admin) and, translated to
aiokafka's keyword (`linger.ms` -> `linger_ms`), to the worker's aiokafka clients. A key
neither library knows, a value either would reject (or accept and then crash on, as
aiokafka does with `linger.ms=abc`), and a value that would break inferstream's guarantees
are refused before any client is built, with one line naming the key and the flag.
"""

from __future__ import annotations

import inspect
import logging
import ssl
from functools import cache
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaException, Producer

from inferstream.config import Config
from inferstream.config.fields import check_readable
from inferstream.errors import ConfigError
from inferstream.kafka.settings import consumer_config, producer_config

FLAG = "--kafka-config (INFERSTREAM_KAFKA_CONFIG)"

#: Keys that have an inferstream setting of their own.
OWN_SETTING = {
    "bootstrap.servers": "--bootstrap-servers (INFERSTREAM_BOOTSTRAP_SERVERS)",
    "security.protocol": "--security-protocol",
    "sasl.mechanism": "--sasl-mechanism",
    "sasl.mechanisms": "--sasl-mechanism",
    "sasl.username": "--sasl-username",
    "sasl.password": "--sasl-password",
    "ssl.ca.location": "--ssl-cafile",
    "ssl.certificate.location": "--ssl-certfile",
    "ssl.key.location": "--ssl-keyfile",
    "ssl.key.password": "--ssl-key-password",
    "group.instance.id": "the worker's --instance-id",
    "transactional.id": "inferstream (one per task partition; the controller's: "
                        "--transactional-id)",
    "group.id": "inferstream (from --topic-prefix and --pool)",
}

#: Keys inferstream's guarantees depend on: the values allowed, and why.
GUARDED: dict[str, tuple[tuple[str, ...], str]] = {
    "enable.idempotence": (("true", "1"), "producer retries would write duplicate results"),
    "acks": (("all", "-1"), "a record acknowledged by fewer than all in-sync replicas can be "
                            "lost with its broker"),
    "isolation.level": (("read_committed",), "readers would see results of aborted "
                                             "transactions"),
    "enable.auto.commit": (("false", "0"), "offsets are committed with their results, in one "
                                           "transaction"),
    "auto.offset.reset": (("earliest", "smallest", "beginning"),
                          "a new group would skip what was written before it joined"),
    "partitioner": (("murmur2_random",), "every client must put a job id on the same "
                                         "partition"),
    "enable.partition.eof": (("true", "1"), "the readers stop at the end of each partition"),
}

#: aiokafka keywords whose default is None but which take an integer.
_AIOKAFKA_INTS = frozenset({"max_poll_records", "rebalance_timeout_ms"})
#: aiokafka keywords that take Python objects, which no `key=value` can give.
_AIOKAFKA_OBJECTS = frozenset({
    "loop", "topics", "key_serializer", "value_serializer", "key_deserializer",
    "value_deserializer", "partitioner", "partition_assignment_strategy", "ssl_context",
    "sasl_oauth_token_provider"})


def check_pass_through(config: Config, *, librdkafka: bool, aiokafka: bool) -> list[str]:
    """Refuse (ConfigError) the first bad pass-through setting for the libraries a process
    runs; return warnings for keys its aiokafka clients ignore."""
    _check_ssl_files(config)
    shown = config.masked()["kafka_config"]
    warnings = []
    for key, value in config.kafka_config:
        where = f"{FLAG} {key}={shown[key]}"
        if not _check_key(config, key, value, where, librdkafka=librdkafka):
            if aiokafka:
                warnings.append(f"{where}: aiokafka has no such setting; the worker ignores it")
    if librdkafka:
        _check_together(config)
    if aiokafka:
        aiokafka_kwargs_of(config)
    return warnings


def _check_ssl_files(config: Config) -> None:
    """ConfigError naming the setting and the path of an SSL file that cannot be read."""
    if "SSL" not in config.security_protocol:
        return  # neither library reads them
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        check_readable(name, getattr(config, name))


def _check_key(config: Config, key: str, value: str, where: str, *, librdkafka: bool) -> bool:
    """Check one setting against both libraries; True when aiokafka takes it."""
    _check_policy(key, value, where)
    rd_error = _librdkafka_error(key, value)
    rd_known = rd_error is None or not rd_error.startswith("No such configuration")
    aio_known = _aiokafka_name(key) in _aiokafka_defaults()
    if not rd_known and not aio_known:
        raise ConfigError(f"{where}: no such setting in librdkafka or aiokafka")
    if rd_known and rd_error is not None:
        raise ConfigError(f"{where}: librdkafka: {rd_error}")
    if librdkafka and not rd_known:
        raise ConfigError(f"{where}: librdkafka has no such setting (this command runs "
                          "librdkafka clients; aiokafka-only settings suit only the worker)")
    if aio_known:
        _check_aiokafka(config, key, where)
    return aio_known


def _check_policy(key: str, value: str, where: str) -> None:
    dotted = key.replace("_", ".")  # aiokafka's spelling reaches the worker too
    if dotted in OWN_SETTING:
        raise ConfigError(f"{where}: set by {OWN_SETTING[dotted]}, not {FLAG}")
    if dotted in GUARDED:
        allowed, reason = GUARDED[dotted]
        if value.strip().lower() not in allowed:
            raise ConfigError(f"{where} is refused: {reason} (allowed: {allowed[0]})")


def _quiet_logger() -> logging.Logger:
    """A logger outside the tree that drops what librdkafka says while being checked."""
    logger = logging.Logger("inferstream.passthrough")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def _librdkafka_error(key: str, value: str) -> str | None:
    """What librdkafka says of `key=value` alone: None when it takes it."""
    try:
        Producer({key: value, "logger": _quiet_logger()})
    except KafkaException as exc:
        return str(exc.args[0].str()).strip()
    return None


def _check_together(config: Config) -> None:
    """Build (without connecting) the producer and consumer the process would build: catches
    settings that conflict (`max.in.flight` above 5 with idempotence) and unreadable files."""
    logger = _quiet_logger()
    producer = producer_config(config, logger=logger)
    consumer = consumer_config(config, None, logger=logger)
    for settings in (producer, consumer):
        settings.pop("bootstrap.servers", None)
    try:
        Producer(producer)
        Consumer(consumer).close()
    except KafkaException as exc:
        raise ConfigError(f"the Kafka settings do not work together: librdkafka: "
                          f"{exc.args[0].str()}") from exc


def _aiokafka_name(key: str) -> str:
    return key.replace(".", "_")


@cache
def _aiokafka_defaults() -> dict[str, Any]:
    """Every keyword of aiokafka's producer and consumer, with its default."""
    defaults: dict[str, Any] = {}
    for cls in (AIOKafkaProducer, AIOKafkaConsumer):
        for name, parameter in inspect.signature(cls).parameters.items():
            defaults.setdefault(name, parameter.default)
    return defaults


def _check_aiokafka(config: Config, key: str, where: str) -> None:
    """aiokafka checks no types: a text where it wants a number fails later, inside a
    background task (a TypeError in the sender, a worker that hangs)."""
    name = _aiokafka_name(key)
    if name in _AIOKAFKA_OBJECTS:
        raise ConfigError(f"{where}: aiokafka takes a Python object for {name}, not text")
    value = aiokafka_kwargs_of(config)[name]
    default = _aiokafka_defaults()[name]
    if key == "acks":
        return  # GUARDED allows only all / -1, which aiokafka takes
    if isinstance(default, bool):
        if not isinstance(value, bool | int) or value not in (True, False):
            raise ConfigError(f"{where}: aiokafka expects true or false")
    elif isinstance(default, int) or name in _AIOKAFKA_INTS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: aiokafka expects a whole number >= 0")


def aiokafka_kwargs_of(config: Config) -> dict[str, Any]:
    """`config.aiokafka_config()`, with an SSL file that cannot be loaded as a ConfigError."""
    try:
        return config.aiokafka_config()
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"the SSL files (--ssl-cafile, --ssl-certfile, --ssl-keyfile) "
                          f"cannot be loaded: {exc}") from exc
