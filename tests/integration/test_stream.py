"""Issue 13 on the real broker: `inferstream stream` labels a topic that foreign clients write
(Kafka's own console producer, confluent-kafka with its own partitioner) into a topic any
consumer reads (Kafka's console consumer, read_committed): exactly one output per input,
keyed like it, through a member's kill -9 and another's SIGSTOP past its session timeout."""

from __future__ import annotations

import base64
import io
import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from PIL import Image
from skimage import data as photos

from inferstream.config import Config
from inferstream.kafka.settings import LIBRDKAFKA_LOG
from inferstream.schemas import Codec
from tests.integration.conftest import CLUSTER, Processes

pytestmark = pytest.mark.integration

LITE0 = "efficientnet_lite0"
#: The members' group session in these tests (the worker's default is 10 s).
SESSION_MS = 6000
#: Photos as JPEG and the top-1 labels that are right for them (JPEG at quality 90 moves
#: chelsea from "tiger cat" to "Egyptian cat", 0.38 to 0.36: both are the cat); None: any.
PHOTOS = {"chelsea": ({"tiger cat", "Egyptian cat", "tabby"}, photos.chelsea),
          "coffee": ({"espresso"}, photos.coffee),
          "rocket": ({"missile", "projectile"}, photos.rocket),
          "astronaut": (None, photos.astronaut)}


def jpeg(image: Any) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image)).convert("RGB").save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def png(image: Any) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image)).save(buffer, "PNG")
    return buffer.getvalue()


def make_topics(config: Config, **partitions: int) -> dict[str, str]:
    """Topics of this test, by role: {"input": "<prefix>uploads", ...}."""
    admin = AdminClient(config.confluent_config(logger=LIBRDKAFKA_LOG))
    names = {role: config.topic(role) for role in partitions}
    futures = admin.create_topics([NewTopic(names[role], num_partitions=count)
                                   for role, count in partitions.items()])
    for future in futures.values():
        future.result(60)
    return names


def console_produce(servers: str, topic: str, lines: list[str]) -> None:
    """`key<TAB>value` lines through Kafka's own console producer (the Java client)."""
    proc = subprocess.run(
        [sys.executable, str(CLUSTER), "tool", "org.apache.kafka.tools.ConsoleProducer",
         "--bootstrap-server", servers, "--topic", topic,
         "--reader-property", "parse.key=true", "--reader-property", "key.separator=\t"],
        input="".join(f"{line}\n" for line in lines), capture_output=True, text=True,
        timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def console_consume(servers: str, topic: str, expected: int) -> list[tuple[str, dict[str, Any]]]:
    """(key, value) of every record of `topic` as Kafka's own console consumer reads it
    with read_committed, its values JSON."""
    proc = subprocess.run(
        [sys.executable, str(CLUSTER), "tool", "org.apache.kafka.tools.consumer.ConsoleConsumer",
         "--bootstrap-server", servers, "--topic", topic, "--from-beginning",
         "--isolation-level", "read_committed", "--max-messages", str(expected),
         "--timeout-ms", "60000", "--formatter-property", "print.key=true",
         "--formatter-property", "key.separator=\t"],
        capture_output=True, text=True, timeout=300, check=False)
    records = []
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("\t")
        records.append((key, json.loads(value)))
    return records


def read_committed(config: Config, topic: str, expected: int, timeout_s: float = 120,
                   quiet_s: float = 3) -> list[Any]:
    """Every record of `topic` a read_committed consumer sees, once `expected` are there
    (or the timeout passed), and `quiet_s` more to catch duplicates."""
    consumer = Consumer(config.confluent_config(**{
        "group.id": f"reader-{random.random()}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "logger": LIBRDKAFKA_LOG}))
    consumer.subscribe([topic])
    found: list[Any] = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
            if len(found) >= expected and quiet_until is None:
                quiet_until = time.monotonic() + quiet_s
            if quiet_until is not None and time.monotonic() >= quiet_until:
                break
    finally:
        consumer.close()
    return found


def member(procs: Processes, name: str, model: str, topics: dict[str, str], *args: str
           ) -> subprocess.Popen[bytes]:
    return procs.start(name, "stream", "--model", model, "--worker-id", name,
                       "--input-topic", topics["input"], "--output-topic", topics["output"],
                       "--decode-threads", "2", "--session-timeout-ms", str(SESSION_MS),
                       "--heartbeat-interval-ms", "500", *args)


def wait_for(what: str, check: Any, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def finish(proc: subprocess.Popen[bytes], procs: Processes, name: str, timeout: float = 240
           ) -> None:
    assert proc.wait(timeout=timeout) == 0, procs.log(name)[-3000:]
    assert "Traceback" not in procs.log(name), procs.log(name)[-3000:]


def drain_once_answered(config: Config, topic: str, expected: int,
                        members: dict[str, subprocess.Popen[bytes]], procs: Processes) -> None:
    """Once `topic` holds `expected` committed outputs, SIGTERM the members (each drains,
    leaves and exits 0) instead of waiting out an idle exit; the caller reads the topic
    again afterwards, so a duplicate committed meanwhile is still seen."""
    assert len(read_committed(config, topic, expected, timeout_s=600, quiet_s=0)) >= expected
    for proc in members.values():
        proc.send_signal(signal.SIGTERM)
    for name, proc in members.items():
        finish(proc, procs, name, timeout=120)


@pytest.mark.timeout(900)
def test_console_producer_records_get_one_labelled_record_each(
        config: Config, procs: Processes) -> None:
    """1,000 records from Kafka's console producer (JSON envelopes holding base64 photos,
    corrupt, truncated, zero-byte and non-image values, and a few that are not JSON); two
    members; Kafka's console consumer reads exactly 1,000 outputs, keyed like the inputs."""
    topics = make_topics(config, input=4, output=4)
    rng = random.Random(13)
    encoded = {name: jpeg(make()) for name, (_label, make) in PHOTOS.items()}
    kinds = {
        **{name: base64.b64encode(data).decode() for name, data in encoded.items()},
        "corrupt": base64.b64encode(encoded["chelsea"][:200] + bytes(rng.randbytes(3000))
                                    ).decode(),
        "truncated": base64.b64encode(encoded["coffee"][: len(encoded["coffee"]) // 3]
                                      ).decode(),
        "zero": "",
        "text": base64.b64encode(b"this is not an image at all").decode(),
    }
    lines, expected_kind = [], {}
    for i in range(1000):
        kind = "notjson" if i % 97 == 0 else rng.choice(sorted(kinds))
        key = f"rec-{i:04d}-{kind}"
        expected_kind[key] = kind
        value = "{not json" if kind == "notjson" else json.dumps({"image": kinds[kind]})
        lines.append(f"{key}\t{value}")
    console_produce(config.bootstrap_servers, topics["input"], lines)

    args = ("--input-format", "json", "--field", "image")
    members = {name: member(procs, name, LITE0, topics, *args) for name in ("s1", "s2")}
    drain_once_answered(config, topics["output"], 1000, members, procs)

    out = console_consume(config.bootstrap_servers, topics["output"], 1000)
    assert len(out) == 1000
    assert Counter(key for key, _ in out) == Counter(list(expected_kind))
    labels: dict[str, set[str]] = {}
    for key, value in out:
        kind = expected_kind[key]
        if kind in PHOTOS:
            assert value["status"] == "ok", (key, value)
            labels.setdefault(kind, set()).add(value["top_k"][0]["label"])
            right = PHOTOS[kind][0]
            assert right is None or value["top_k"][0]["label"] in right, (key, value["top_k"])
        else:
            assert value["status"] == "error" and value["error"], (key, value)
        assert value["origin"]["topic"] == topics["input"]
    assert {value["worker"] for _, value in out} == {"s1", "s2"}
    assert all(len(found) == 1 for found in labels.values()), labels  # same bytes, same label


@pytest.mark.timeout(900)
def test_exactly_one_output_through_a_kill_and_a_pause(config: Config,
                                                       procs: Processes) -> None:
    """Raw image bytes from confluent-kafka (its own consistent_random partitioner); members
    killed -9 (a replacement joins), SIGSTOPped past the session timeout then SIGCONTed, and
    SIGTERMed (it drains and exits 0): every input record has exactly one output, on the
    input's partition index, with its key."""
    topics = make_topics(config, input=6, output=6)
    count = 4000
    producer = Producer(config.confluent_config(logger=LIBRDKAFKA_LOG))
    for i in range(count):
        producer.produce(topics["input"], f"image-{i}".encode() * 4, f"k{i:05d}".encode())
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0

    args = ("--max-batch", "8")
    names = ["s1", "s2", "s3"]
    running = {name: member(procs, name, "sim:ms=15", topics, *args) for name in names}
    wait_for("the members to share the input",
             lambda: sum(len(procs.assigned(n)) for n in names) == 6
             and all(procs.assigned(n) for n in names))
    time.sleep(4)  # mid-stream: 4,000 records take the three members about 20 s
    running["s1"].send_signal(signal.SIGKILL)
    running["s1"].wait(30)
    running["s4"] = member(procs, "s4", "sim:ms=15", topics, *args)
    running["s2"].send_signal(signal.SIGSTOP)
    time.sleep(SESSION_MS / 1000 + 4)
    running["s2"].send_signal(signal.SIGCONT)
    running["s3"].send_signal(signal.SIGTERM)  # drains: commits what it has, leaves, exits 0
    finish(running["s3"], procs, "s3", timeout=120)
    drain_once_answered(config, topics["output"], count,
                        {name: running[name] for name in ("s2", "s4")}, procs)

    found = read_committed(config, topics["output"], count)
    origins: Counter[tuple[int, int]] = Counter()
    for message in found:
        headers = dict(message.headers())
        partition = int(headers["inferstream.origin.partition"])
        origins[partition, int(headers["inferstream.origin.offset"])] += 1
        assert message.partition() == partition  # as many partitions: the input's index
        assert json.loads(message.value())["origin"]["partition"] == partition
    assert len(found) == count, f"{len(found)} outputs for {count} inputs"
    assert len(origins) == count and set(origins.values()) == {1}
    assert {m.key() for m in found} == {f"k{i:05d}".encode() for i in range(count)}
    assert procs.log("s2").count("Traceback") == 0


@pytest.mark.timeout(600)
def test_url_input_with_dead_letters(config: Config, procs: Processes,
                                     tmp_path: Path) -> None:
    """`--input-format url --on-error dlq`: photos by path and file:// URI get labels on the
    output topic; a missing file and a non-image go to the dead-letter topic with origin."""
    topics = make_topics(config, input=2, output=2, dead=1)
    cat = tmp_path / "cat.png"
    cat.write_bytes(png(photos.chelsea()))
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    console_produce(config.bootstrap_servers, topics["input"],
                    [f"path\t{cat}", f"uri\t{cat.as_uri()}", "missing\t/nowhere/cat.jpg",
                     f"text\t{text}"])
    proc = member(procs, "s1", LITE0, topics, "--input-format", "url", "--on-error", "dlq",
                  "--dead-letter-topic", topics["dead"], "--idle-exit", "10")
    finish(proc, procs, "s1")

    out = read_committed(config, topics["output"], 2)
    labels = {m.key(): json.loads(m.value())["top_k"][0]["label"] for m in out}
    assert labels == {b"path": "tiger cat", b"uri": "tiger cat"}
    codec = Codec(None)
    letters = [codec.decode(m.value(), expected="DeadLetter")
               for m in read_committed(config, topics["dead"], 2)]
    assert sorted(letter["key"] for letter in letters) == [b"missing", b"text"]
    for letter in letters:
        assert letter["origin_topic"] == topics["input"]
        assert letter["reason"]
