"""`inferstream acls` on a secured cluster (issue 28.3, and 28's acceptance): a controller,
the sysinfo app, a worker, a stream member and a client, each a principal holding only the
ACLs `inferstream acls --apply` printed for its role, label real photos in a job and a stream,
each once; `top` shows the worker; a principal without them is refused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from skimage import data as photos

from tests.integration.conftest import INFERSTREAM
from tests.integration.secure import librdkafka, refused, settings
from tests.unit.support.photos import encode

pytestmark = pytest.mark.integration

#: A topic prefix of this file's own on the shared cluster; small topics, so that a worker
#: owns its task partitions in seconds; eager models (compiling costs more than 12 photos).
SIZES = {"INFERSTREAM_TOPIC_PREFIX": "acls.", "INFERSTREAM_TASK_PARTITIONS": "4",
         "INFERSTREAM_PARTITIONS": "2", "INFERSTREAM_RESTART": "off",
         "INFERSTREAM_WORKER_COMPILE": "off"}
STREAM = ("--input-topic", "acls-in", "--output-topic", "acls-out")
LITE0 = "efficientnet_lite0"
#: scikit-image's photos and the top-1 labels right for them (JPEG may move chelsea between
#: the cats, as in test_stream.py); each goes in COPIES times.
PHOTOS = {"chelsea": {"tiger cat", "Egyptian cat", "tabby"}, "coffee": {"espresso"},
          "rocket": {"missile", "projectile"}, "camera": {"tripod"}}
COPIES = 3


def jpegs() -> dict[str, bytes]:
    """Each item's name and its photo as a JPEG file's bytes."""
    encoded = {name: encode(getattr(photos, name)(), "JPEG", quality=90) for name in PHOTOS}
    return {f"{name}-{i}": data for name, data in encoded.items() for i in range(COPIES)}


def photo_of(item: str) -> str:
    """The photo an item's name (a path or a key) says it is."""
    return Path(item).stem.rsplit("-", 1)[0]


@pytest.fixture(scope="module")
def cluster(sasl_ssl: Path) -> Path:
    """The SASL_SSL cluster with this file's topics, and each role's ACLs applied by admin."""
    admin = settings(sasl_ssl, "admin")
    client = AdminClient(librdkafka(admin))  # held until the futures are done
    for future in client.create_topics(
            [NewTopic(t, 2, 1) for t in ("acls-in", "acls-out")]).values():
        future.result(timeout=30)
    run_together(admin, ("topics", "create"), *(
        ("acls", "--principal", f"User:{role}", "--role", role, "--apply",
         *(STREAM if role == "stream" else ()))
        for role in ("controller", "sysinfo", "worker", "client", "stream")))
    return sasl_ssl


def env_of(settings_file: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSTREAM_")}
    return {**env, **SIZES, "INFERSTREAM_CONFIG": str(settings_file)}


def run(settings_file: Path, *args: str, timeout: float = 120
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INFERSTREAM, *args], capture_output=True, text=True,
                          env=env_of(settings_file), timeout=timeout, check=False)


def run_together(settings_file: Path, *commands: tuple[str, ...]) -> None:
    """Run the commands at the same time (each mostly starts Python); each must succeed."""
    started = [subprocess.Popen([*INFERSTREAM, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env_of(settings_file))
               for args in commands]
    for args, process in zip(commands, started, strict=True):
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, (args, err)


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


def labels_right(top1: dict[str, str]) -> None:
    """Each item's top-1 label (item: its file or key) is right for its photo."""
    wrong = {item: label for item, label in top1.items() if label not in PHOTOS[photo_of(item)]}
    assert not wrong, wrong


def client_reads_its_job(cluster: Path, job_id: str, items: int) -> None:
    """status, results and cancel (of a finished job: nothing to do) as User:client."""
    client = settings(cluster, "client")
    status = run(client, "status", job_id, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "COMPLETED", status.stdout
    results = run(client, "results", job_id)
    assert results.returncode == 0, results.stderr
    assert len(results.stdout.splitlines()) == items
    cancel = run(client, "cancel", job_id)
    assert cancel.returncode == 0 and "already completed" in cancel.stderr, cancel.stderr


@pytest.mark.timeout(400)
def test_each_role_runs_with_only_its_printed_acls(cluster: Path, tmp_path: Path) -> None:
    items = tmp_path / "items"
    items.mkdir()
    for name, data in jpegs().items():
        (items / f"{name}.jpg").write_bytes(data)
    port = free_port()
    sysinfo = start(settings(cluster, "sysinfo"), tmp_path / "sysinfo.log", "sysinfo",
                    "--bind", "127.0.0.1", "--port", str(port))
    controller = start(settings(cluster, "controller"), tmp_path / "controller.log",
                       "controller", "--idle-exit", "120")
    worker = start(settings(cluster, "worker"), tmp_path / "worker.log", "worker",
                   "--model", LITE0, "--worker-id", "acls-worker", "--max-batch", "4",
                   "--idle-exit", "120")
    try:
        output = tmp_path / "out.jsonl"
        done = run(settings(cluster, "client"), "submit", "--model", LITE0, "--input",
                   str(items), "--chunk-size", "2", "--output", str(output), "--timeout", "240",
                   timeout=300)
        assert done.returncode == 0, done.stderr + (tmp_path / "worker.log").read_text()
        lines = [json.loads(line) for line in output.read_text().splitlines()]
        assert sorted(line["item"] for line in lines) == sorted(map(str, items.iterdir()))
        assert {line["status"] for line in lines} == {"ok"}
        labels_right({line["item"]: line["top_k"][0]["label"] for line in lines})
        deadline = time.monotonic() + 60
        while "acls-worker" not in sysinfo_workers(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "acls-worker" in sysinfo_workers(port), (tmp_path / "sysinfo.log").read_text()
        top = run(settings(cluster, "client"), "top", "--once", "--json", "--sysinfo-url",
                  f"http://127.0.0.1:{port}")
        assert top.returncode == 0, top.stderr
        assert "acls-worker" in {w["worker"] for w in json.loads(top.stdout)["workers"]}
        client_reads_its_job(cluster, done.stdout.split()[0], len(lines))
    finally:
        for process in (sysinfo, controller, worker):
            process.terminate()
    # a graceful stop (SIGTERM: finish, commit, leave the group) is a clean exit
    assert worker.wait(timeout=60) == 0, (tmp_path / "worker.log").read_text()
    for process in (sysinfo, controller):
        process.wait(timeout=60)
    for name in ("sysinfo", "controller", "worker"):
        assert "AUTHORIZATION_FAILED" not in (tmp_path / f"{name}.log").read_text(), name


@pytest.mark.timeout(300)
def test_a_stream_member_runs_with_only_its_printed_acls(cluster: Path) -> None:
    records = jpegs()
    producer = Producer(librdkafka(settings(cluster, "admin")))
    for key, data in records.items():
        producer.produce("acls-in", key=key.encode(), value=data)
    assert producer.flush(30) == 0
    done = run(settings(cluster, "stream"), "stream", "--model", LITE0, *STREAM,
               "--idle-exit", "8", timeout=240)
    assert done.returncode == 0, done.stderr
    assert "AUTHORIZATION_FAILED" not in done.stderr
    dump = run(settings(cluster, "admin"), "dump", "acls-out", "--from-beginning",
               "--committed")
    out = [json.loads(line) for line in dump.stdout.splitlines()]
    assert sorted(line["key"] for line in out) == sorted(records), dump.stderr
    labels_right({line["key"]: line["value"]["top_k"][0]["label"] for line in out})


def test_a_principal_without_acls_cannot_run_a_worker(cluster: Path) -> None:
    refused(run(settings(cluster, "nobody"), "worker", "--model", "sim:ms=1",
                "--idle-exit", "5", timeout=60))
