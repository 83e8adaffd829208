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
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferstream.config_fields import at_least as _at_least
from inferstream.config_fields import setting
from inferstream.config_sysinfo import SysinfoConfig
from inferstream.errors import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
GUARANTEES = ("exactly-once", "at-least-once")
MASK = "****"
#: What Kafka allows in a topic name.
_TOPIC_SAFE = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class WorkerConfig:
    """`inferstream worker`: one member of a pool's consumer group ([worker] in TOML)."""

    models: tuple[str, ...] = setting(
        (), "a model to serve, by registry name, e.g. efficientnet_lite0 (repeatable; "
        "at least one)", flag="--model", metavar="NAME")
    load_on_demand: bool = setting(
        False, "also load other registry models when a task asks for them")
    max_loaded_models: int = setting(
        2, "most models loaded at once with load_on_demand (idle ones are unloaded first)")
    device: str = setting("auto", "auto, cpu, cuda or cuda:N")
    max_batch: int = setting(32, "most items per model batch")
    max_wait_ms: float = setting(10.0, "longest wait for a batch to fill after its first item")
    decode_threads: int = setting(4, "threads that fetch and preprocess items")
    http_timeout_s: float = setting(10.0, "timeout of one http(s) item fetch")
    max_item_bytes: int = setting(64 * 1024 * 1024, "largest item the worker reads")
    metrics_port: int | None = setting(None, "serve /metrics on this port")
    weights: str | None = setting(None, "weights file of the (first) torchvision model")
    random_weights: bool = setting(False,
                                   "random weights when none are found (benchmarks only)")
    worker_id: str = setting("", "name in results and metrics (empty: host-pid)")
    instance_id: str | None = setting(None, "static group membership id")
    session_timeout_ms: int = setting(
        10_000, "a worker silent this long is dead and loses its partitions")
    heartbeat_interval_ms: int = setting(1_000, "group heartbeat interval")
    max_poll_interval_ms: int = setting(
        300_000, "longest gap between fetches; must exceed the slowest batch")
    guarantee: str = setting("exactly-once",
                             "exactly-once: results and offsets in one transaction",
                             choices=GUARANTEES)
    idle_exit_s: float | None = setting(
        None, "exit after this long with nothing to do (bounded mode)", flag="--idle-exit",
        metavar="SECONDS")
    revoke_grace_s: float = setting(
        10.0, "how long a revoked partition may take to commit its in-flight tasks")

    @property
    def max_in_flight_items(self) -> int:
        return 4 * self.max_batch + 64


@dataclass(frozen=True)
class ControllerConfig:
    """`inferstream controller`: one controller replica ([controller] in TOML)."""

    transactional_id: str | None = setting(None, "transactional id (empty: <prefix>controller)")
    tasks_per_round: int = setting(
        256, "tasks issued per job per round, so one huge job cannot starve the others")
    progress_interval_s: float = setting(1.0, "least time between a job's PROGRESS events")
    idle_exit_s: float | None = setting(
        None, "exit after this long with no active job (bounded mode)", flag="--idle-exit",
        metavar="SECONDS")
    retain_finished_s: float = setting(
        600.0, "finished jobs are forgotten (the ledger keeps them) after this long")
    watchdog_s: float | None = setting(
        90.0, "a round running this long has every thread's stack dumped once")
    commit_timeout_s: float = setting(
        20.0, "librdkafka timeout of send_offsets and abort; a commit gets twice this")
    call_grace_s: float = setting(
        5.0, "a librdkafka call this long past its own timeout is given up on as stuck "
        "(librdkafka#5456)")


@dataclass(frozen=True)
class Config:
    """Settings of every inferstream process: connection, topics, and one section per role."""

    bootstrap_servers: str = setting("localhost:9092", "Kafka servers, host:port,...")
    topic_prefix: str = setting("inferstream.", "topic name prefix")
    pool: str = setting("default", "worker pool")
    security_protocol: str = setting("PLAINTEXT", "Kafka security protocol",
                                     choices=SECURITY_PROTOCOLS)
    sasl_mechanism: str | None = setting(None, "SASL mechanism", choices=SASL_MECHANISMS)
    sasl_username: str | None = setting(None, "SASL user name")
    sasl_password: str | None = setting(None, "SASL password", secret=True)
    ssl_cafile: str | None = setting(None, "CA certificates file")
    ssl_certfile: str | None = setting(None, "client certificate file")
    ssl_keyfile: str | None = setting(None, "client key file")
    ssl_key_password: str | None = setting(None, "client key password", secret=True)
    schema_registry_url: str | None = setting(None, "use the Confluent wire format")
    #: librdkafka/Java-style `key=value` settings passed to the Kafka clients untouched.
    kafka_config: tuple[tuple[str, str], ...] = setting(
        (), "client setting passed through untouched (repeatable)", secret=True,
        metavar="KEY=VALUE")
    partitions: int = setting(12, "partitions of created topics")
    replication_factor: int | None = setting(
        None, "replication factor of created topics (empty: the broker's default)")
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    sysinfo: SysinfoConfig = field(default_factory=SysinfoConfig)

    def __post_init__(self) -> None:
        _validate(self)

    # -- derived names -------------------------------------------------------------------
    def topic(self, name: str) -> str:
        """The full name of topic `name` (`jobs`, `results`, ...) under the prefix."""
        return f"{self.topic_prefix}{name}"

    def task_topic(self, pool: str | None = None) -> str:
        return self.topic(f"tasks.{pool or self.pool}")

    def worker_group(self, pool: str | None = None) -> str:
        """The consumer group of a pool's workers."""
        return f"{self.topic_prefix}{pool or self.pool}.workers"

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
    _validate_worker(config.worker)
    _validate_controller(config.controller)


def _validate_worker(worker: WorkerConfig) -> None:
    if worker.guarantee not in GUARANTEES:
        raise ConfigError(f"worker.guarantee {worker.guarantee!r} is not one of {GUARANTEES}")
    for name in ("max_batch", "decode_threads", "max_item_bytes", "session_timeout_ms",
                 "max_loaded_models",
                 "heartbeat_interval_ms", "max_poll_interval_ms"):
        _at_least(f"worker.{name}", getattr(worker, name), 1)
    for name in ("max_wait_ms", "http_timeout_s", "idle_exit_s", "revoke_grace_s"):
        _at_least(f"worker.{name}", getattr(worker, name), 0)
    if worker.heartbeat_interval_ms >= worker.session_timeout_ms:
        raise ConfigError("worker.heartbeat_interval_ms must be below worker.session_timeout_ms")
    if worker.metrics_port is not None and not 0 < worker.metrics_port < 65536:
        raise ConfigError(f"worker.metrics_port {worker.metrics_port} is not a TCP port")


def _validate_controller(controller: ControllerConfig) -> None:
    _at_least("controller.tasks_per_round", controller.tasks_per_round, 1)
    for name in ("progress_interval_s", "idle_exit_s", "retain_finished_s", "watchdog_s"):
        _at_least(f"controller.{name}", getattr(controller, name), 0)
    _at_least("controller.commit_timeout_s", controller.commit_timeout_s, 0.001)
    _at_least("controller.call_grace_s", controller.call_grace_s, 0.001)


def parse_kafka_config(pairs: list[str] | tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Parse `key=value` strings; a pair without `=` is a ConfigError."""
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--kafka-config expects key=value, got {pair!r}")
        parsed.append((key.strip(), value.strip()))
    return tuple(parsed)


#: The role sections of Config: TOML table, `INFERSTREAM_<SECTION>_<NAME>`, CLI flags.
SECTIONS: dict[str, type] = {"worker": WorkerConfig, "controller": ControllerConfig,
                             "sysinfo": SysinfoConfig}
_ROOT = [f.name for f in dataclasses.fields(Config) if f.name not in SECTIONS]


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in _ROOT:
        raw = environ.get(f"INFERSTREAM_{name.upper()}")
        if raw is None:
            continue
        if name == "kafka_config":
            values[name] = parse_kafka_config([p for p in raw.split(",") if p.strip()])
        else:
            values[name] = raw
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            raw = environ.get(f"INFERSTREAM_{section.upper()}_{f.name.upper()}")
            if raw is not None:
                values.setdefault(section, {})[f.name] = raw
    return values


def _from_file(path: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    table = data.get("inferstream", data)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: [inferstream] must be a table")
    values = _file_table(path, table, _ROOT, "")
    for section, cls in SECTIONS.items():
        if section in table:
            if not isinstance(table[section], dict):
                raise ConfigError(f"config file {path}: [{section}] must be a table")
            names = [f.name for f in dataclasses.fields(cls)]
            values[section] = _file_table(path, table[section], names, f"{section}.")
    return values


def _file_table(path: str, table: dict[str, Any], names: list[str], prefix: str
                ) -> dict[str, Any]:
    unknown = set(table) - set(names) - (set(SECTIONS) if not prefix else set())
    if unknown:
        raise ConfigError(f"config file {path}: unknown settings "
                          f"{sorted(prefix + u for u in unknown)}")
    values = {k: v for k, v in table.items() if k in names}
    for name, value in values.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            continue  # a list of names (worker.models, sysinfo.pool_strategies)
        if name != "kafka_config" and not isinstance(value, str | int | float | bool):
            raise ConfigError(f"config file {path}: {prefix}{name} must be a string, "
                              "a number or a boolean")
    if "kafka_config" in values:
        pass_through = values["kafka_config"]
        if not isinstance(pass_through, dict):
            raise ConfigError(f"config file {path}: kafka_config must be a table of key = value")
        values["kafka_config"] = tuple((k, str(v)) for k, v in pass_through.items())
    return values


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _typed(name: str, kind: Any, value: Any) -> Any:
    """`value` (a string from the environment, a TOML scalar, a flag) as the field's type."""
    optional = isinstance(kind, types.UnionType) and type(None) in typing.get_args(kind)
    base = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
    if typing.get_origin(kind) is tuple and typing.get_args(kind) == (str, ...):
        names = value.split(",") if isinstance(value, str) else value
        return tuple(str(n).strip() for n in names if str(n).strip())
    if value is None or typing.get_origin(kind) is tuple or (optional and value == ""):
        return None if value == "" else value
    if base is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in _TRUE + _FALSE:
            return str(value).lower() in _TRUE
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if base in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        try:
            return base(value)
        except (TypeError, ValueError) as exc:
            noun = "an integer" if base is int else "a number"
            raise ConfigError(f"{name} must be {noun}, got {value!r}") from exc
    return str(value)


def _build(cls: type, values: Mapping[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{k: v if k in SECTIONS else _typed(prefix + k, hints[k], v)
                  for k, v in values.items()})


def load_config(
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Build the process's Config: flags > environment > TOML file > defaults.

    `flags` holds CLI values by field name, role settings as a dict under the section's name
    (`{"worker": {"max_batch": 64}}`); None means "not given". A `config_file` key names the
    TOML file, else `INFERSTREAM_CONFIG`.
    """
    flags = dict(flags or {})
    environ = os.environ if environ is None else environ
    layers: list[Mapping[str, Any]] = []
    config_file = flags.pop("config_file", None) or environ.get("INFERSTREAM_CONFIG")
    if config_file:
        layers.append(_from_file(config_file))
    layers.append(_from_env(environ))
    layers.append(flags)
    merged: dict[str, Any] = {section: {} for section in SECTIONS}
    for layer in layers:
        for key, value in layer.items():
            if key in SECTIONS:
                merged[key].update({k: v for k, v in value.items() if v is not None})
            elif key in _ROOT and value is not None:
                merged[key] = value
    sections = {name: _build(cls, merged.pop(name), f"{name}.")
                for name, cls in SECTIONS.items()}
    config: Config = _build(Config, {**merged, **sections})
    return config
