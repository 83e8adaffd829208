"""Start-up checks: bad pass-through settings, no broker, missing topics, a port in use and a
bad log level are one line and a non-zero exit, before any client is built (issue 9, 4 + 6)."""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from inferstream.cli import main
from inferstream.config import Config
from inferstream.errors import ConfigError
from inferstream.kafka import preflight as checks
from inferstream.kafka.errors import KafkaSetupError
from inferstream.kafka.passthrough import check_pass_through
from inferstream.kafka.preflight import check_cluster, check_groups, check_port_free
from inferstream.kafka.refusals import grant_command, not_authorized, principal
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.testing.clients.metadata import TopicMetadata

#: A client certificate CN=worker, issued by CN=inferstream test CA (openssl, P-256).
CERTIFICATE = """\
-----BEGIN CERTIFICATE-----
MIIBKzCB0gIUCwyh0HPb2EFu6bAcqeON68BJVcswCgYIKoZIzj0EAwIwHjEcMBoG
A1UEAwwTaW5mZXJzdHJlYW0gdGVzdCBDQTAgFw0yNjEyMDUxNzM5MzBaGA8yMTI2
MTExMTE3MzkzMFowETEPMA0GA1UEAwwGd29ya2VyMFkwEwYHKoZIzj0CAQYIKoZI
zj0DAQcDQgAEaIjdhAj2s4iONeANQcNR1YWKpEUtfGHWLaWOqY3/3Cn8VMj/ow4i
CjQmC2kwYye08LmY9hZcsNeONdEHGV2q9DAKBggqhkjOPQQDAgNIADBFAiEAqDSi
fSUyc05KkHR2NnZ/EItKUwDTtyNoDD0oZPZ6MfACIEpJ0VNwAdUVtEBfnoVu2n9K
mjJmfHcKt+x6Bbf7UC7r
-----END CERTIFICATE-----
"""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("INFERSTREAM_"):
            monkeypatch.delenv(name)


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A loopback port something listens on."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        yield sock.getsockname()[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("inferstream: error: ")
    return lines[0]


# -- pass-through settings, for every command ----------------------------------------------
BAD_SETTINGS = [
    ("linger.ms=abc", "Invalid value"),  # the worker hung on this (a TypeError in aiokafka)
    ("foo.bar=1", "no such setting in librdkafka or aiokafka"),
    ("consumer.timeout.ms=abc", "aiokafka expects a whole number"),  # aiokafka-only key
    ("enable.idempotence=false", "duplicate results"),
    ("acks=1", "lost"),
    ("isolation.level=read_uncommitted", "aborted transactions"),
    ("enable.auto.commit=true", "one transaction"),
    ("bootstrap.servers=elsewhere:9092", "--bootstrap-servers"),
    ("max.in.flight=10", "do not work together"),
]


@pytest.mark.parametrize("command", [["status"], ["worker", "--model", "sim:ms=1"],
                                     ["submit", "--model", "m", "--input", "x"]])
@pytest.mark.parametrize(("setting", "reason"), BAD_SETTINGS[:2])
def test_a_bad_pass_through_setting_is_one_line_for_every_command(
        command: list[str], setting: str, reason: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--kafka-config", setting,
                 "--bootstrap-servers", f"127.0.0.1:{free_port()}"]) == 2
    line = one_line_error(capsys)
    assert f"--kafka-config (INFERSTREAM_KAFKA_CONFIG) {setting}" in line
    assert reason in line


@pytest.mark.parametrize(("setting", "reason"), BAD_SETTINGS)
def test_pass_through_settings_are_refused_with_the_key_and_a_reason(
        setting: str, reason: str) -> None:
    key, _, value = setting.partition("=")
    config = Config(kafka_config=((key, value),))
    with pytest.raises(ConfigError, match=reason) as raised:
        check_pass_through(config, librdkafka=setting != "consumer.timeout.ms=abc",
                           aiokafka=True)
    assert key in str(raised.value) or "max.in.flight" in str(raised.value)


def test_secrets_stay_masked_in_the_error() -> None:
    config = Config(kafka_config=(("sasl.password", "hunter2"),))
    with pytest.raises(ConfigError) as raised:
        check_pass_through(config, librdkafka=True, aiokafka=False)
    assert "hunter2" not in str(raised.value)
    assert "--sasl-password" in str(raised.value)


def test_good_settings_pass_and_the_worker_is_told_what_aiokafka_ignores() -> None:
    config = Config(kafka_config=(("linger.ms", "20"), ("socket.keepalive.enable", "true"),
                                  ("acks", "all"), ("max.poll.records", "100")))
    assert check_pass_through(config, librdkafka=True, aiokafka=False) == []
    warnings = check_pass_through(config, librdkafka=False, aiokafka=True)
    assert len(warnings) == 1
    assert "socket.keepalive.enable" in warnings[0]
    assert "the worker ignores it" in warnings[0]


def test_an_aiokafka_only_setting_is_refused_by_the_librdkafka_commands() -> None:
    config = Config(kafka_config=(("consumer.timeout.ms", "100"),))
    assert check_pass_through(config, librdkafka=False, aiokafka=True) == []
    with pytest.raises(ConfigError, match="librdkafka has no such setting"):
        check_pass_through(config, librdkafka=True, aiokafka=False)


# -- the cluster -------------------------------------------------------------------------------
def test_no_broker_is_one_line_naming_the_address_and_the_setting() -> None:
    address = f"127.0.0.1:{free_port()}"
    config = Config(bootstrap_servers=address, connect_timeout_s=0.1)
    with pytest.raises(KafkaSetupError) as raised:
        check_cluster(config)
    message = str(raised.value)
    assert address in message
    assert "--bootstrap-servers or INFERSTREAM_BOOTSTRAP_SERVERS" in message
    assert "\n" not in message


def test_missing_topics_say_to_create_them() -> None:
    broker = MemoryBroker()
    config = Config(topic_prefix="t.", connect_timeout_s=0.1)
    broker.create_topic("t.jobs", partitions=2)
    check_cluster(config, ("t.jobs",), MemoryKafkaClients(broker))
    with pytest.raises(KafkaSetupError, match="run `inferstream topics create`") as raised:
        check_cluster(config, ("t.jobs", "t.results"), MemoryKafkaClients(broker))
    assert "t.results" in str(raised.value)
    assert "t.jobs," not in str(raised.value)


class LateTopicClients(MemoryKafkaClients):
    """The in-memory clients of a cluster where `topic` appears once a consumer has asked for
    it by name and been told it is not there: a topic created a moment ago."""

    def __init__(self, broker: MemoryBroker, topic: str) -> None:
        super().__init__(broker)
        self.late_broker, self.topic = broker, topic
        self.listings = 0

    def consumer(self, settings: dict[str, Any]) -> Any:
        consumer = super().consumer(settings)
        described = consumer.list_topics

        def list_topics(topic: str | None = None, timeout: float = -1) -> Any:
            metadata = described(topic, timeout)
            self.listings += 1
            if topic == self.topic and self.listings == 2:  # its first answer: not there
                assert metadata.topics[topic].error is not None
                self.late_broker.create_topic(topic, partitions=2)
            return metadata

        consumer.list_topics = list_topics  # type: ignore[method-assign]
        return consumer


def test_a_topic_created_a_moment_ago_is_not_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first metadata may come from a broker that does not show the new topic yet: it is
    asked again within connect_timeout_s before it is called missing."""
    monkeypatch.setattr(checks, "TOPIC_RETRY_S", 0.01)
    config = Config(topic_prefix="t.", connect_timeout_s=5.0)
    clients = LateTopicClients(MemoryBroker(), "t.results")
    check_cluster(config, ("t.results",), clients)
    assert clients.listings == 3  # all topics, t.results by name (missing), all topics again


class ForbiddingClients(MemoryKafkaClients):
    """The in-memory clients of a principal that may not describe `forbidden` topics."""

    def __init__(self, broker: MemoryBroker, forbidden: set[str]) -> None:
        super().__init__(broker)
        self.forbidden = forbidden
        self.listings = 0

    def consumer(self, settings: dict[str, Any]) -> Any:
        consumer = super().consumer(settings)
        described = consumer.list_topics

        def list_topics(topic: str | None = None, timeout: float = -1) -> Any:
            """A broker lists only the topics a principal may describe, and says that it
            may not only of a topic asked for by name."""
            metadata = described(topic, timeout)
            if topic is None:
                self.listings += 1
                for name in self.forbidden:
                    metadata.topics.pop(name, None)
            elif topic in self.forbidden:
                metadata.topics[topic] = TopicMetadata(
                    topic, error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
            return metadata

        consumer.list_topics = list_topics  # type: ignore[method-assign]
        return consumer


def test_topics_a_principal_may_not_describe_are_named_with_the_acls_that_grant_them() -> None:
    broker = MemoryBroker()
    for name in ("t.jobs", "t.results", "t.job-events"):
        broker.create_topic(name, partitions=2)
    config = Config(topic_prefix="t.", pool="gpu", connect_timeout_s=5.0,
                    security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                    sasl_username="nobody", sasl_password="pw")  # noqa: S106 (a test value)
    clients = ForbiddingClients(broker, {"t.results", "t.job-events"})
    with pytest.raises(KafkaSetupError) as raised:
        check_cluster(config, config.topics("jobs", "results", "job-events"), clients,
                      role="client")
    assert str(raised.value) == (
        "User:nobody may not describe topics t.results, t.job-events at localhost:9092: no ACL "
        "allows it; an admin grants the client's ACLs with `inferstream acls --principal "
        "User:nobody --role client --topic-prefix 't.' --pool gpu --apply`")
    assert clients.listings == 1  # an ACL does not come by waiting: no retry till the timeout


class GroupRefusingAdmin:
    """An admin client of a principal that may describe no group."""

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Any]:
        refused = {}
        for group in groups:
            refused[group] = Future()
            refused[group].set_exception(KafkaException(
                KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)))
        return refused


def test_groups_a_principal_may_not_use_are_named_before_the_role_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clients = MemoryKafkaClients(MemoryBroker())
    config = Config(sasl_username="nobody")
    check_groups(config, (config.worker_group(),), clients, "worker")  # the memory broker's
    monkeypatch.setattr(clients, "admin", lambda _settings: GroupRefusingAdmin())
    with pytest.raises(KafkaSetupError) as raised:
        check_groups(config, (config.controller_group(), config.worker_group()), clients,
                     "controller")
    assert str(raised.value).startswith(
        "User:nobody may not use groups inferstream.controllers, inferstream.default.workers "
        "at localhost:9092: no ACL allows it; an admin grants the controller's ACLs with "
        "`inferstream acls --principal User:nobody --role controller --apply`")


def test_a_wrong_password_is_said_to_be_one_not_an_unreachable_broker() -> None:
    config = Config(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                    sasl_username="nobody")
    reason = ("SASL authentication error: Authentication failed during authentication due to "
              "invalid credentials with SASL mechanism SCRAM-SHA-512")
    line = checks._cannot_reach(config, KafkaError(KafkaError._TRANSPORT), reason)
    assert line == (f"the Kafka cluster at localhost:9092 did not accept the credentials of "
                    f"User:nobody ({reason}): check sasl_username and sasl_password (or "
                    "sasl_password_file)")


def test_the_principal_of_a_client_certificate_is_its_cn(tmp_path: Path) -> None:
    pem = tmp_path / "worker.pem"
    pem.write_text(CERTIFICATE)
    config = Config(security_protocol="SSL", ssl_certfile=str(pem))
    assert principal(config) == "User:worker"
    assert grant_command(config, "worker") == (
        "inferstream acls --principal User:worker --role worker --apply")
    (tmp_path / "junk.pem").write_text("not a certificate")
    unknown = Config(security_protocol="SSL", ssl_certfile=str(tmp_path / "junk.pem"))
    assert str(not_authorized(unknown, None, "join group g")).startswith(
        "this principal may not join group g at localhost:9092")
    assert grant_command(unknown, None) == (
        "inferstream acls --principal User:NAME --role ROLE --apply")


def test_a_principal_refused_through_the_cli_is_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    broker = MemoryBroker()
    broker.create_topic("inferstream.job-events", partitions=2)
    clients = ForbiddingClients(broker, {"inferstream.job-events"})
    monkeypatch.setattr(checks, "preflight", functools.partial(checks.preflight,
                                                                clients=clients))
    assert main(["status", "--sasl-username", "nobody"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "User:nobody may not describe topic inferstream.job-events" in err
    assert "`inferstream acls --principal User:nobody --role client --apply`" in err


# -- local mistakes --------------------------------------------------------------------------
def test_a_metrics_port_in_use_is_one_line(listening_port: int,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=f"--metrics-port {listening_port} is in use"):
        check_port_free(listening_port)
    assert main(["worker", "--model", "sim:ms=1", "--metrics-port", str(listening_port),
                 "--bootstrap-servers", f"127.0.0.1:{free_port()}"]) == 2
    assert f"--metrics-port {listening_port}" in one_line_error(capsys)


def test_a_bad_log_level_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--log-level", "LOUD"]) == 2
    assert "--log-level 'LOUD' is not one of DEBUG" in one_line_error(capsys)


@pytest.mark.parametrize("setting", [("bootstrap_servers", "elsewhere:9092"),
                                     ("isolation_level", "read_uncommitted")])
def test_aiokafka_spellings_of_guarded_keys_are_refused_too(setting: tuple[str, str]) -> None:
    with pytest.raises(ConfigError, match=setting[0]):
        check_pass_through(Config(kafka_config=(setting,)), librdkafka=False, aiokafka=True)


def test_metrics_listen_on_loopback_by_default_and_a_foreign_address_is_one_line() -> None:
    import urllib.request

    from prometheus_client import CollectorRegistry

    from inferstream.config import WorkerConfig
    from inferstream.metrics import serve_metrics
    from inferstream.worker.metrics import WorkerMetrics

    assert WorkerConfig().metrics_addr == "127.0.0.1"
    metrics = WorkerMetrics(CollectorRegistry())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve_metrics(metrics.registry, port, "127.0.0.1")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert b"inferstream_items_processed_total" in answer.read()
    with pytest.raises(ConfigError, match=r"--metrics-addr 192\.0\.2\.1 --metrics-port"):
        serve_metrics(metrics.registry, port + 1 if port < 65535 else port - 1, "192.0.2.1")


# Every role that serves HTTP: its address flag and the flags it needs to get that far.
BINDING_ROLES = {
    "sysinfo": ("--port", "--bind", []),
    "controller": ("--metrics-port", "--metrics-addr", []),
    "worker": ("--metrics-port", "--metrics-addr", ["--model", "sim:ms=1"]),
    "stream": ("--metrics-port", "--metrics-addr",
               ["--model", "sim:ms=1", "--input-topic", "in", "--output-topic", "out"]),
}


@pytest.mark.parametrize("role", sorted(BINDING_ROLES))
@pytest.mark.parametrize("addr", ["192.0.2.1", "nohost.invalid"])
def test_an_address_not_of_this_host_is_one_line_before_any_child_starts(
        role: str, addr: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from inferstream import supervise

    monkeypatch.setattr(supervise, "supervise", lambda *_: pytest.fail("a child started"))
    port_flag, addr_flag, extra = BINDING_ROLES[role]
    assert main([role, *extra, port_flag, str(free_port()), addr_flag, addr,
                 "--bootstrap-servers", f"127.0.0.1:{free_port()}",
                 "--connect-timeout-s", "0.5"]) == 2
    assert f"{addr_flag} {addr} is not" in one_line_error(capsys)


def test_a_port_is_checked_on_the_address_given() -> None:
    check_port_free(free_port(), "--port", "127.0.0.1", "--bind")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--port {port} is in use on 127.0.0.1"):
            check_port_free(port, "--port", "127.0.0.1", "--bind")
