"""A secured local cluster (`ops/kafka/cluster start --security`, issue 28.1): the settings
file it prints for admin is all inferstream and confluent-kafka need; a wrong password, a
user without ACLs and a client without a certificate are refused."""

from __future__ import annotations

import subprocess
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import begin_cluster, cluster_ready
from tests.integration.secure import clean, inferstream, librdkafka, refused, settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def mtls_starting(tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """The mTLS cluster, started in the background as the module begins, so that it comes up
    while the tests on the SASL_SSL one run."""
    directory = tmp_path_factory.mktemp("ssl")
    starting = begin_cluster(directory, 1, "--security", "ssl")
    try:
        yield directory, starting
    finally:
        if starting.poll() is None:  # not waited for: no test of it ran
            starting.kill()
            starting.communicate()
        clean(directory)


@pytest.fixture(scope="module")
def mtls(mtls_starting: tuple[Path, subprocess.Popen[str]]) -> Path:
    directory, starting = mtls_starting
    cluster_ready(starting)
    return directory


def test_the_settings_files_are_the_owners_alone(sasl_ssl: Path) -> None:
    for f in [*(sasl_ssl / "clients").iterdir(), *(sasl_ssl / "secrets").iterdir()]:
        assert f.stat().st_mode & 0o077 == 0, f


def test_admin_creates_the_topics_and_checks_the_config(sasl_ssl: Path) -> None:
    prefix = ("--topic-prefix", "cluster.")  # the default one is test_secure_refusals.py's
    done = inferstream(settings(sasl_ssl, "admin"), "topics", "create", *prefix)
    assert done.returncode == 0, done.stderr
    done = inferstream(settings(sasl_ssl, "admin"), "config", "check", *prefix)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok:"), done.stdout


def test_admin_produces_and_consumes_with_confluent_kafka(sasl_ssl: Path) -> None:
    conf = librdkafka(settings(sasl_ssl, "admin"))
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


def test_a_wrong_password_is_refused_in_words(sasl_ssl: Path, tmp_path: Path) -> None:
    admin = settings(sasl_ssl, "admin").read_text()
    password_file = tomllib.loads(admin)["sasl_password_file"]
    (tmp_path / "wrong.password").write_text("not-the-password\n")
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(admin.replace(password_file, str(tmp_path / "wrong.password")))
    refused(inferstream(wrong, "topics", "create"))


def test_a_user_without_acls_may_not_create_a_topic(sasl_ssl: Path) -> None:
    admin = AdminClient(librdkafka(settings(sasl_ssl, "nobody")))
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
