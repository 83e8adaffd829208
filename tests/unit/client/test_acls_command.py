"""`inferstream acls --principal TYPE:NAME`: the bindings each role needs, as kafka-acls.sh
arguments or JSON, and `--apply` creating exactly those."""

from __future__ import annotations

import functools
import json
import socket
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding, AclOperation, ResourcePatternType, ResourceType

from inferstream.cli import main
from inferstream.client import acls_command
from inferstream.client.acls import role_bindings
from inferstream.config import Config, StreamConfig
from inferstream.kafka.settings import consumer_config
from inferstream.testing import MemoryBroker, MemoryKafkaClients

WORKER = """\
# worker
--add --allow-principal User:w --operation Read --topic inferstream.tasks.default --resource-pattern-type literal
--add --allow-principal User:w --operation Read --group inferstream.default.workers --resource-pattern-type literal
--add --allow-principal User:w --operation Write --transactional-id inferstream.default. --resource-pattern-type prefixed
--add --allow-principal User:w --operation Read --topic inferstream.policy --resource-pattern-type literal
--add --allow-principal User:w --operation Read --topic inferstream.task-control --resource-pattern-type literal
--add --allow-principal User:w --operation Write --topic inferstream.results --resource-pattern-type literal
--add --allow-principal User:w --operation Write --topic inferstream.dlq --resource-pattern-type literal
--add --allow-principal User:w --operation Write --topic inferstream.sysinfo --resource-pattern-type literal
--add --allow-principal User:w --operation Write --topic inferstream.workers --resource-pattern-type literal
--add --allow-principal User:w --operation Describe --group inferstream.readers --resource-pattern-type literal
"""  # noqa: E501


class AclAdmin:
    """An admin client that records the bindings it is asked to create."""

    def __init__(self, refuse: set[str] | None = None,
                 error: int = KafkaError.INVALID_REQUEST) -> None:
        self.created: list[AclBinding] = []
        self.refuse = refuse or set()
        self.error = error

    def create_acls(self, bindings: list[AclBinding], request_timeout: float
                    ) -> dict[AclBinding, Future[None]]:
        futures: dict[AclBinding, Future[None]] = {}
        for binding in bindings:
            future: Future[None] = Future()
            if binding.name in self.refuse:
                future.set_exception(KafkaException(KafkaError(self.error, "Refused")))
            else:
                self.created.append(binding)
                future.set_result(None)
            futures[binding] = future
        return futures


class AclClients(MemoryKafkaClients):
    def __init__(self, admin: AclAdmin) -> None:
        super().__init__(MemoryBroker())
        self.acl_admin = admin

    def admin(self, settings: dict[str, Any]) -> Any:
        return self.acl_admin


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["acls", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_worker_of_the_default_pool_gets_its_topics_group_and_transactional_ids(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--principal", "User:w", "--role", "worker")[:2] == (0, WORKER)


def test_a_custom_prefix_and_pools_name_every_binding(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--principal", "User:c", "--topic-prefix", "acme-",
                       "--pools", "gpu", "cpu", "--json")
    assert code == 0
    bindings = json.loads(out)
    assert {b["role"] for b in bindings} == {"worker", "controller", "sysinfo", "client"}
    names = {b["resource_name"] for b in bindings}
    assert all(name.startswith("acme-") for name in names), names
    controller = {(b["resource_type"], b["resource_name"], b["operation"])
                  for b in bindings if b["role"] == "controller"}
    assert {("topic", "acme-tasks.gpu", "write"), ("topic", "acme-tasks.cpu", "write"),
            ("group", "acme-gpu.workers", "describe"), ("group", "acme-cpu.workers", "describe"),
            ("group", "acme-controllers", "read"),
            ("transactional-id", "acme-controller.", "write")} <= controller
    sysinfo = {(b["resource_name"], b["pattern_type"], b["operation"])
               for b in bindings if b["role"] == "sysinfo"}
    assert {("acme-sysinfo-", "prefixed", "create"), ("acme-sysinfo", "literal", "read")
            } <= sysinfo


def test_the_names_are_those_the_roles_use() -> None:
    from inferstream.controller.transactions import PartitionProducers
    from inferstream.stream.source import StreamSource, stream_config
    from inferstream.sysinfo.app import Topology, faust_settings

    config = Config(topic_prefix="p.", pool="gpu",
                    stream=StreamConfig(input_topic="in", output_topic="out"))
    granted = {(b.resource, b.name) for b in role_bindings(
        config, ("controller", "sysinfo", "stream"), ("gpu",))}
    producers = PartitionProducers(config.controller_transactional_base(),
                                   lambda _tid: None, None)  # type: ignore[arg-type]
    assert ("transactional-id", producers.transactional_id(3).removesuffix("3")) in granted
    app_id = faust_settings(config, Topology(1, 1), "/tmp")["id"]
    assert ("group", app_id) in granted and ("topic", f"{app_id}-") in granted
    stream = StreamSource(stream_config(config), None)  # type: ignore[arg-type]
    assert ("group", stream.group_id) in granted
    assert ("transactional-id", stream_config(config).worker_transactional_prefix()
            ) in granted
    reader = consumer_config(config, None)["group.id"]
    assert all(("group", reader) in {(b.resource, b.name) for b in role_bindings(
        config, (role,), ("gpu",))} for role in ("worker", "controller", "stream", "client"))


def test_a_stream_member_gets_the_user_topics_it_names(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    code, out, _ = run(capsys, "--principal", "User:s", "--role", "stream", "--input-topic",
                       "uploads", "--output-topic", "labels", "--on-error", "dlq")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "# stream"
    assert ("--add --allow-principal User:s --operation Read --topic uploads "
            "--resource-pattern-type literal") in lines
    assert ("--add --allow-principal User:s --operation Write --topic labels "
            "--resource-pattern-type literal") in lines
    assert ("--add --allow-principal User:s --operation Write --topic inferstream.dlq "
            "--resource-pattern-type literal") in lines
    for topic in ("labels", "inferstream.dlq"):  # the limits of the records it writes
        assert (f"--add --allow-principal User:s --operation DescribeConfigs --topic {topic} "
                "--resource-pattern-type literal") in lines
    assert ("--add --allow-principal User:s --operation Read --group "
            "inferstream.stream.uploads.labels --resource-pattern-type literal") in lines


def test_role_narrows_and_a_stream_without_topics_is_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--principal", "User:x", "--role", "client", "--role", "admin")
    assert [line for line in out.splitlines() if line.startswith("#")] == ["# client",
                                                                           "# admin"]
    assert "--operation Create --topic inferstream. --resource-pattern-type prefixed" in out
    code, out, err = run(capsys, "--principal", "User:x", "--role", "stream")
    assert (code, out) == (2, "")
    assert err.strip().endswith("the stream's ACLs need its --input-topic and --output-topic")
    code, _, err = run(capsys, "--principal", "nobody")
    assert code == 2 and "is not TYPE:NAME" in err


def test_an_empty_prefix_gives_the_admin_create_on_the_cluster(
        capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--principal", "User:a", "--role", "admin", "--topic-prefix", "")
    assert ("--add --allow-principal User:a --operation Create --cluster "
            "--resource-pattern-type literal") in out.splitlines()


def test_apply_creates_exactly_the_printed_bindings(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    admin = AclAdmin()
    monkeypatch.setattr(acls_command, "apply_bindings", functools.partial(
        acls_command.apply_bindings, clients=AclClients(admin)))
    code, out, err = run(capsys, "--principal", "User:w", "--role", "worker", "--apply")
    assert (code, out) == (0, WORKER)
    printed = [line for line in out.splitlines() if not line.startswith("#")]
    assert len(admin.created) == len(printed) and f"created {len(printed)}" in err
    as_args = {_acls_args(b) for b in admin.created}
    assert as_args == set(printed)


def test_apply_names_the_binding_the_cluster_refused(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    admin = AclAdmin(refuse={"inferstream.default.workers"})
    monkeypatch.setattr(acls_command, "apply_bindings", functools.partial(
        acls_command.apply_bindings, clients=AclClients(admin)))
    code, out, err = run(capsys, "--principal", "User:w", "--role", "worker", "--apply")
    assert (code, out) == (2, "")
    assert ("cannot create ACL --add --allow-principal User:w --operation Read --group "
            "inferstream.default.workers") in err
    assert "Refused" in err


def test_apply_with_settings_not_an_admin_s_says_to_run_it_as_an_admin(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's reason is a Java request's toString, kilobytes long: it is left out."""
    admin = AclAdmin(refuse={"inferstream.default.workers"},
                     error=KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    monkeypatch.setattr(acls_command, "apply_bindings", functools.partial(
        acls_command.apply_bindings, clients=AclClients(admin)))
    code, out, err = run(capsys, "--principal", "User:w", "--role", "worker", "--apply",
                         "--sasl-username", "client", "--security-protocol", "SASL_SSL",
                         "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-password", "x")
    assert (code, out) == (2, "")
    assert err == ("inferstream: error: User:client may not create ACLs at localhost:9092 "
                   "(Alter on the cluster): run `inferstream acls ... --apply` with an "
                   "admin's settings (a super user's)\n")


def test_apply_without_a_broker_is_the_start_up_check_s_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, err = run(capsys, "--principal", "User:w", "--role", "worker", "--apply",
                         "--bootstrap-servers", f"127.0.0.1:{port}",
                         "--connect-timeout-s", "0.5")
    assert (code, out) == (2, "")
    assert err.startswith(f"inferstream: error: no Kafka broker answered at 127.0.0.1:{port} "
                          "within 0.5s")
    assert len(err.splitlines()) == 1


def _acls_args(binding: AclBinding) -> str:
    """The kafka-acls.sh arguments of a confluent-kafka binding, written independently of
    the command's own formatting."""
    flags = {ResourceType.TOPIC: "--topic", ResourceType.GROUP: "--group",
             ResourceType.TRANSACTIONAL_ID: "--transactional-id"}
    operations = {AclOperation.READ: "Read", AclOperation.WRITE: "Write",
                  AclOperation.DESCRIBE: "Describe"}
    pattern = {ResourcePatternType.LITERAL: "literal", ResourcePatternType.PREFIXED: "prefixed"}
    return (f"--add --allow-principal {binding.principal} --operation "
            f"{operations[binding.operation]} {flags[binding.restype]} {binding.name} "
            f"--resource-pattern-type {pattern[binding.resource_pattern_type]}")
