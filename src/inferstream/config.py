"""The one configuration of an inferstream process.

Settings are read in one place, `load_config`, from (highest first) CLI flags, the environment
(`INFERSTREAM_<NAME>`), an optional TOML file (`--config FILE` or `INFERSTREAM_CONFIG`) and the
defaults below. The result is frozen and validated; nothing is read at import time.
"""

from __future__ import annotations

import dataclasses
import os
import re
import ssl
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferstream.errors import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MASK = "****"
#: What Kafka allows in a topic name.
_TOPIC_SAFE = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Config:
    """Settings shared by every inferstream process (client, worker, controller, admin)."""

    bootstrap_servers: str = "localhost:9092"
    topic_prefix: str = "inferstream."
    pool: str = "default"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    schema_registry_url: str | None = None
    #: librdkafka/Java-style `key=value` settings passed to the Kafka clients untouched.
    kafka_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    #: partitions of the topics that `topics create` makes (tasks and results use more).
    partitions: int = 12
    #: replication factor of created topics; None lets the broker decide (its default).
    replication_factor: int | None = None

    def __post_init__(self) -> None:
        _validate(self)

    # -- derived names -------------------------------------------------------------------
    def topic(self, name: str) -> str:
        """The full name of topic `name` (`jobs`, `results`, ...) under the prefix."""
        return f"{self.topic_prefix}{name}"

    def task_topic(self, pool: str | None = None) -> str:
        return self.topic(f"tasks.{pool or self.pool}")

    # -- client settings -----------------------------------------------------------------
    def confluent_config(self, **extra: Any) -> dict[str, Any]:
        """Settings for confluent-kafka clients (librdkafka names), pass-through applied last."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol.lower(),
        }
        optional = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_cafile,
            "ssl.certificate.location": self.ssl_certfile,
            "ssl.key.location": self.ssl_keyfile,
            "ssl.key.password": self.ssl_key_password,
        }
        conf.update({k: v for k, v in optional.items() if v is not None})
        conf.update(extra)
        conf.update(dict(self.kafka_config))
        return conf

    def aiokafka_config(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka clients: the same servers and security settings.

        Pass-through keys are translated from dotted to aiokafka's underscore names
        (`max.poll.interval.ms` -> `max_poll_interval_ms`); callers drop the ones a given
        aiokafka class does not accept (see `streams.kafka.aiokafka_kwargs`).
        """
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password
        if "SSL" in self.security_protocol:
            kwargs["ssl_context"] = self._ssl_context()
        for key, value in self.kafka_config:
            kwargs[key.replace(".", "_")] = _coerce(value)
        return kwargs

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, self.ssl_key_password)
        return context

    def masked(self) -> dict[str, Any]:
        """The settings as a dict with every secret replaced by `****` (for printing)."""
        shown = dataclasses.asdict(self)
        for key in ("sasl_password", "ssl_key_password"):
            if shown[key] is not None:
                shown[key] = MASK
        shown["kafka_config"] = {
            k: (MASK if _is_secret(k) else v) for k, v in self.kafka_config
        }
        return shown


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in ("password", "secret", "token", "jaas"))


def _coerce(value: str) -> Any:
    """Turn pass-through strings into the ints/bools aiokafka expects."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return int(value)
    except ValueError:
        return value


def _validate(config: Config) -> None:
    if not config.bootstrap_servers.strip():
        raise ConfigError("bootstrap_servers is empty")
    for server in config.bootstrap_servers.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"bootstrap server {server!r} is not host:port")
    if config.security_protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"security_protocol {config.security_protocol!r} is not one of {SECURITY_PROTOCOLS}"
        )
    if "SASL" in config.security_protocol and config.sasl_mechanism not in SASL_MECHANISMS:
        raise ConfigError(f"{config.security_protocol} needs sasl_mechanism in {SASL_MECHANISMS}")
    if config.partitions < 1:
        raise ConfigError(f"partitions must be >= 1, got {config.partitions}")
    if config.replication_factor is not None and config.replication_factor < 1:
        raise ConfigError(f"replication_factor must be >= 1, got {config.replication_factor}")
    if not _TOPIC_SAFE.fullmatch(config.pool):
        raise ConfigError(f"pool name {config.pool!r} may use only letters, digits, '.', '_', '-'")
    if config.topic_prefix and not _TOPIC_SAFE.fullmatch(config.topic_prefix):
        raise ConfigError(
            f"topic_prefix {config.topic_prefix!r} may use only letters, digits, '.', '_', '-'")


_FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def parse_kafka_config(pairs: list[str] | tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Parse `key=value` strings; a pair without `=` is a ConfigError."""
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--kafka-config expects key=value, got {pair!r}")
        parsed.append((key.strip(), value.strip()))
    return tuple(parsed)


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in _FIELDS:
        raw = environ.get(f"INFERSTREAM_{name.upper()}")
        if raw is None:
            continue
        if name == "kafka_config":
            values[name] = parse_kafka_config([p for p in raw.split(",") if p.strip()])
        else:
            values[name] = raw
    return values


def _from_file(path: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    section = data.get("inferstream", data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [inferstream] must be a table")
    unknown = set(section) - set(_FIELDS)
    if unknown:
        raise ConfigError(f"config file {path}: unknown settings {sorted(unknown)}")
    values = dict(section)
    for name, value in values.items():
        scalar = isinstance(value, str | int) and not isinstance(value, bool)
        if name != "kafka_config" and not scalar:
            raise ConfigError(f"config file {path}: {name} must be a string or an integer")
    if "kafka_config" in values:
        pass_through = values["kafka_config"]
        if not isinstance(pass_through, dict):
            raise ConfigError(f"config file {path}: kafka_config must be a table of key = value")
        values["kafka_config"] = tuple((k, str(v)) for k, v in pass_through.items())
    return values


def _typed(name: str, value: Any) -> Any:
    kind = _FIELDS[name].type
    if value is None or name == "kafka_config":
        return value
    if kind in ("int", "int | None"):
        try:
            return int(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name} must be an integer, got {value!r}") from exc
    return str(value)


def load_config(
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Build the process's Config: flags > environment > TOML file > defaults.

    `flags` holds CLI values by field name (None means "not given"); a `config_file` key names
    the TOML file, else `INFERSTREAM_CONFIG`.
    """
    flags = dict(flags or {})
    environ = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    config_file = flags.pop("config_file", None) or environ.get("INFERSTREAM_CONFIG")
    if config_file:
        merged.update(_from_file(config_file))
    merged.update(_from_env(environ))
    merged.update({k: v for k, v in flags.items() if v is not None and k in _FIELDS})
    return Config(**{k: _typed(k, v) for k, v in merged.items()})
