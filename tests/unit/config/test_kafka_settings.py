"""What reaches the Kafka clients: settings passed through untouched (translated for aiokafka)
and secrets, masked wherever a config is printed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from inferstream.cli import main
from inferstream.config import MASK, Config, load_config, parse_kafka_config
from inferstream.errors import ConfigError
from inferstream.kafka.settings import producer_config

SECRET = "hunter2-very-secret"  # noqa: S105 (a test value that must never be printed)


# -- pass-through ------------------------------------------------------------------------------
def pass_through_config() -> Config:
    pairs = parse_kafka_config(["max.poll.interval.ms=600000", "enable.idempotence=false",
                                "client.id=worker-7", "acks=1", "compression.type = zstd"])
    return load_config({"kafka_config": pairs}, {})


def test_kafka_config_reaches_confluent_untouched() -> None:
    conf = pass_through_config().confluent_config(**{"acks": "all"})
    assert conf["max.poll.interval.ms"] == "600000"
    assert conf["enable.idempotence"] == "false"
    assert conf["client.id"] == "worker-7"
    assert conf["compression.type"] == "zstd"
    assert conf["acks"] == "1"  # pass-through is applied last: the operator wins
    assert producer_config(pass_through_config())["acks"] == "1"


def test_kafka_config_reaches_aiokafka_translated() -> None:
    kwargs = pass_through_config().aiokafka_config()
    assert kwargs["max_poll_interval_ms"] == 600000
    assert kwargs["enable_idempotence"] is False
    assert kwargs["client_id"] == "worker-7"
    assert kwargs["acks"] == 1
    assert kwargs["compression_type"] == "zstd"
    assert kwargs["bootstrap_servers"] == "localhost:9092"


def test_kafka_config_flags_on_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--kafka-config", "linger.ms=50",
                 "--kafka-config", "client.id=x"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["kafka_config"] == {"linger.ms": "50", "client.id": "x"}


def test_sasl_with_mechanism_is_accepted() -> None:
    config = load_config({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                          "sasl_username": "u", "sasl_password": SECRET}, {})
    assert config.confluent_config()["sasl.mechanism"] == "SCRAM-SHA-512"
    assert config.aiokafka_config()["sasl_plain_password"] == SECRET


# -- secrets -----------------------------------------------------------------------------------
def secret_config() -> Config:
    return load_config({
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
        "sasl_username": "alice", "sasl_password": SECRET, "ssl_key_password": SECRET,
        "kafka_config": parse_kafka_config([
            f"sasl.oauthbearer.client.secret={SECRET}",
            f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
            f"required password={SECRET};",
            f"ssl.keystore.password={SECRET}",
            "linger.ms=5",
        ]),
    }, {})


def test_masked_hides_every_secret() -> None:
    config = secret_config()
    shown = config.masked()
    assert SECRET not in json.dumps(shown)
    assert shown["sasl_password"] == MASK
    assert shown["ssl_key_password"] == MASK
    assert shown["sasl_username"] == "alice"
    assert shown["kafka_config"] == {
        "sasl.oauthbearer.client.secret": MASK, "sasl.jaas.config": MASK,
        "ssl.keystore.password": MASK, "linger.ms": "5",
    }
    # masking is for printing only: the clients still get the real values
    assert config.confluent_config()["sasl.password"] == SECRET


def test_repr_hides_the_named_secrets() -> None:
    config = load_config({"sasl_password": SECRET, "ssl_key_password": SECRET}, {})
    assert SECRET not in repr(config)


def test_repr_hides_pass_through_secrets() -> None:
    assert SECRET not in repr(secret_config())


def test_config_show_masks_secrets(capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSTREAM_SASL_PASSWORD", SECRET)
    assert main(["config", "show", "--security-protocol", "SASL_SSL", "--sasl-mechanism",
                 "SCRAM-SHA-256", "--sasl-username", "bob", "--ssl-key-password", SECRET,
                 "--kafka-config", f"sasl.oauthbearer.client.secret={SECRET}"]) == 0
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    shown = json.loads(captured.out)
    assert shown["sasl_password"] == MASK
    assert shown["ssl_key_password"] == MASK
    assert shown["kafka_config"] == {"sasl.oauthbearer.client.secret": MASK}
    assert shown["sasl_username"] == "bob"


# -- secrets from files ------------------------------------------------------------------------
def test_passwords_come_from_files_and_stay_masked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sasl.password").write_text(SECRET + "\n")
    (tmp_path / "key.password").write_text(f"{SECRET}-key\n\n")  # only one newline goes
    monkeypatch.setenv("INFERSTREAM_SASL_PASSWORD_FILE", str(tmp_path / "sasl.password"))
    settings = tmp_path / "settings.toml"
    settings.write_text(f'ssl_key_password_file = "{tmp_path / "key.password"}"\n')
    config = load_config({"config_file": str(settings)})
    assert config.confluent_config()["sasl.password"] == SECRET
    assert config.confluent_config()["ssl.key.password"] == f"{SECRET}-key\n"
    assert main(["config", "show", "--config", str(settings)]) == 0
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    shown = json.loads(captured.out)
    assert shown["sasl_password"] == MASK
    assert shown["sasl_password_file"] == str(tmp_path / "sasl.password")
    assert SECRET not in repr(config)


def test_a_config_built_in_python_reads_its_password_file_once(tmp_path: Path) -> None:
    secret = tmp_path / "sasl.password"
    secret.write_text(SECRET)
    config = Config(sasl_password_file=str(secret))
    secret.unlink()  # a derived config keeps the password read at start
    assert dataclasses.replace(config, pool="gpu").sasl_password == SECRET


def test_an_unreadable_password_file_is_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.password"
    with pytest.raises(ConfigError) as error:
        load_config({"sasl_password_file": str(missing)}, {})
    assert str(error.value) == f"sasl_password_file {missing}: cannot read it " \
                               "(No such file or directory)"
    with pytest.raises(ConfigError, match=f"ssl_key_password_file {tmp_path}: cannot read"):
        load_config({"ssl_key_password_file": str(tmp_path)}, {})  # a folder


def test_a_password_and_its_file_together_are_an_error(tmp_path: Path) -> None:
    secret = tmp_path / "sasl.password"
    secret.write_text(SECRET)
    with pytest.raises(ConfigError, match="set sasl_password or sasl_password_file, not both"):
        load_config({"sasl_password_file": str(secret)},
                    {"INFERSTREAM_SASL_PASSWORD": SECRET})
