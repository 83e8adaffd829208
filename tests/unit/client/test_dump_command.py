"""`inferstream dump TOPIC` on the in-memory broker: every inferstream record decoded into one
JSON line, bytes shown readably, undecodable values with an error, where it starts and stops,
read_uncommitted unless --committed, and one-line errors (issue 14.5)."""

from __future__ import annotations

import argparse
import base64
import copy
import functools
import json
import math
import socket
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError

from inferstream.cli import main
from inferstream.client import dump as dump_module
from inferstream.client.dump import DumpOptions, dump_topic, resolve_topic
from inferstream.client.dump_command import dump_args, dump_options
from inferstream.kafka import preflight
from inferstream.kafka.errors import AuthorizationError
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.testing.clients.metadata import MemoryMessage
from tests.unit.examples import EXAMPLES
from tests.unit.kafka.test_preflight import ForbiddingClients
from tests.unit.support.memory import CODEC, make_config

CONNECTION = ["--bootstrap-servers", "mem:1", "--topic-prefix", "t.", "--partitions", "2"]
Cli = Callable[..., tuple[int, list[dict[str, Any]], str]]


@pytest.fixture
def cli(broker: MemoryBroker, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Cli:
    """`inferstream dump ARGS...` on the in-memory broker: (exit code, lines, stderr)."""
    clients = MemoryKafkaClients(broker)
    monkeypatch.setattr(dump_module, "dump_topic",
                        functools.partial(dump_topic, codec=CODEC, clients=clients))
    check_cluster = preflight.check_cluster
    monkeypatch.setattr(preflight, "check_cluster",
                        lambda config, topics=(), _=None, user_topics=(), role=None:
                        check_cluster(config, topics, clients, user_topics, role))

    def run(*argv: str) -> tuple[int, list[dict[str, Any]], str]:
        code = main(["dump", *argv, *CONNECTION])
        out, err = capsys.readouterr()
        return code, [json.loads(line) for line in out.splitlines()], err
    return run


def put(broker: MemoryBroker, topic: str, name: str | None, value: bytes | None = None, *,
        partition: int = 0, key: bytes | None = b"job-1",
        headers: tuple[tuple[str, bytes], ...] = ()) -> None:
    data = CODEC.encode(name, EXAMPLES[name]) if name else value
    broker.produce(topic, partition, key, data, headers=headers)


def test_every_inferstream_record_is_one_json_line_decoded(broker: MemoryBroker, cli: Cli
                                                          ) -> None:
    put(broker, "t.jobs", "Job", headers=(("trace", b"abc"), ("bin", b"\x00\xff")))
    put(broker, "t.jobs", "TaskControl", partition=1)
    code, lines, err = cli("jobs", "--from-beginning")
    assert code == 0, err
    job = next(line for line in lines if line["schema"] == "Job")
    assert {line["schema"] for line in lines} == {"Job", "TaskControl"}
    assert (job["topic"], job["partition"], job["offset"], job["key"]) == ("t.jobs", 0, 0,
                                                                           "job-1")
    assert isinstance(job["timestamp"], int)
    assert job["headers"] == [["trace", "abc"], ["bin", {"length": 2, "hex": "00ff",
                                                         "text": ".."}]]
    expected = dict(EXAMPLES["Job"], inline_items=[
        {"name": "tiny.png", "data": {"length": 8, "hex": "89504e470d0a1a0a",
                                      "text": ".PNG...."}}])
    assert job["value"] == expected
    assert "error" not in job


def test_a_nan_score_is_dumped_as_null(broker: MemoryBroker, cli: Cli) -> None:
    """A model's NaN in a result record: the dump line stays strict JSON."""
    result = copy.deepcopy(EXAMPLES["TaskResult"])
    result["items"][0]["top_k"][0]["score"] = math.nan
    put(broker, "t.results", None, CODEC.encode("TaskResult", result))
    code, [line], err = cli("results", "--from-beginning")
    assert code == 0, err
    assert line["value"]["items"][0]["top_k"] == [
        {"class_id": 281, "label": "tabby", "score": None},
        {"class_id": 285, "label": "Egyptian cat", "score": 0.125}]


def test_bytes_can_be_shown_whole_in_base64(broker: MemoryBroker, cli: Cli) -> None:
    put(broker, "t.jobs", "Job")
    _, [line], _ = cli("jobs", "--from-beginning", "--bytes", "base64")
    data = line["value"]["inline_items"][0]["data"]
    assert base64.b64decode(data["base64"]) == b"\x89PNG\r\n\x1a\n"


def test_a_dead_letter_shows_the_head_of_the_original_bytes(broker: MemoryBroker, cli: Cli
                                                            ) -> None:
    letter = dict(EXAMPLES["DeadLetter"], value=b"not avro at all: \x00\x01" + bytes(100))
    broker.produce("t.dlq", 0, b"k", CODEC.encode("DeadLetter", letter))
    _, [line], _ = cli("dlq", "--from-beginning")
    value = line["value"]["value"]
    assert value["length"] == 119
    assert value["hex"].startswith(b"not avro at all: ".hex() + "0001")
    assert value["text"] == "not avro at all: ..............."


def test_undecodable_values_get_an_error_never_a_traceback(broker: MemoryBroker, cli: Cli
                                                           ) -> None:
    put(broker, "t.results", None, b"\xc3\x01" + bytes(8) + b"body")  # unknown fingerprint
    put(broker, "t.results", None, b'{"looks": "like json"}')  # not on an inferstream topic
    put(broker, "t.results", None, CODEC.encode("JobEvent", EXAMPLES["JobEvent"])[:14])
    put(broker, "t.results", None, b"\x00\x00\x00\x00\x07rest")  # registry id, no registry
    code, lines, err = cli("results", "--from-beginning")
    assert code == 0 and "Traceback" not in err
    assert [line["error"].split(":")[0] for line in lines] == [
        "unknown fingerprint 0x0000000000000000", "bad magic 0x7b22",
        "truncated JobEvent record", "unknown schema id 7"]
    assert lines[1]["raw"] == {"length": 22, "hex": b'{"looks": "like json"}'.hex(),
                               "text": '{"looks": "like json"}'}
    assert all(line.get("value") is None for line in lines)


def test_a_foreign_topic_shows_json_text_or_the_bytes(broker: MemoryBroker, cli: Cli) -> None:
    broker.create_topic("labels")
    put(broker, "labels", None, b'{"status": "ok"}', key=None)
    put(broker, "labels", None, b"plain words")
    put(broker, "labels", None, b"\xff\xfe\x00")
    put(broker, "labels", "StreamResult")
    _, lines, _ = cli("labels", "--from-beginning")
    assert [line.get("format") or line.get("schema") for line in lines] == [
        "json", "text", None, "StreamResult"]
    assert lines[0]["value"] == {"status": "ok"} and lines[0]["key"] is None
    assert lines[1]["value"] == "plain words"
    assert lines[2]["error"].startswith("not JSON or UTF-8 text, and bad magic 0xfffe")
    assert lines[2]["raw"]["hex"] == "fffe00"


def test_a_tombstone_is_a_null_value(broker: MemoryBroker, cli: Cli) -> None:
    put(broker, "t.policy", "PolicyEntry", key=b"default/w1")
    put(broker, "t.policy", None, None, key=b"default/w1")
    _, lines, _ = cli("policy", "--from-beginning")
    assert [line["value"] is None for line in lines] == [False, True]
    assert lines[1]["key"] == "default/w1" and "error" not in lines[1]


def test_uncommitted_records_show_unless_committed(broker: MemoryBroker, cli: Cli) -> None:
    put(broker, "t.results", "TaskResult")
    epoch = broker.init_transactions("w")
    broker.begin("w", epoch, 60)
    broker.produce_transactional("w", epoch, "t.results", 0, b"job-1",
                                 CODEC.encode("TaskResult", dict(EXAMPLES["TaskResult"],
                                                                 attempt=2)))
    broker.end_transaction("w", epoch, commit=False)
    _, everything, _ = cli("results", "--from-beginning")
    _, committed, _ = cli("results", "--from-beginning", "--committed")
    assert [line["value"]["attempt"] for line in everything] == [1, 2]
    assert [line["value"]["attempt"] for line in committed] == [1]


def test_without_follow_it_stops_at_the_end_as_of_the_start(broker: MemoryBroker) -> None:
    """Records written while the dump runs are left for the next one."""
    for task_id in range(3):
        broker.produce("t.job-events", 0, b"j", CODEC.encode(
            "JobEvent", dict(EXAMPLES["JobEvent"], done_items=task_id)))
    seen: list[dict[str, Any]] = []

    def write(line: dict[str, Any]) -> None:
        seen.append(line)
        put(broker, "t.job-events", "JobEvent")  # more arrive while it reads

    count = dump_topic(make_config(), "job-events", DumpOptions(from_beginning=True), write,
                       CODEC, MemoryKafkaClients(broker))
    assert count == 3
    assert [line["value"]["done_items"] for line in seen] == [0, 1, 2]


def test_from_the_end_it_shows_only_new_records_and_count_bounds_follow(
        broker: MemoryBroker) -> None:
    put(broker, "t.sysinfo", "SysInfoSample")
    seen: list[dict[str, Any]] = []
    clients = MemoryKafkaClients(broker)
    consumer = clients.consumer  # the dump's consumer assigns itself; then a sample lands

    def consumer_then_write(settings: dict[str, Any]) -> Any:
        made = consumer(settings)
        original = made.assign

        def assign(partitions: list[Any]) -> None:
            original(partitions)
            made.consume(100, 0)  # resolve the end positions before the new record lands
            put(broker, "t.sysinfo", "SysInfoSample", partition=1, key=b"new")
        made.assign = assign  # type: ignore[method-assign]
        return made
    clients.consumer = consumer_then_write  # type: ignore[method-assign]
    count = dump_topic(make_config(), "sysinfo", DumpOptions(follow=True, count=1), seen.append,
                       CODEC, clients)
    assert count == 1 and [line["key"] for line in seen] == ["new"]


def test_a_dump_from_the_end_follows_and_one_from_the_beginning_stops_at_the_end() -> None:
    parser = argparse.ArgumentParser()
    dump_args(parser)
    assert dump_options(parser.parse_args(["jobs"])).follow
    assert not dump_options(parser.parse_args(["jobs", "--from-beginning"])).follow
    assert dump_options(parser.parse_args(["jobs", "--from-beginning", "--follow"])).follow


def test_topic_names_are_short_names_under_the_prefix_or_full_names() -> None:
    config = make_config()
    assert resolve_topic(config, "jobs").name == "t.jobs"
    assert resolve_topic(config, "ledger").name == "t.controller-ledger"
    assert resolve_topic(config, "tasks").name == "t.tasks.default"
    assert resolve_topic(config, "tasks.gpu").name == "t.tasks.gpu"
    assert resolve_topic(config, "t.results").ours
    assert not resolve_topic(config, "uploads").ours
    assert resolve_topic(config, "uploads").name == "uploads"


def test_an_unknown_topic_is_one_line_with_the_names(cli: Cli) -> None:
    code, lines, err = cli("job-event", "--from-beginning")
    assert (code, lines) == (2, [])
    [line] = err.strip().splitlines()
    assert line.startswith("inferstream: error: no topic job-event at mem:1: give one of jobs,")
    code, _, err = cli("tasks.gpu", "--from-beginning")
    # the pool's own topic: `--pool default` made every topic but this one
    assert err == ("inferstream: error: no topic t.tasks.gpu at mem:1: run `inferstream topics "
                   "create` (with --topic-prefix 't.' and --pool gpu)\n")


def test_no_broker_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    assert main(["dump", "jobs", "--bootstrap-servers", address,
                 "--connect-timeout-s", "0.1"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"inferstream: error: no Kafka broker answered at {address}")


class ReadRefusedClients(MemoryKafkaClients):
    """The in-memory clients of a principal that may describe topic `refused` but not read
    it: each fetch of it is the broker's TOPIC_AUTHORIZATION_FAILED."""

    def __init__(self, broker: MemoryBroker, refused: str) -> None:
        super().__init__(broker)
        self.refused = refused

    def consumer(self, settings: dict[str, Any]) -> Any:
        consumer = super().consumer(settings)
        error = MemoryMessage(self.refused, 0, -1,
                              error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
        consumer.consume = lambda num_messages=1, timeout=-1: [error]
        return consumer


@pytest.mark.parametrize(("what", "make_clients"), [
    ("describe", lambda broker: ForbiddingClients(broker, {"t.results"})),
    ("read", lambda broker: ReadRefusedClients(broker, "t.results"))])
def test_a_topic_refused_to_this_principal_is_not_called_missing(
        what: str, make_clients: Callable[[MemoryBroker], MemoryKafkaClients],
        broker: MemoryBroker) -> None:
    """A principal without Describe on a topic was told `no topic ...: run inferstream topics
    create`, and one without Read the broker's words alone, without who or what to grant."""
    put(broker, "t.results", "TaskResult")
    config = make_config(sasl_username="nobody", security_protocol="SASL_SSL",
                         sasl_mechanism="SCRAM-SHA-512")
    with pytest.raises(AuthorizationError) as raised:
        dump_topic(config, "results", DumpOptions(from_beginning=True), print, CODEC,
                   make_clients(broker))
    assert str(raised.value) == (
        f"User:nobody may not {what} topic t.results at {config.bootstrap_servers}: no ACL "
        "allows it; dump needs Read on it (an admin grants it: kafka-acls.sh --add "
        "--allow-principal User:nobody --operation Read --topic t.results)")
