"""`inferstream acls` on a secured cluster (issue 28.3): a controller, the sysinfo app, a
worker, a stream member and a client, each a principal holding only the ACLs `inferstream acls
--apply` printed for its role, run a job and a stream to the end; a principal without them is
refused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import INFERSTREAM
from tests.integration.test_secure_cluster import librdkafka, refused, secured_cluster, settings

pytestmark = pytest.mark.integration

#: Small topics, so that a worker owns its task partitions in seconds.
SIZES = {"INFERSTREAM_TASK_PARTITIONS": "4", "INFERSTREAM_PARTITIONS": "2",
         "INFERSTREAM_RESTART": "off"}
STREAM = ("--input-topic", "acls-in", "--output-topic", "acls-out")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A SASL_SSL cluster with the topics, and each role's ACLs applied by admin."""
    for directory in secured_cluster(tmp_path_factory.mktemp("acls"), "sasl_ssl"):
        admin = settings(directory, "admin")
        assert run(admin, "topics", "create").returncode == 0
        client = AdminClient(librdkafka(admin))  # held until the futures are done
        for future in client.create_topics(
                [NewTopic(t, 2, 1) for t in ("acls-in", "acls-out")]).values():
            future.result(timeout=30)
        for role in ("controller", "sysinfo", "worker", "client", "stream"):
            done = run(admin, "acls", "--principal", f"User:{role}", "--role", role,
                       "--apply", *(STREAM if role == "stream" else ()))
            assert done.returncode == 0, done.stderr
        yield directory


def env_of(settings_file: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSTREAM_")}
    return {**env, **SIZES, "INFERSTREAM_CONFIG": str(settings_file)}


def run(settings_file: Path, *args: str, timeout: float = 120
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INFERSTREAM, *args], capture_output=True, text=True,
                          env=env_of(settings_file), timeout=timeout, check=False)


def start(settings_file: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([*INFERSTREAM, *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env_of(settings_file))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def sysinfo_workers(port: int) -> set[str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/workers", timeout=5) as page:
            return {row["worker"] for row in json.load(page)["workers"]}
    except OSError:
        return set()


def test_each_role_runs_with_only_its_printed_acls(cluster: Path, tmp_path: Path) -> None:
    items = tmp_path / "items"
    items.mkdir()
    for i in range(40):
        (items / f"{i}.bin").write_bytes(f"item {i}".encode())
    port = free_port()
    sysinfo = start(settings(cluster, "sysinfo"), tmp_path / "sysinfo.log", "sysinfo",
                    "--bind", "127.0.0.1", "--port", str(port))
    controller = start(settings(cluster, "controller"), tmp_path / "controller.log",
                       "controller", "--idle-exit", "30")
    worker = start(settings(cluster, "worker"), tmp_path / "worker.log", "worker",
                   "--model", "sim:ms=1", "--worker-id", "acls-worker", "--idle-exit", "20")
    try:
        output = tmp_path / "out.jsonl"
        done = run(settings(cluster, "client"), "submit", "--model", "sim:ms=1", "--input",
                   str(items), "--output", str(output), "--timeout", "100")
        assert done.returncode == 0, done.stderr + (tmp_path / "worker.log").read_text()
        lines = [json.loads(line) for line in output.read_text().splitlines()]
        assert sorted(line["item"] for line in lines) == sorted(map(str, items.iterdir()))
        assert {line["status"] for line in lines} == {"ok"}
        deadline = time.monotonic() + 60
        while "acls-worker" not in sysinfo_workers(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "acls-worker" in sysinfo_workers(port), (tmp_path / "sysinfo.log").read_text()
        assert worker.wait(timeout=120) == 0
    finally:
        for process in (sysinfo, controller, worker):
            process.terminate()
            process.wait(timeout=60)
    for name in ("sysinfo", "controller", "worker"):
        assert "AUTHORIZATION_FAILED" not in (tmp_path / f"{name}.log").read_text(), name


def test_a_stream_member_runs_with_only_its_printed_acls(cluster: Path) -> None:
    producer = Producer(librdkafka(settings(cluster, "admin")))
    for i in range(30):
        producer.produce("acls-in", key=str(i).encode(), value=f"record {i}".encode())
    assert producer.flush(30) == 0
    done = run(settings(cluster, "stream"), "stream", "--model", "sim:ms=1", *STREAM,
               "--idle-exit", "8")
    assert done.returncode == 0, done.stderr
    assert "AUTHORIZATION_FAILED" not in done.stderr
    dump = run(settings(cluster, "admin"), "dump", "acls-out", "--from-beginning",
               "--committed")
    assert sorted(json.loads(line)["key"] for line in dump.stdout.splitlines()) == sorted(
        str(i) for i in range(30)), dump.stderr


def test_a_principal_without_acls_cannot_run_a_worker(cluster: Path) -> None:
    refused(run(settings(cluster, "nobody"), "worker", "--model", "sim:ms=1",
                "--idle-exit", "5", timeout=60))
