"""A secured local cluster (`ops/kafka/cluster start --security`, issue 28.1): the settings
file it prints for admin is all inferstream and confluent-kafka need; a wrong password, a
user without ACLs and a client without a certificate are refused."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import CLUSTER, INFERSTREAM, start_cluster

pytestmark = pytest.mark.integration


def secured_cluster(tmp: Path, mode: str) -> Iterator[Path]:
    """A 1-broker cluster secured by `mode`; yields its folder, removed at the end."""
    start_cluster(tmp, 1, "--security", mode)
    yield tmp
    subprocess.run([sys.executable, str(CLUSTER), "clean", "--dir", str(tmp)],
                   capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def scram(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from secured_cluster(tmp_path_factory.mktemp("sasl-ssl"), "sasl_ssl")


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from secured_cluster(tmp_path_factory.mktemp("ssl"), "ssl")


def settings(cluster: Path, user: str) -> Path:
    return cluster / "clients" / f"{user}.toml"


def inferstream(settings_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSTREAM_")}
    env["INFERSTREAM_CONFIG"] = str(settings_file)
    return subprocess.run([*INFERSTREAM, *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def librdkafka(settings_file: Path) -> dict[str, Any]:
    """The settings file as confluent-kafka's configuration."""
    s = tomllib.loads(settings_file.read_text())
    if "sasl_password_file" in s:
        s["sasl_password"] = Path(s.pop("sasl_password_file")).read_text().strip()
    names = {"bootstrap_servers": "bootstrap.servers", "security_protocol": "security.protocol",
             "sasl_mechanism": "sasl.mechanism", "sasl_username": "sasl.username",
             "sasl_password": "sasl.password", "ssl_cafile": "ssl.ca.location",
             "ssl_certfile": "ssl.certificate.location", "ssl_keyfile": "ssl.key.location"}
    return {names[k]: v for k, v in s.items()}


def refused(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip(), "refused without a word"


def test_the_settings_files_are_the_owners_alone(scram: Path) -> None:
    for f in [*(scram / "clients").iterdir(), *(scram / "secrets").iterdir()]:
        assert f.stat().st_mode & 0o077 == 0, f


def test_admin_creates_the_topics_and_checks_the_config(scram: Path) -> None:
    done = inferstream(settings(scram, "admin"), "topics", "create")
    assert done.returncode == 0, done.stderr
    done = inferstream(settings(scram, "admin"), "config", "check")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok:"), done.stdout


def test_admin_produces_and_consumes_with_confluent_kafka(scram: Path) -> None:
    conf = librdkafka(settings(scram, "admin"))
    topic = f"round-trip-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer(conf)
    producer.produce(topic, b"over SASL_SSL")
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        msg = None
        for _ in range(30):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.value() == b"over SASL_SSL"
    finally:
        consumer.close()


def test_a_wrong_password_is_refused_in_words(scram: Path, tmp_path: Path) -> None:
    admin = settings(scram, "admin").read_text()
    password_file = tomllib.loads(admin)["sasl_password_file"]
    (tmp_path / "wrong.password").write_text("not-the-password\n")
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(admin.replace(password_file, str(tmp_path / "wrong.password")))
    refused(inferstream(wrong, "topics", "create"))


def test_a_user_without_acls_may_not_create_a_topic(scram: Path) -> None:
    admin = AdminClient(librdkafka(settings(scram, "nobody")))
    with pytest.raises(KafkaException) as e:
        admin.create_topics([NewTopic("nobodys-topic", 1, 1)])["nobodys-topic"].result(
            timeout=30)
    assert e.value.args[0].code() in {KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                      KafkaError.CLUSTER_AUTHORIZATION_FAILED}


def test_a_client_certificate_lets_admin_in(mtls: Path) -> None:
    done = inferstream(settings(mtls, "admin"), "topics", "create")
    assert done.returncode == 0, done.stderr
    done = inferstream(settings(mtls, "admin"), "config", "check")
    assert done.returncode == 0, done.stderr


def test_a_client_without_a_certificate_is_refused(mtls: Path, tmp_path: Path) -> None:
    lines = settings(mtls, "admin").read_text().splitlines()
    bare = tmp_path / "bare.toml"
    bare.write_text("\n".join(ln for ln in lines if not ln.startswith(("ssl_certfile",
                                                                        "ssl_keyfile"))))
    refused(inferstream(bare, "topics", "create"))
