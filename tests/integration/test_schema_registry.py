"""A job through a real Schema Registry that asks for basic auth (issue 28.7): Apicurio Registry
3.3 (ops/apicurio/registry, in-memory storage) on a real broker.

Controller, worker and client all run with --schema-registry-url (Apicurio's
Confluent-compatible API, /apis/ccompat/v7), the user and a password file. The registry is
fetched by `make registry-jar` (a prerequisite of `make test`), not here: where it cannot start
the tests fail in CI and are skipped locally with the reason, as the broker's.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from inferstream.config import Config
from inferstream.schemas import SCHEMA_NAMES, SchemaError, load_schema
from inferstream.schemas.codec import history_schemas
from inferstream.schemas.schema_registry import SchemaRegistryClient
from tests.integration.conftest import INFERSTREAM, REPO, Processes, config_env

pytestmark = pytest.mark.integration

REGISTRY = REPO / "ops" / "apicurio" / "registry"
USER, PASSWORD = "inferstream", "registry-s3cret"


@pytest.fixture(scope="module")
def apicurio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of the module's registry's Confluent-compatible API; basic auth for USER."""
    folder = tmp_path_factory.mktemp("apicurio")
    users = folder / "users"
    users.write_text(f"{USER}={PASSWORD}\n")
    users.chmod(0o600)
    started = subprocess.run(
        [sys.executable, str(REGISTRY), "start", "--port", str(free_port()), "--dir",
         str(folder / "run"), "--users", str(users), "--timeout", "180"],
        capture_output=True, text=True, timeout=600, check=False)
    if started.returncode != 0:
        reason = f"cannot start Apicurio Registry: {started.stderr.strip()[-2000:]}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    yield started.stdout.strip().splitlines()[-1]
    subprocess.run([sys.executable, str(REGISTRY), "stop", "--dir", str(folder / "run")],
                   capture_output=True, timeout=60, check=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def registry(apicurio: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The registry's URL, with every process of the test set to use it (through the
    environment they inherit)."""
    secret = tmp_path / "registry.password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    monkeypatch.setenv("INFERSTREAM_SCHEMA_REGISTRY_URL", apicurio)
    monkeypatch.setenv("INFERSTREAM_SCHEMA_REGISTRY_USER", USER)
    monkeypatch.setenv("INFERSTREAM_SCHEMA_REGISTRY_PASSWORD_FILE", str(secret))
    return apicurio


def ask(url: str, path: str, method: str = "GET", body: Any = None) -> Any:
    """`method` `path` of the registry's API, logged in; its JSON answer."""
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request = urllib.request.Request(  # noqa: S310 - loopback http
        url + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Basic {login}",
                 "Content-Type": "application/vnd.schemaregistry.v1+json"})
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
def test_a_job_submitted_and_read_through_apicurio_with_basic_auth(
        registry: str, procs: Processes, config: Config, tmp_path: Path) -> None:
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

    # Each record type the job crossed Kafka as is one subject of one version.
    subjects = ask(registry, "/subjects")
    for name in ("Job", "Task", "TaskResult", "JobEvent"):
        assert f"inferstream.{name}" in subjects, subjects
        assert ask(registry, f"/subjects/inferstream.{name}/versions") == [1]
    job_schema = ask(registry, "/subjects/inferstream.Job/versions/1")["id"]
    value = first_record(config, config.topic("jobs"))
    assert value[0] == 0 and int.from_bytes(value[1:5], "big") == job_schema


def test_apicurio_refuses_an_incompatible_version_as_the_codec_says(registry: str) -> None:
    """At BACKWARD, a Job with a new field without a default is refused in words (HTTP 409);
    with a default it is the subject's version 2. And every schema's history, oldest first,
    then the current schema, joins a subject at BACKWARD_TRANSITIVE."""
    client = SchemaRegistryClient(registry, user=USER, password=PASSWORD)
    subject = f"t{uuid.uuid4().hex[:8]}.Job"
    ask(registry, f"/config/{subject}", "PUT", {"compatibility": "BACKWARD"})
    job = load_schema("Job")
    client.register(subject, job)
    with pytest.raises(SchemaError, match="HTTP 409: it refused the schema as incompatible"):
        client.register(subject, {**job, "fields": [*job["fields"],
                                                    {"name": "queue", "type": "string"}]})
    client.register(subject, {**job, "fields": [*job["fields"], {
        "name": "queue", "type": "string", "default": ""}]})
    assert ask(registry, f"/subjects/{subject}/versions") == [1, 2]

    prefix = f"t{uuid.uuid4().hex[:8]}."
    for name in SCHEMA_NAMES:
        ask(registry, f"/config/{prefix}{name}", "PUT", {"compatibility": "BACKWARD_TRANSITIVE"})
    for schema in [*history_schemas(), *map(load_schema, SCHEMA_NAMES)]:
        client.register(prefix + schema["name"], schema)


@pytest.mark.timeout(200)
def test_wrong_registry_credentials_are_refused_in_one_line(
        registry: str, config: Config, tmp_path: Path) -> None:
    """By the client and by each role's start-up check, before it would fail at its first
    record (a worker used to run on, logging each record it could not write)."""
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-it\n")
    env = {**config_env(config), "INFERSTREAM_SCHEMA_REGISTRY_PASSWORD_FILE": str(wrong)}
    for command in (["submit", "--model", "sim:ms=1", "--input", "/a.jpg"],
                    ["worker", "--model", "sim:ms=1", "--idle-exit", "5"],
                    ["controller", "--idle-exit", "5"]):
        done = subprocess.run([*INFERSTREAM, *command], capture_output=True, text=True,
                              env=env, timeout=60, check=False)
        assert done.returncode == 2, (command, done.stderr)
        said = done.stderr.strip().splitlines()
        assert "Traceback" not in done.stderr and len(said) == 1, (command, done.stderr)
        assert "HTTP 401: it refused the credentials" in said[0], said
        assert "not-it" not in done.stderr
