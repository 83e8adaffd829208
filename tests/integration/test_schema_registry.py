"""A job through a Schema Registry that asks for basic auth, on a real broker (issue 28.7).

The registry is tests/unit/support/fake_registry.py's, served under Apicurio's path
(/apis/ccompat/v7) with compatibility checks as Confluent's: Apicurio Registry itself cannot
be built on this project's machines (docs/wire-format.md says why). Controller, worker and
client all run with --schema-registry-url, the user and a password file.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from inferstream.config import Config
from tests.integration.conftest import INFERSTREAM, Processes, config_env
from tests.unit.support.fake_registry import FakeRegistry, serve_registry

pytestmark = pytest.mark.integration

USER, PASSWORD = "inferstream", "registry-s3cret"


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeRegistry]:
    """The registry, and every process of the test set to use it (through the environment
    the processes inherit)."""
    secret = tmp_path / "registry.password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    with serve_registry(FakeRegistry(users={USER: PASSWORD}, prefix="/apis/ccompat/v7")) as fake:
        monkeypatch.setenv("INFERSTREAM_SCHEMA_REGISTRY_URL", fake.url)
        monkeypatch.setenv("INFERSTREAM_SCHEMA_REGISTRY_USER", USER)
        monkeypatch.setenv("INFERSTREAM_SCHEMA_REGISTRY_PASSWORD_FILE", str(secret))
        yield fake


def ask(registry: FakeRegistry, path: str) -> Any:
    """GET `path` of the registry's API, logged in."""
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request = urllib.request.Request(registry.url + path,  # noqa: S310 - loopback http
                                     headers={"Authorization": f"Basic {login}"})
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback http
        return json.loads(answer.read())


def first_record(config: Config, topic: str, timeout_s: float = 30) -> bytes:
    """The value of the first record of `topic`, as it is on the wire."""
    consumer = Consumer(config.confluent_config(**{
        "group.id": f"raw-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False}))
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and message.value():
                value: bytes = message.value()
                return value
    finally:
        consumer.close()
    raise AssertionError(f"no record on {topic} in {timeout_s} s")


@pytest.mark.timeout(300)
def test_a_job_submitted_and_read_through_a_registry_with_basic_auth(
        registry: FakeRegistry, procs: Processes, config: Config, tmp_path: Path) -> None:
    procs.controller()
    procs.worker("sim:ms=1")
    items = [str(tmp_path / f"item-{i}.jpg") for i in range(8)]
    for path in items:
        Path(path).write_bytes(b"\xff\xd8 not really a jpeg")  # a sim: model never decodes
    done = procs.run("submit", "--model", "sim:ms=1", "--input", *items, "--chunk-size", "2",
                     "--wait", "--timeout", "120")
    assert done.returncode == 0, (done.stderr, procs.log("controller-0"))
    job_id = done.stdout.split()[0]
    results = procs.run("results", job_id)
    assert results.returncode == 0, results.stderr
    lines = [json.loads(line) for line in results.stdout.splitlines()]
    assert sorted(line["item"] for line in lines) == sorted(items)
    assert {line["status"] for line in lines} == {"ok"}

    # Each record type the job crossed Kafka as is one subject of one version, as a user
    # asks the registry's API.
    subjects = ask(registry, "/subjects")
    for name in ("Job", "Task", "TaskResult", "JobEvent"):
        assert f"inferstream.{name}" in subjects
        assert ask(registry, f"/subjects/inferstream.{name}/versions") == [1]
    job_schema = ask(registry, "/subjects/inferstream.Job/versions/1")["id"]
    value = first_record(config, config.topic("jobs"))
    assert value[0] == 0 and int.from_bytes(value[1:5], "big") == job_schema


@pytest.mark.timeout(120)
def test_wrong_registry_credentials_are_refused_in_one_line(
        registry: FakeRegistry, config: Config, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-it\n")
    env = {**config_env(config), "INFERSTREAM_SCHEMA_REGISTRY_PASSWORD_FILE": str(wrong)}
    started = time.monotonic()
    done = subprocess.run([*INFERSTREAM, "submit", "--model", "sim:ms=1", "--input", "/a.jpg"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode != 0
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "HTTP 401" in said[0] and "refused the credentials" in said[0], said
    assert "not-it" not in done.stderr
    assert time.monotonic() - started < 15
    assert "inferstream.Job" not in registry.subjects
