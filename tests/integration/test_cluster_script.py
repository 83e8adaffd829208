"""ops/kafka/cluster: start, idempotent start, status, kill/restart, stop, clean (one broker)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "ops" / "kafka" / "cluster"

pytestmark = pytest.mark.integration


def run(directory: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CLUSTER), *args, "--dir", str(directory)],
                          capture_output=True, text=True, timeout=timeout, check=False)


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout.strip().splitlines()[-1]


def status(directory: Path) -> tuple[int, dict]:
    proc = run(directory, "status", "--json")
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture
def cluster_dir(tmp_path: Path):
    directory = tmp_path / "kafka"
    yield directory
    run(directory, "clean", timeout=120)


def test_start_status_kill_restart_stop(cluster_dir: Path) -> None:
    proc = run(cluster_dir, "start", "--brokers", "1", "--port", "auto")
    if proc.returncode != 0:
        reason = f"cannot start Kafka: {proc.stderr.strip()[-2000:]}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    servers = last_line(proc)
    host, port = servers.split(":")
    assert host == "127.0.0.1" and servers.count(",") == 0
    assert "ready in" in proc.stdout

    code, st = status(cluster_dir)
    assert code == 0 and st["running"] == 1 and st["bootstrap_servers"] == servers
    assert st["nodes"][0]["live_brokers_seen"] == [1]
    cluster_id = st["cluster_id"]

    # The broker is real: a Kafka client sees it.
    confluent_kafka = pytest.importorskip("confluent_kafka.admin")
    md = confluent_kafka.AdminClient({"bootstrap.servers": servers}).list_topics(timeout=30)
    assert sorted(md.brokers) == [1]

    # Idempotent: a second start says so and prints the same servers.
    again = run(cluster_dir, "start")
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout and last_line(again) == servers
    # ... but will not turn it into another cluster.
    other = run(cluster_dir, "start", "--brokers", "3")
    assert other.returncode == 2 and "1-broker cluster" in other.stderr

    # Another cluster on a port that is taken: a clear error, nothing started.
    taken = run(cluster_dir.parent / "other", "start", "--port", port)
    assert taken.returncode == 2 and f"port {port}" in taken.stderr and "in use" in taken.stderr

    assert run(cluster_dir, "kill", "1").returncode == 0
    assert status(cluster_dir)[0] == 3
    back = run(cluster_dir, "restart", "1")
    assert back.returncode == 0, back.stderr
    assert last_line(back) == servers and status(cluster_dir)[0] == 0

    stopped = run(cluster_dir, "stop")
    assert stopped.returncode == 0, stopped.stderr
    code, st = status(cluster_dir)
    assert code == 3 and st["running"] == 0
    with socket.socket() as s:  # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", int(port)))

    # Started again from its data: same cluster, no reformat.
    proc = run(cluster_dir, "start")
    assert proc.returncode == 0, proc.stderr
    assert last_line(proc) == servers and status(cluster_dir)[1]["cluster_id"] == cluster_id

    cleaned = run(cluster_dir, "clean")
    assert cleaned.returncode == 0 and not cluster_dir.exists()
