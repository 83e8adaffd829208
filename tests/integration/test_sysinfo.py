"""The sysinfo app on a real broker: synthetic workers' samples in, shares and dead letters out,
and the policy kept up to date through kill -9 of a replica."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from inferstream.config import Config
from inferstream.kafka.settings import consumer_config, producer_config
from inferstream.schemas import Codec
from tests.integration.conftest import Processes
from tests.roles import ROLE_ARGS
from tests.sysinfo_samples import sample

pytestmark = pytest.mark.integration

RATES = {"fast": 100.0, "slow": 25.0}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Publisher:
    """Synthetic workers: one SysInfoSample per worker per second, keyed by worker id."""

    def __init__(self, cfg: Config, rates: dict[str, float] | None = None) -> None:
        self.cfg = cfg
        #: Items/s per synthetic worker; change it while running. 0: idle, calibrated at 50/s.
        self.rates = dict(RATES if rates is None else rates)
        self.codec = Codec()
        self.producer = Producer(producer_config(cfg))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Publisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for worker, rate in list(self.rates.items()):
                record = sample(worker, rate, interval_s=1.0, calibration_items_per_s=50.0)
                self.send(worker, self.codec.encode("SysInfoSample", record))
            self._stop.wait(1.0)

    def send(self, key: str, value: bytes) -> None:
        self.producer.produce(self.cfg.topic("sysinfo"), key=key.encode(), value=value)
        self.producer.flush(10)


def get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, json.loads(body) if body.startswith(b"{") else body
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def wait_for(what: str, check: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout_s}s (last: {last!r})")


def shares(port: int) -> dict[str, float] | None:
    status, body = get(port, "/policy/default")
    if status != 200:
        return None
    return {e["worker"]: e["share"] for e in body["entries"] if e["kind"] == "WORKER"}


def shares_settled(port: int) -> dict[str, float] | None:
    found = shares(port)
    if not found or set(found) != set(RATES):
        return None
    close = abs(found["fast"] - 0.8) <= 0.05 and abs(found["slow"] - 0.2) <= 0.05
    return found if close else None


def start_replica(procs: Processes, name: str, port: int, *args: str) -> Any:
    return procs.start(name, *ROLE_ARGS["sysinfo"], "--port", str(port),
                       "--advertised-host", "127.0.0.1", *args)


def dead_letters(cfg: Config) -> Iterator[dict[str, Any]]:
    codec = Codec()
    consumer = Consumer(consumer_config(cfg, f"{cfg.topic_prefix}test-dlq"))
    consumer.subscribe([cfg.topic("dlq")])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                yield codec.decode(message.value(), expected="DeadLetter")
    finally:
        consumer.close()


@pytest.mark.timeout(300)
def test_shares_follow_throughput_and_garbage_is_dead_lettered(
        procs: Processes, config: Config) -> None:
    port = free_port()
    replica = start_replica(procs, "sysinfo-a", port, "--idle-exit", "8")
    with Publisher(config) as publisher:
        found = wait_for("shares of 0.8 and 0.2", lambda: shares_settled(port), 120)
        assert found == pytest.approx({"fast": 0.8, "slow": 0.2}, abs=0.05)
        publisher.send("fast", b"\xc3\x01garbage")
        absurd = sample("fast", -5.0)
        publisher.send("fast", publisher.codec.encode("SysInfoSample", absurd))
        letter = next(d for d in dead_letters(config)
                      if d["origin_topic"] == config.topic("sysinfo"))
        assert letter["value"] == b"\xc3\x01garbage" and "undecodable" in letter["reason"]
        assert letter["key"] == b"fast"
        status, health = get(port, "/health")
        assert status == 200 and health["workers"] == 2 and health["pools"] == ["default"]
        status, workers = get(port, "/workers")
        assert {w["worker"]: w["health"] for w in workers["workers"]} == {
            "fast": "HEALTHY", "slow": "HEALTHY"}
        status, history = get(port, "/sysinfo/fast?since=0")
        assert status == 200 and history["samples"]
        assert get(port, "/workers/nobody")[0] == 404
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            metrics = reply.read().decode()
        assert re.search(r'samples_dropped_total\{reason="negative_throughput"\} 1\.0', metrics)
        assert re.search(r"inferstream_sysinfo_dead_letters_total 1\.0", metrics)
        # Kubernetes' readiness probe: the replica has joined the app's group
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            assert reply.read() == b"ready\n"
    assert replica.wait(timeout=60) == 0  # bounded mode: no sample for 8 s


def owner_of(procs: Processes, names: list[str]) -> str | None:
    owners = []
    for name in names:
        lines = [line for line in procs.log(name).splitlines() if "policy owner=" in line]
        if lines and "policy owner=True" in lines[-1]:
            owners.append(name)
    return owners[0] if len(owners) == 1 else None


def updated_since(port: int, since_ms: int) -> bool:
    status, body = get(port, "/policy/default")
    return status == 200 and any(e["updated_at"] > since_ms for e in body["entries"])


@pytest.mark.timeout(400)
def test_kill_9_of_the_policy_owner_keeps_the_policy_updating(
        procs: Processes, config: Config) -> None:
    ports = {"sysinfo-a": free_port(), "sysinfo-b": free_port()}
    replicas = {name: start_replica(procs, name, port) for name, port in ports.items()}
    with Publisher(config):
        wait_for("shares on a", lambda: shares_settled(ports["sysinfo-a"]), 120)
        wait_for("both replicas in the group, answering",
                 lambda: all(shares_settled(p) for p in ports.values())
                 and owner_of(procs, list(ports)), 120)
        owner = owner_of(procs, list(ports))
        assert owner is not None
        survivor = next(name for name in ports if name != owner)
        killed_at = int(time.time() * 1000)
        replicas[owner].send_signal(signal.SIGKILL)
        replicas[owner].wait(timeout=30)
        wait_for("the policy updated by the survivor",
                 lambda: updated_since(ports[survivor], killed_at), 15)
        print(f"policy rewritten {time.time() - killed_at / 1000:.1f}s after kill -9 of {owner}:"
              f" shares {shares(ports[survivor])}")
        wait_for("shares of 0.8 and 0.2 again", lambda: shares_settled(ports[survivor]), 60)
    replicas[survivor].send_signal(signal.SIGTERM)
    assert replicas[survivor].wait(timeout=60) == 0


def worker_rows(port: int) -> dict[str, dict[str, Any]]:
    status, body = get(port, "/workers")
    return {w["worker"]: w for w in body["workers"]} if status == 200 else {}


@pytest.mark.timeout(300)
def test_a_silent_worker_goes_stale_and_a_new_one_starts_from_its_calibration(
        procs: Processes, config: Config) -> None:
    port = free_port()
    start_replica(procs, "sysinfo-a", port)
    with Publisher(config) as publisher:
        wait_for("shares of 0.8 and 0.2", lambda: shares_settled(port), 120)
        del publisher.rates["slow"]  # as if killed: no more samples
        wait_for("slow marked STALE",
                 lambda: worker_rows(port).get("slow", {}).get("health") == "STALE", 10)
        wait_for("the policy dropping slow", lambda: shares(port) == {"fast": 1.0, "slow": 0.0},
                 10)
        publisher.rates["fresh"] = 0.0  # a new worker that has processed nothing yet
        row = wait_for("fresh in /workers", lambda: worker_rows(port).get("fresh"), 15)
        assert row["capacity_items_per_s"] == pytest.approx(50.0)
        assert row["calibration"]["items_per_s"] == pytest.approx(50.0)
        found = wait_for("fresh in the policy", lambda: (shares(port) or {}).get("fresh"), 15)
        assert found == pytest.approx(50.0 / 150.0, abs=0.05)
