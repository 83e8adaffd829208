"""Durability on a 3-broker cluster: replication factor 3, min ISR 2, brokers killed and back;
and a group described while its coordinator's broker is killed.

The cluster has a KRaft controller of its own (ops/kafka/cluster), as a production cluster
has: with two of three brokers killed it fences them within the broker session timeout and
the ISR shrinks to the leader, which then refuses an `acks=all` write (NOT_ENOUGH_REPLICAS)
without appending it. Until then the leader appends the write and waits for the dead
followers: it is answered REQUEST_TIMED_OUT, and shows up once they are back. (When every
broker was a controller too, killing two took the metadata quorum with them: the ISR never
shrank, and every write of the outage was answered REQUEST_TIMED_OUT and showed up later:
"20 of 20 writes succeeded" in issue 26.6.)
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from inferstream.config import Config
from inferstream.kafka.settings import LIBRDKAFKA_LOG, PARTITION_EOF, producer_config
from inferstream.kafka.topics import wait_until_visible
from tests.integration.conftest import CLUSTER, start_cluster

pytestmark = pytest.mark.integration

#: Broker 1 leads the test partition and is never killed; 3, then 2, are.
SURVIVOR, FIRST_KILLED, SECOND_KILLED = 1, 3, 2
#: How a write without enough in-sync replicas is turned down (see the module docstring).
REFUSALS = {"NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT"}
#: Not idempotent and no retries, so the broker's answer reaches us rather than a local
#: "message timed out" after librdkafka's retries.
ONE_TRY = {"enable.idempotence": False, "retries": 0, "request.timeout.ms": 5_000,
           "message.timeout.ms": 60_000}


@dataclass(frozen=True)
class Cluster:
    directory: Path
    servers: str

    def kill(self, broker: int) -> None:
        self._run("kill", str(broker))

    def restart(self, broker: int) -> None:
        self._run("restart", str(broker))

    def _run(self, *args: str) -> None:
        proc = subprocess.run([sys.executable, str(CLUSTER), *args, "--dir", str(self.directory)],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, f"cluster {' '.join(args)}: {proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("kafka3")
    try:
        yield Cluster(directory, start_cluster(directory, brokers=3))
    finally:
        subprocess.run([sys.executable, str(CLUSTER), "clean", "--dir", str(directory)],
                       capture_output=True, timeout=120, check=False)


def send(config: Config, topic: str, values: list[str], **overrides: object) -> list[str]:
    """Produce `values` to partition 0 with acks=all; one outcome per value: OK or error name."""
    producer = Producer(producer_config(config, **overrides))
    outcomes: dict[str, str] = {}

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        value = msg.value().decode()  # type: ignore[attr-defined]
        outcomes[value] = "OK" if err is None else err.name()

    for value in values:
        producer.produce(topic, value.encode(), partition=0, on_delivery=on_delivery)
    assert producer.flush(120) == 0, "delivery reports still pending after 120 s"
    return [outcomes[v] for v in values]


def committed_values(config: Config, topic: str) -> list[str]:
    """Everything in partition 0, read committed, up to its end."""
    consumer = Consumer(config.confluent_config(**{
        "logger": LIBRDKAFKA_LOG, "group.id": "unused", "enable.partition.eof": True,
        "isolation.level": "read_committed"}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() and msg.error().code() == PARTITION_EOF:
                return values
            assert not msg.error(), msg.error()
            values.append(msg.value().decode())
    finally:
        consumer.close()
    raise AssertionError(f"no end of {topic} within 60 s; read {values}")


def describe_topic_configs(admin: AdminClient, topic: str, timeout_s: float = 60
                           ) -> dict[str, Any]:
    """The topic's configs, asking again while a broker has not yet learnt of the topic."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            configs: dict[str, Any] = admin.describe_configs([resource])[resource].result(60)
            return configs
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or (
                    time.monotonic() > deadline):
                raise
            time.sleep(0.2)


def create_rf3_topic(config: Config, topic: str) -> None:
    admin = AdminClient(config.confluent_config(logger=LIBRDKAFKA_LOG))
    # The survivor is the preferred leader, so the partition keeps a live leader throughout.
    new = NewTopic(topic, num_partitions=1,
                   replica_assignment=[[SURVIVOR, FIRST_KILLED, SECOND_KILLED]])
    for future in admin.create_topics([new]).values():
        future.result(60)
    wait_until_visible(admin, {topic: 1}, timeout_s=60)
    configs = describe_topic_configs(admin, topic)
    assert configs["min.insync.replicas"].value == "2"  # the cluster default, not set here
    replicas = admin.list_topics(topic, timeout=30).topics[topic].partitions[0].replicas
    assert sorted(replicas) == [1, 2, 3]


@pytest.mark.timeout(600)
def test_acks_all_writes_need_two_live_replicas(cluster: Cluster) -> None:
    config = Config(bootstrap_servers=cluster.servers)
    topic = f"t{uuid.uuid4().hex[:10]}.rf3"
    create_rf3_topic(config, topic)
    # Idempotent, acks=all (producer_config); long enough to ride out a leader or ISR change.
    patient = {"message.timeout.ms": 90_000, "request.timeout.ms": 30_000}
    acknowledged = ["all-up-0", "all-up-1"]
    assert send(config, topic, acknowledged, **patient) == ["OK", "OK"]

    cluster.kill(FIRST_KILLED)
    one_down = ["one-down-0", "one-down-1", "one-down-2"]
    assert send(config, topic, one_down, **patient) == ["OK"] * 3
    acknowledged += one_down

    cluster.kill(SECOND_KILLED)
    refused = send(config, topic, ["two-down-0"], **ONE_TRY)
    assert refused[0] in REFUSALS, refused
    # Once the controller has fenced both, the leader refuses writes before appending them,
    # as a production cluster does: none of them shows up when the brokers are back.
    wait_for_isr(config, topic, [SURVIVOR])
    fenced = [f"fenced-{i}" for i in range(20)]
    assert send(config, topic, fenced, **ONE_TRY) == ["NOT_ENOUGH_REPLICAS"] * 20

    cluster.restart(SECOND_KILLED)
    cluster.restart(FIRST_KILLED)
    back = ["back-0", "back-1"]
    assert send(config, topic, back, **patient) == ["OK", "OK"]
    acknowledged += back

    # Nothing acknowledged was lost and nothing was written twice. (A write that timed out
    # may still have been appended by the leader and show up: only acknowledged ones count.)
    stored = committed_values(config, topic)
    assert [v for v in stored if v in acknowledged] == acknowledged
    assert not set(fenced) & set(stored)


def wait_for_isr(config: Config, topic: str, isr: list[int], timeout_s: float = 60) -> None:
    """Until partition 0's in-sync replicas, as the brokers' metadata says, are `isr`."""
    admin = AdminClient(config.confluent_config(logger=LIBRDKAFKA_LOG))
    deadline = time.monotonic() + timeout_s
    while True:
        now = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs
        if sorted(now) == isr:
            return
        assert time.monotonic() < deadline, f"ISR of {topic} still {now} after {timeout_s}s"
        time.sleep(0.5)


#: Describes a group through `describe_with` (1 s waits) while the test kills the group's
#: coordinator: prints the coordinator, then each outcome, and exits 0 three seconds after
#: it was answered again. librdkafka#4605 aborted such a process when the coordinator
#: came back after a describe had timed out (issue 26.1).
DESCRIBER = """
import sys, time
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from inferstream.kafka.groups import describe_with

servers, group = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": servers})
deadline = time.monotonic() + 60
while True:
    try:
        coordinator = admin.describe_consumer_groups([group])[group].result(10).coordinator
        break
    except Exception:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.5)
print("coordinator", coordinator.id, flush=True)
sys.stdin.readline()  # the test killed it
describe = describe_with(lambda: AdminClient({"bootstrap.servers": servers}), timeout_s=1.0)
answered = None
while answered is None or time.monotonic() < answered + 3:
    try:
        describe(group)
        print("answered", flush=True)
        answered = answered or time.monotonic()
    except TimeoutError:
        print("timeout", flush=True)
    except KafkaException:  # a coordinator moving: NOT_COORDINATOR, then a new admin client
        print("error", flush=True)
    time.sleep(0.2)
"""


@pytest.mark.timeout(300)
def test_describing_a_group_whose_coordinator_was_killed_does_not_abort(
        cluster: Cluster) -> None:
    child = subprocess.Popen([sys.executable, "-c", DESCRIBER, cluster.servers,
                              f"outage-{uuid.uuid4().hex[:8]}"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    coordinator = int(child.stdout.readline().split()[-1])
    cluster.kill(coordinator)
    try:
        child.stdin.write("killed\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=120)
    finally:
        cluster.restart(coordinator)
    assert child.returncode == 0, f"exit {child.returncode}: {err[-2000:]}"
    outcomes = out.split()
    # The outage was long enough for a describe to give up, and the group was described again.
    assert "timeout" in outcomes and outcomes[-1] == "answered", outcomes
