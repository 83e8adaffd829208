"""`inferstream topics create|describe` against a real broker, as an operator runs them."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from inferstream.config import Config
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES, topic_specs
from tests.integration.conftest import INFERSTREAM

pytestmark = pytest.mark.integration

PARTITIONS = 3
#: task topics have their own count, and a pool may override it
TASK_PARTITIONS = {"tasks.cpu": 5, "tasks.gpu": 7}
POOLS = ("gpu", "cpu")
COMPACTED = ("policy", "controller-ledger", "task-control", "workers")


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}."


def cli(kafka: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("INFERSTREAM_")}
    env.update({"INFERSTREAM_BOOTSTRAP_SERVERS": kafka, "INFERSTREAM_TOPIC_PREFIX": prefix,
                "INFERSTREAM_PARTITIONS": str(PARTITIONS), "INFERSTREAM_TASK_PARTITIONS": "5",
                "INFERSTREAM_POOL_PARTITIONS": "gpu=7"})
    return subprocess.run([*INFERSTREAM, "topics", *args, "--pools", *POOLS], env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def expected_names(kafka: str, prefix: str) -> list[str]:
    config = Config(bootstrap_servers=kafka, topic_prefix=prefix, partitions=PARTITIONS,
                    task_partitions=5, pool_partitions=("gpu=7",))
    return [spec.name for spec in topic_specs(config, POOLS)]


def report(out: str) -> dict[str, str]:
    """`created  NAME` / `exists   NAME` lines as {NAME: state} (`altered` lines after them
    say what `create` changed)."""
    rows = [line.split() for line in out.splitlines() if line.startswith(("created", "exists"))]
    return {name: state for state, name in rows}


def topic_settings(kafka: str, names: list[str]) -> dict[str, dict[str, str | int]]:
    """What the broker says about each topic: partitions and the configs we care about."""
    admin = AdminClient({"bootstrap.servers": kafka})
    metadata = admin.list_topics(timeout=30).topics
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    found: dict[str, dict[str, str | int]] = {}
    for resource, future in admin.describe_configs(resources).items():
        configs = future.result(60)
        found[resource.name] = {
            "partitions": len(metadata[resource.name].partitions),
            "cleanup.policy": configs["cleanup.policy"].value,
            "max.message.bytes": configs["max.message.bytes"].value,
        }
    return found


def short(prefix: str, name: str) -> str:
    return name[len(prefix):]


@pytest.mark.timeout(300)
def test_create_makes_every_topic_and_is_idempotent(kafka: str, prefix: str) -> None:
    names = expected_names(kafka, prefix)
    assert {short(prefix, n) for n in names} >= {"jobs", "tasks.gpu", "tasks.cpu", *COMPACTED}

    first = cli(kafka, prefix, "create")
    assert first.returncode == 0, first.stderr
    assert report(first.stdout) == dict.fromkeys(names, "created")

    settings = topic_settings(kafka, names)
    for name in names:
        kind = short(prefix, name)
        want = {"policy": 1, "task-control": 1, "workers": 1,
                **TASK_PARTITIONS}.get(kind, PARTITIONS)
        assert settings[name]["partitions"] == want, name
        want_policy = "compact" if kind in COMPACTED else "delete"
        assert settings[name]["cleanup.policy"] == want_policy, name
        if kind in ("jobs", "results", "dlq") or kind.startswith("tasks."):
            assert settings[name]["max.message.bytes"] == str(LARGE_MESSAGE_BYTES), name

    second = cli(kafka, prefix, "create")
    assert second.returncode == 0, second.stderr
    assert report(second.stdout) == dict.fromkeys(names, "exists")
    assert "MISMATCH" not in second.stderr

    described = cli(kafka, prefix, "describe")
    assert described.returncode == 0, described.stdout + described.stderr
    lines = {line.split()[0]: line for line in described.stdout.splitlines() if line.strip()}
    assert set(lines) == set(names)
    assert f"partitions={PARTITIONS} replication=1 compacted=False ok" in lines[f"{prefix}jobs"]
    assert "partitions=1 replication=1 compacted=True ok" in lines[f"{prefix}policy"]
    assert "partitions=7 replication=1 compacted=False ok" in lines[f"{prefix}tasks.gpu"]


@pytest.mark.timeout(300)
def test_create_reports_existing_topics_with_wrong_settings(kafka: str, prefix: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka})
    wrong = [
        NewTopic(f"{prefix}jobs", num_partitions=1),  # too few partitions
        NewTopic(f"{prefix}policy", num_partitions=1, config={"cleanup.policy": "delete"}),
    ]
    for future in admin.create_topics(wrong).values():
        future.result(60)

    created = cli(kafka, prefix, "create")

    assert created.returncode == 1, created.stdout + created.stderr
    mismatches = {line.split()[1].rstrip(":"): line
                  for line in created.stderr.splitlines() if line.startswith("MISMATCH ")}
    assert set(mismatches) == {f"{prefix}jobs", f"{prefix}policy"}, created.stderr
    assert f"partitions 1 < expected {PARTITIONS}" in mismatches[f"{prefix}jobs"]
    assert "cleanup.policy=delete (expected compact)" in mismatches[f"{prefix}policy"]
    # the rest was still created: one bad topic does not block the installation
    states = report(created.stdout)
    assert states.pop(f"{prefix}jobs") == states.pop(f"{prefix}policy") == "exists"
    assert set(states.values()) == {"created"}
    assert len(states) == len(expected_names(kafka, prefix)) - 2

    described = cli(kafka, prefix, "describe")
    assert described.returncode == 1
    lines = {line.split()[0]: line for line in described.stdout.splitlines() if line.strip()}
    assert f"partitions 1 < expected {PARTITIONS}" in lines[f"{prefix}jobs"]
    assert "cleanup.policy=delete (expected compact)" in lines[f"{prefix}policy"]
    # a job's records share one partition index in jobs, results and the ledger: the jobs
    # topic's count tells on the other two as well
    for name in ("results", "controller-ledger"):
        assert "partition counts differ" in lines[f"{prefix}{name}"], lines[f"{prefix}{name}"]
    assert lines[f"{prefix}job-events"].endswith(" ok")


@pytest.mark.timeout(120)
def test_describe_before_create_names_the_missing_topics(kafka: str, prefix: str) -> None:
    described = cli(kafka, prefix, "describe")
    assert described.returncode == 1
    lines = {line.split()[0]: line for line in described.stdout.splitlines() if line.strip()}
    assert set(lines) == set(expected_names(kafka, prefix))
    assert all(line.endswith("missing") for line in lines.values()), described.stdout


def test_record_limits_read_each_topics_max_message_bytes(kafka: str, prefix: str) -> None:
    from inferstream.kafka.limits import RECORD_HEADROOM, record_limits

    admin = AdminClient({"bootstrap.servers": kafka})
    small, default = f"{prefix}small", f"{prefix}default"
    created = admin.create_topics([
        NewTopic(small, 1, 1, config={"max.message.bytes": "1000000"}),
        NewTopic(default, 1, 1)])
    for future in created.values():
        future.result(60)
    limits = record_limits(Config(bootstrap_servers=kafka), [small, default])
    # the local cluster's brokers take records up to 16 MiB (ops/kafka), as inferstream sends
    assert limits == {small: 1000000 - RECORD_HEADROOM,
                      default: LARGE_MESSAGE_BYTES - RECORD_HEADROOM}
