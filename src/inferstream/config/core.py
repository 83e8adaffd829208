"""`Config`: the connection settings (brokers, security, topics, pool) and one section per
role, frozen and validated when built."""

from __future__ import annotations

import dataclasses
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferstream.config.controller import ControllerConfig, validate_controller
from inferstream.config.fields import at_least as _at_least
from inferstream.config.fields import setting
from inferstream.config.stream import StreamConfig
from inferstream.config.sysinfo import SysinfoConfig
from inferstream.config.worker import SWITCH, WorkerConfig, validate_worker
from inferstream.errors import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MASK = "****"
#: Each secret that may come from a file instead, and the setting naming that file.
SECRET_FILES = {"sasl_password": "sasl_password_file",
                 "ssl_key_password": "ssl_key_password_file",
                 "http_token": "http_token_file",
                 "schema_registry_password": "schema_registry_password_file"}
#: The TLS files of an https schema registry: its CA, and this client's certificate and key.
REGISTRY_TLS_FILES = ("schema_registry_cafile", "schema_registry_certfile",
                      "schema_registry_keyfile")
#: What Kafka allows in a topic name.
TOPIC_SAFE = re.compile(r"[A-Za-z0-9._-]+")


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
    sasl_password_file: str | None = setting(
        None, "file holding the SASL password (read at start, one trailing newline stripped)")
    ssl_cafile: str | None = setting(None, "CA certificates file")
    ssl_certfile: str | None = setting(None, "client certificate file")
    ssl_keyfile: str | None = setting(None, "client key file")
    ssl_key_password: str | None = setting(None, "client key password", secret=True)
    ssl_key_password_file: str | None = setting(
        None, "file holding the client key password (read at start, one trailing newline "
        "stripped)")
    schema_registry_url: str | None = setting(None, "use the Confluent wire format")
    schema_registry_user: str | None = setting(
        None, "user the schema registry is logged in to as (HTTP basic auth)")
    schema_registry_password: str | None = setting(
        None, "schema_registry_user's password", secret=True)
    schema_registry_password_file: str | None = setting(
        None, "file holding schema_registry_password (read at start, one trailing newline "
        "stripped)")
    schema_registry_cafile: str | None = setting(
        None, "CA certificates (PEM) an https schema_registry_url's certificate is checked "
        "against (none: the system's; ssl_cafile is for the brokers only)")
    schema_registry_certfile: str | None = setting(
        None, "client certificate (PEM) for a schema registry that asks for one (mTLS); with "
        "schema_registry_keyfile")
    schema_registry_keyfile: str | None = setting(
        None, "private key (PEM, not encrypted) of schema_registry_certfile")
    sysinfo_url: str = setting("http://127.0.0.1:6066",
                               "HTTP API of the sysinfo app (inferstream top, SysInfoClient)")
    http_tls_certfile: str | None = setting(
        None, "certificate (PEM) of every HTTP server (/metrics, the sysinfo API): with "
        "http_tls_keyfile it speaks HTTPS only")
    http_tls_keyfile: str | None = setting(None, "private key (PEM) of http_tls_certfile")
    http_tls_cafile: str | None = setting(
        None, "CA certificates an https sysinfo_url (top, SysInfoClient) and the sysinfo "
        "replicas' certificates are checked against (none: the system's)")
    http_token: str | None = setting(
        None, "bearer token every HTTP request but /healthz and /readyz must carry "
        "(Authorization: Bearer TOKEN); the clients send it", secret=True)
    http_token_file: str | None = setting(
        None, "file holding http_token (read at start, one trailing newline stripped)")
    #: librdkafka/Java-style `key=value` settings passed to the Kafka clients untouched.
    kafka_config: tuple[tuple[str, str], ...] = setting(
        (), "client setting passed through untouched (repeatable)", secret=True,
        metavar="KEY=VALUE")
    partitions: int = setting(12, "partitions of created topics, except the task topics")
    task_partitions: int = setting(
        120, "partitions of each pool's task topic (fine shares, pools of 100 workers)")
    pool_partitions: tuple[str, ...] = setting(
        (), "a pool's own task topic partitions (repeatable)", flag="--pool-partitions",
        metavar="POOL=N")
    replication_factor: int | None = setting(
        None, "replication factor of created topics (empty: the broker's default)")
    connect_timeout_s: float = setting(
        5.0, "at start-up, how long to wait for the Kafka cluster to answer; at a stop, how "
        "long each Kafka client may take to stop (leave its group) before it is given up")
    stop_grace_s: float = setting(
        30.0, "a worker or controller still stopping this long after SIGTERM/SIGINT exits "
        "at once (so does a second signal)")
    restart: str = setting(
        "on", "a worker, controller, stream member or sysinfo replica runs as the child of a "
        "supervising parent that restarts it when it dies of a signal or an unexpected exit "
        "(off: leave restarts to systemd, Kubernetes or compose)", choices=SWITCH)
    restart_delay_s: float = setting(
        1.0, "the supervisor's delay before the first restart; it doubles with each restart "
        "in a row, up to restart_max_delay_s (a child that ran 60 s starts the row again)")
    restart_max_delay_s: float = setting(30.0, "the supervisor's longest delay before a restart")
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    sysinfo: SysinfoConfig = field(default_factory=SysinfoConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)

    def __post_init__(self) -> None:
        _validate(self)
        for secret, path in SECRET_FILES.items():
            # A derived config (dataclasses.replace) holds the secret read already.
            if getattr(self, path) is not None and getattr(self, secret) is None:
                object.__setattr__(self, secret, read_secret(path, getattr(self, path)))
        _validate_http(self)  # after the token file is read

    # -- derived names -------------------------------------------------------------------
    def topic(self, name: str) -> str:
        """The full name of topic `name` (`jobs`, `results`, ...) under the prefix."""
        return f"{self.topic_prefix}{name}"

    def topics(self, *names: str) -> tuple[str, ...]:
        """The full names of topics `names`."""
        return tuple(self.topic(name) for name in names)

    def task_topic(self, pool: str | None = None) -> str:
        return self.topic(f"tasks.{pool or self.pool}")

    def task_partitions_for(self, pool: str | None = None) -> int:
        """Partitions of the task topic of `pool` (default: this config's pool)."""
        return _pool_partitions(self.pool_partitions).get(pool or self.pool,
                                                           self.task_partitions)

    def worker_group(self, pool: str | None = None) -> str:
        """The consumer group of a pool's workers."""
        return f"{self.topic_prefix}{pool or self.pool}.workers"

    def worker_transactional_prefix(self, pool: str | None = None) -> str:
        """What the transactional id of each task partition a pool's worker owns starts with
        (the id is `<this><topic>.<partition>`)."""
        return f"{self.topic_prefix}{pool or self.pool}."

    def reader_group(self) -> str:
        """The group.id of a consumer outside any group (confluent-kafka requires one). It
        never commits, but librdkafka looks up its coordinator: on a secured cluster a
        reader's principal needs Describe on it."""
        return f"{self.topic_prefix}readers"

    def controller_group(self) -> str:
        """The consumer group of the controller replicas."""
        return f"{self.topic_prefix}controllers"

    def controller_transactional_base(self) -> str:
        """The base of the controller's transactional ids, `<base>.<partition>`."""
        return self.controller.transactional_id or f"{self.topic_prefix}controller"

    def sysinfo_app_id(self) -> str:
        """The sysinfo Faust app's id: its consumer group and the start of its own topics'
        names (`<id>-<table>-changelog`, `<id>-fleet`)."""
        return f"{self.topic_prefix}sysinfo"

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
        aiokafka class does not accept (see `kafka.aiokafka_kwargs`).
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
        for key in SECRET_FILES:
            if shown[key] is not None:
                shown[key] = MASK
        shown["kafka_config"] = {
            k: (MASK if _is_secret(k) else v) for k, v in self.kafka_config
        }
        return shown


def read_secret(setting_name: str, path: str) -> str:
    """The secret in file `path` less one trailing newline; ConfigError naming the setting."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not text"
        raise ConfigError(f"{setting_name} {path}: cannot read it ({why})") from exc
    return text.removesuffix("\n")


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
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"bootstrap server {server.strip()!r} is not host:port with a "
                              "port from 1 to 65535")
    if config.security_protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"security_protocol {config.security_protocol!r} is not one of {SECURITY_PROTOCOLS}"
        )
    if "SASL" in config.security_protocol and config.sasl_mechanism not in SASL_MECHANISMS:
        raise ConfigError(f"{config.security_protocol} needs sasl_mechanism in {SASL_MECHANISMS}")
    if config.partitions < 1:
        raise ConfigError(f"partitions must be >= 1, got {config.partitions}")
    _at_least("task_partitions", config.task_partitions, 1)
    _pool_partitions(config.pool_partitions)
    if config.replication_factor is not None and config.replication_factor < 1:
        raise ConfigError(f"replication_factor must be >= 1, got {config.replication_factor}")
    if not TOPIC_SAFE.fullmatch(config.pool):
        raise ConfigError(f"pool name {config.pool!r} may use only letters, digits, '.', '_', '-'")
    if config.topic_prefix and not TOPIC_SAFE.fullmatch(config.topic_prefix):
        raise ConfigError(
            f"topic_prefix {config.topic_prefix!r} may use only letters, digits, '.', '_', '-'")
    _at_least("connect_timeout_s", config.connect_timeout_s, 0.1)
    _at_least("stop_grace_s", config.stop_grace_s, 0)
    if config.restart not in SWITCH:
        raise ConfigError(f"restart must be on or off, got {config.restart!r}")
    _at_least("restart_delay_s", config.restart_delay_s, 0)
    _at_least("restart_max_delay_s", config.restart_max_delay_s, config.restart_delay_s)
    validate_worker(config.worker)
    validate_controller(config.controller)
    _validate_registry(config)


def _validate_registry(config: Config) -> None:
    has_password = (config.schema_registry_password is not None
                    or config.schema_registry_password_file is not None)
    if has_password and config.schema_registry_user is None:
        raise ConfigError("a schema registry password needs schema_registry_user")
    if has_password and config.schema_registry_url is None:
        raise ConfigError("schema_registry_user and its password need schema_registry_url")
    if (config.schema_registry_certfile is None) != (config.schema_registry_keyfile is None):
        raise ConfigError("schema_registry_certfile and schema_registry_keyfile go together: "
                          "set both or neither")
    tls = [name for name in REGISTRY_TLS_FILES if getattr(config, name) is not None]
    url = config.schema_registry_url
    if tls and (url is None or not url.lower().startswith("https://")):
        raise ConfigError(f"{' and '.join(tls)} need{'s' if len(tls) == 1 else ''} an https:// "
                          "schema_registry_url, "
                          + ("which is not set" if url is None else f"got {url}"))


def _validate_http(config: Config) -> None:
    if (config.http_tls_certfile is None) != (config.http_tls_keyfile is None):
        raise ConfigError("http_tls_certfile and http_tls_keyfile go together: set both or "
                          "neither")
    if config.http_token is not None and not config.http_token.strip():
        raise ConfigError("http_token is empty" + (
            f" (http_token_file {config.http_token_file})" if config.http_token_file else ""))


def _pool_partitions(items: tuple[str, ...]) -> dict[str, int]:
    """`POOL=N` items as {pool: N}; ConfigError for anything else or N below 1."""
    found: dict[str, int] = {}
    for item in items:
        pool, sep, count = item.partition("=")
        if not sep or not pool.strip() or not count.strip().isdigit() or int(count) < 1:
            raise ConfigError(f"pool_partitions expects POOL=N with N >= 1, got {item!r}")
        found[pool.strip()] = int(count)
    return found


def parse_kafka_config(pairs: list[str] | tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Parse `key=value` strings; a pair without `=` is a ConfigError."""
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--kafka-config expects key=value, got {pair!r}")
        parsed.append((key.strip(), value.strip()))
    return tuple(parsed)


