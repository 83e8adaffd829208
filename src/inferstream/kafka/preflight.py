"""Start-up checks of a process: its Kafka settings, its ports, the cluster, its topics and
its schema registry.

A mistake a user makes at the command line (no broker at the address, topics never created,
a bad pass-through setting, a metrics port in use) becomes one line naming what to change,
within `connect_timeout_s`, instead of a library traceback after 30 s or a silent hang.
"""

from __future__ import annotations

import errno
import logging
import re
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from inferstream.config import Config
from inferstream.errors import ConfigError
from inferstream.http import HttpGuard
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.passthrough import check_pass_through
from inferstream.kafka.reader import topic_partitions
from inferstream.kafka.refusals import not_authorized, principal
from inferstream.kafka.settings import consumer_config
from inferstream.kafka.topics import admin_client, copartitioned, partition_count_problem
from inferstream.schemas.errors import SchemaRegistryError, SchemaRegistryTLSError
from inferstream.schemas.schema_registry import SchemaRegistryClient, registry_client

log = logging.getLogger(__name__)

SERVERS_SETTING = "--bootstrap-servers or INFERSTREAM_BOOTSTRAP_SERVERS"
#: librdkafka's errors for "no broker answered"
_UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._TIMED_OUT,  # noqa: SLF001
                KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE}  # noqa: SLF001
#: Seconds between two looks for a topic that the cluster does not show yet.
TOPIC_RETRY_S = 0.25
#: Seconds the first metadata request waits before the check looks at why no broker
#: answered yet (a refusal ends it).
ANSWER_SLICE_S = 0.5
#: The reason in a librdkafka connection log line, without its thread and timing decoration.
_REASON = re.compile(r"/bootstrap: (?P<reason>.+?)(?: \(after \d+ms in state \w+\))?$")
#: A TLS alert of a broker that refused this client's certificate (none, expired, signed by
#: a CA the brokers do not trust): librdkafka's "ssl/tls alert bad certificate" and the like.
_CERTIFICATE_REFUSED = re.compile(
    r"alert (bad certificate|certificate \w+|unknown ca|unsupported certificate)", re.I)


@dataclass(frozen=True)
class Needs:
    """What a command needs: the client libraries it runs, the topics (full names) it reads
    or writes, the local address and port it serves metrics (or HTTP) on and the flags that
    set them."""

    librdkafka: bool = True
    aiokafka: bool = False
    topics: tuple[str, ...] = ()
    metrics_port: int | None = None
    port_flag: str = "--metrics-port"
    #: the address `metrics_port` is served on ("": every interface)
    metrics_addr: str = ""
    addr_flag: str = "--metrics-addr"
    #: topics the user makes, not `inferstream topics create` (a stream's input and output)
    user_topics: tuple[str, ...] = ()
    #: the `inferstream acls --role` whose ACLs the command needs (None: not one role's)
    role: str | None = None
    #: the consumer groups it joins, whose ACLs are checked before it starts
    groups: tuple[str, ...] = ()


def preflight(config: Config, needs: Needs, clients: KafkaClients = REAL_CLIENTS) -> None:
    """Every check, cheapest first: ConfigError or KafkaSetupError with one line."""
    for warning in check_pass_through(config, librdkafka=needs.librdkafka,
                                      aiokafka=needs.aiokafka):
        log.warning("%s", warning)
    if needs.metrics_port is not None:
        check_port_free(needs.metrics_port, needs.port_flag, needs.metrics_addr,
                        needs.addr_flag)
        HttpGuard.of(config).server_context()  # its certificate and key load and match
    # the registry's TLS files load (ConfigError) before the cluster is asked anything
    registry = registry_client(config) if needs.role is not None else None
    check_cluster(config, needs.topics, clients, needs.user_topics, needs.role)
    check_groups(config, needs.groups, clients, needs.role)
    if registry is not None:
        check_registry(config, registry)


def check_registry(config: Config, client: SchemaRegistryClient | None = None) -> None:
    """SchemaRegistryError in one line when `config`'s schema registry (`client`, else one
    built here) does not answer, refuses its credentials or fails the TLS handshake: at
    start, not at a role's first record."""
    client = client or registry_client(config)
    if client is None:
        return
    try:
        client.subjects()
    except SchemaRegistryError as exc:
        if exc.status not in (None, 404) or isinstance(exc, SchemaRegistryTLSError):
            raise  # it refused something, or TLS failed: the message says what to change
        raise SchemaRegistryError(  # no answer, or no registry at that URL
            f"{exc}: set --schema-registry-url (INFERSTREAM_SCHEMA_REGISTRY_URL) to a schema "
            "registry's URL", url=exc.url, status=exc.status) from exc


def check_port_free(port: int, flag: str = "--metrics-port", addr: str = "",
                    addr_flag: str = "--metrics-addr") -> None:
    """ConfigError when nothing could listen on `addr`:`port` ("": every interface): the
    port in use or not allowed, or the address not one of this host's. The server binds the
    first address `addr` resolves to (`http.serve`, aiohttp's): so does this probe."""
    family: socket.AddressFamily = socket.AF_INET
    where: Any = ("", port)
    if addr:
        try:
            family, *_, where = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM,
                                                   flags=socket.AI_PASSIVE)[0]
        except (socket.gaierror, UnicodeError) as exc:
            raise ConfigError(f"{addr_flag} {addr} is not a known host name or address "
                              f"({getattr(exc, 'strerror', None) or exc}): give an address "
                              "of this host (0.0.0.0: every interface)") from exc
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
        except OSError as exc:
            raise ConfigError(_unbindable(exc, port, flag, addr, addr_flag)) from exc


def _unbindable(exc: OSError, port: int, flag: str, addr: str, addr_flag: str) -> str:
    """Why `addr`:`port` cannot be listened on, naming the flag to change."""
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"{addr_flag} {addr} is not an address of this host: give one of its "
                "addresses (0.0.0.0: every interface)")
    if exc.errno == errno.EADDRINUSE:
        return f"{flag} {port} is in use{f' on {addr}' if addr else ''}: pick another port"
    return f"{flag} {port} cannot be used{f' on {addr}' if addr else ''}: {exc}"


def check_cluster(config: Config, topics: tuple[str, ...] = (),
                  clients: KafkaClients = REAL_CLIENTS, user_topics: tuple[str, ...] = (),
                  role: str | None = None) -> None:
    """KafkaSetupError unless the cluster answers within `connect_timeout_s` and has
    every topic of `topics` and `user_topics` within that time, each described to this
    principal (`role` names the ACLs it lacks otherwise), and those of `topics` that share
    a job's partition index (`copartitioned`) with one partition count."""
    log.debug("checking the Kafka cluster at %s (waiting up to %gs)", config.bootstrap_servers,
              config.connect_timeout_s)
    metadata = cluster_metadata(config, (*user_topics, *topics), clients)
    hidden = forbidden(metadata.topics, (*user_topics, *topics))
    if hidden:
        raise not_authorized(config, role,
                             f"describe {plural(hidden, 'topic')} {', '.join(hidden)}")
    theirs = absent(metadata.topics, user_topics)
    if theirs:
        raise KafkaSetupError(
            f"{plural(theirs, 'topic')} {', '.join(theirs)} missing at "
            f"{config.bootstrap_servers}: create {'them' if len(theirs) > 1 else 'it'} "
            "first (kafka-topics.sh --create, or your platform's way)")
    missing = absent(metadata.topics, topics)
    if missing:
        raise KafkaSetupError(
            f"{plural(missing, 'topic')} {', '.join(missing)} missing at "
            f"{config.bootstrap_servers}: run `inferstream topics create` "
            f"(with --topic-prefix {config.topic_prefix!r} and --pool {config.pool})")
    problem = partition_count_problem({name: len(metadata.topics[name].partitions)
                                       for name in copartitioned(config) if name in topics})
    if problem:
        raise KafkaSetupError(problem)


def check_groups(config: Config, groups: tuple[str, ...], clients: KafkaClients = REAL_CLIENTS,
                 role: str | None = None) -> None:
    """KafkaSetupError in words when this principal may not describe a group of `groups`
    (Read, which joining needs, implies Describe): before a supervisor's first child, so
    that a refusal is one line, not a restart at every join."""
    if not groups:
        return
    admin = admin_client(config, clients)  # held: its futures end with it
    described = admin.describe_consumer_groups(list(groups),
                                               request_timeout=config.connect_timeout_s)
    refused = []
    for group, future in described.items():
        try:
            future.result(timeout=config.connect_timeout_s + 1)
        except TimeoutError:
            log.debug("group %s not described in time: left to the role's start", group)
        except KafkaException as exc:  # anything else is the role's own start to meet
            if exc.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                refused.append(group)
    if refused:
        raise not_authorized(config, role, f"use {plural(refused, 'group')} "
                                           f"{', '.join(refused)}")


def absent(topics: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    """The topics of `names` that `topics` (a cluster metadata's topics) does not show, or
    shows with an error or without partitions."""
    return [name for name in names if name not in topics or topics[name].error is not None
            or not topics[name].partitions]


def forbidden(topics: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    """The topics of `names` that `topics` (a cluster metadata's topics) shows with
    TOPIC_AUTHORIZATION_FAILED: this principal may not describe them."""
    return [name for name in names if name in topics and topics[name].error is not None
            and topics[name].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED]


def cluster_metadata(config: Config, topics: tuple[str, ...] = (),
                     clients: KafkaClients = REAL_CLIENTS) -> Any:
    """The cluster's metadata once it shows every topic of `topics`, or as it is when
    `connect_timeout_s` has passed; KafkaSetupError when no broker answers.

    A topic created a moment ago is not on every broker's metadata yet, and each request may
    go to another broker: it is asked again, every `TOPIC_RETRY_S`, before it is called
    missing."""
    deadline = time.monotonic() + config.connect_timeout_s
    captured = _CapturedLog()
    consumer = clients.consumer(consumer_config(config, None, logger=captured.logger))
    try:
        metadata = _first_listing(consumer, topics, deadline, captured)
        while (_awaited(metadata.topics, topics)
               and time.monotonic() + TOPIC_RETRY_S < deadline):
            time.sleep(TOPIC_RETRY_S)
            metadata = listing(consumer, topics, max(0.1, deadline - time.monotonic()))
        return metadata
    except KafkaException as exc:
        failure = exc
    finally:
        consumer.close()  # also hands over librdkafka's log lines, with the reason
    raise KafkaSetupError(_cannot_reach(config, failure.args[0], captured.reason())
                          ) from failure


def _first_listing(consumer: Any, topics: tuple[str, ...], deadline: float,
                   captured: _CapturedLog) -> Any:
    """`listing` once a broker answers, by `deadline`. A broker that refused this client's
    credentials or certificate (librdkafka logs why at once, and tries again for ever) is
    said after a first request of `ANSWER_SLICE_S`, not at the deadline. One request then
    waits the rest: a request given up is not answered later, so that requests of a slice
    each would never see a broker that takes longer than a slice to answer (a loaded one)."""
    try:
        return listing(consumer, topics, max(0.1, min(ANSWER_SLICE_S,
                                                      deadline - time.monotonic())))
    except KafkaException:
        consumer.poll(0)  # serves librdkafka's log lines of its attempts so far
        if deadline - time.monotonic() < 0.1 or _refused(captured.reason() or ""):
            raise
    return listing(consumer, topics, max(0.1, deadline - time.monotonic()))


def _refused(reason: str) -> bool:
    """Whether a broker answered and refused this client: its credentials or a
    certificate, which trying again until the deadline would not change."""
    return ("authentication" in reason.lower() or "certificate verify failed" in reason
            or bool(_CERTIFICATE_REFUSED.search(reason)))


def reachable_partitions(config: Config, client: Any, topic: str,
                         clients: KafkaClients = REAL_CLIENTS) -> list[int]:
    """`topic_partitions` of `topic` within `connect_timeout_s`, asked through `client` (a
    consumer or producer); KafkaSetupError in the start-up check's words when no broker
    answers: the SDK runs no start-up check, and raised librdkafka's error after 30 s.
    `client`'s log is not read here: where it has no answer at once, a consumer whose log is
    read asks too (`_refusal`), so that a refusal is said at once; else `client` waits the
    rest of the time for an answer."""
    deadline = time.monotonic() + config.connect_timeout_s
    try:
        return topic_partitions(client, topic,
                                timeout_s=min(ANSWER_SLICE_S, config.connect_timeout_s))
    except KafkaException as exc:
        error = exc.args[0]  # not the exception: its frames would hold `client` in a cycle
    reason = _refusal(config, clients)
    if reason is not None:
        raise KafkaSetupError(_cannot_reach(config, error, reason))
    try:  # a broker answered the other consumer meanwhile, or none answered at all
        return topic_partitions(client, topic, timeout_s=max(0.1, deadline - time.monotonic()))
    except KafkaException as exc:
        raise KafkaSetupError(_cannot_reach(config, exc.args[0], None)) from exc


def _refusal(config: Config, clients: KafkaClients) -> str | None:
    """Why a broker refused this client (its credentials or a certificate), by the log of a
    consumer of its own after one request of `ANSWER_SLICE_S`; None where a broker
    answered it or none said no by then."""
    captured = _CapturedLog()
    consumer = clients.consumer(consumer_config(config, None, logger=captured.logger))
    try:
        listing(consumer, (), ANSWER_SLICE_S)
        return None
    except KafkaException:
        consumer.poll(0)  # serves librdkafka's log lines of its attempts so far
        reason = captured.reason()
        return reason if reason and _refused(reason) else None
    finally:
        consumer.close()


def listing(consumer: Any, topics: tuple[str, ...], timeout_s: float) -> Any:
    """The cluster's metadata, each topic of `topics` it lacks asked for by name: a broker
    lists only the topics this principal may describe, and says TOPIC_AUTHORIZATION_FAILED
    only of a topic named."""
    metadata = consumer.list_topics(timeout=timeout_s)
    for name in absent(metadata.topics, topics):
        metadata.topics[name] = consumer.list_topics(name, timeout=timeout_s).topics[name]
    return metadata


def _awaited(topics: Mapping[str, Any], names: tuple[str, ...]) -> bool:
    """Whether a topic of `names` may still appear: absent, and not for want of an ACL."""
    return bool(set(absent(topics, names)) - set(forbidden(topics, names)))


def _cannot_reach(config: Config, error: KafkaError, reason: str | None) -> str:
    servers = config.bootstrap_servers
    if reason and "authentication" in reason.lower():  # a broker answered, and said no
        check = ("sasl_username and sasl_password (or sasl_password_file)"
                 if config.sasl_mechanism else "ssl_certfile and ssl_keyfile")
        return (f"the Kafka cluster at {servers} did not accept the credentials of "
                f"{principal(config) or 'this client'} ({reason}): check {check}")
    refused_tls = _tls_refusal(config, reason or "")
    if refused_tls:
        return refused_tls
    if error.code() in _UNREACHABLE:
        because = f" ({reason})" if reason else ""
        return (f"no Kafka broker answered at {servers} within {config.connect_timeout_s:g}s"
                f"{because}: set {SERVERS_SETTING} (or wait longer with --connect-timeout-s)")
    return f"the Kafka cluster at {servers} refused the connection: {error.str()}"


def _tls_refusal(config: Config, reason: str) -> str | None:
    """The line for a TLS handshake that a broker answered and one side refused: this client
    could not verify the broker's certificate, or the broker refused this client's. A broker
    did answer, so the bootstrap servers are not what to change."""
    servers = config.bootstrap_servers
    if "certificate verify failed" in reason:
        cafile = config.ssl_cafile or "none: the system's CAs"
        return (f"the Kafka brokers' certificate at {servers} could not be verified against "
                f"ssl_cafile ({cafile}) ({reason}): set ssl_cafile to the CA that signed "
                "the brokers' certificates, and name the brokers as their certificates do")
    if not _CERTIFICATE_REFUSED.search(reason):
        return None
    if not config.ssl_certfile:
        return (f"the Kafka cluster at {servers} asks for a client certificate ({reason}): "
                "set ssl_certfile and ssl_keyfile")
    return (f"the Kafka cluster at {servers} did not accept the client certificate of "
            f"{principal(config) or 'this client'}, ssl_certfile {config.ssl_certfile} "
            f"({reason}): give one that a CA the brokers trust signed and that has not "
            "expired")


def plural(names: list[str], noun: str) -> str:
    return noun if len(names) == 1 else f"{noun}s"


class _CapturedLog(logging.Handler):
    """Keeps librdkafka's log lines of one check off stderr; `reason` says why it failed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.Logger("inferstream.preflight.librdkafka")
        self.logger.addHandler(self)
        self.logger.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def reason(self) -> str | None:
        for line in reversed(self.lines):
            found = _REASON.search(line.strip())
            if found:
                return found.group("reason")
        return None
