"""An https schema registry whose certificate a private CA signed, served on loopback by the
fake registry: its certificate checked against schema_registry_cafile, a client certificate
where it asks for one (mTLS), and each refusal one line naming the URL and what to change."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from inferstream.cli import main
from inferstream.config import Config, StreamConfig, load_config
from inferstream.errors import ConfigError
from inferstream.kafka.preflight import check_registry
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.errors import SchemaRegistryTLSError
from inferstream.stream.formats import AvroEnvelope
from tests.unit.support.fake_registry import FakeRegistry, https_registry, serve_registry
from tests.unit.support.tls import Certificates

JOB = {"job_id": "job-1", "model": "googlenet", "model_version": None, "pool": "gpu",
       "top_k": 3, "chunk_size": 16, "inputs": ["/data/val"], "inline_items": [],
       "submitted_at": 1_700_000_000_000, "submitter": "alice", "output_path": None,
       "priority": 0, "weight": 1.0}
CLIENT_SETTINGS = "set schema_registry_certfile and schema_registry_keyfile"


def settings(url: str, **files: Path) -> Config:
    """A Config of the registry at `url` with schema_registry_<name> = each of `files`."""
    named: dict[str, Any] = {f"schema_registry_{name}": str(path)
                             for name, path in files.items()}
    return Config(schema_registry_url=url, **named)


def refusal(config: Config) -> str:
    """The start-up check's line for `config`'s registry, which must fail the handshake."""
    with pytest.raises(SchemaRegistryTLSError) as raised:
        check_registry(config)
    said = str(raised.value)
    assert "\n" not in said and "--schema-registry-url" not in said, said
    return said


def test_a_private_ca_s_registry_is_verified_with_schema_registry_cafile(
        certificates: Certificates) -> None:
    with https_registry(certificates.cert, certificates.key) as registry:
        assert registry.url.startswith("https://127.0.0.1:")
        config = settings(registry.url, cafile=certificates.ca)
        check_registry(config)
        codec = Codec.for_config(config)
        assert Codec.for_config(config).decode(codec.encode("Job", JOB)) == JOB
        schema_id = registry.register("uploads-value", '{"type": "record", "name": "U", '
                                      '"fields": [{"name": "image", "type": "bytes"}]}')
        value = b"\x00" + schema_id.to_bytes(4, "big") + b"\x04hi"
        stream = Config(schema_registry_url=registry.url,
                        schema_registry_cafile=str(certificates.ca),
                        stream=StreamConfig(input_format="avro", field="image"))
        assert AvroEnvelope(stream).decode(value) == {"image": b"hi"}
    assert registry.requests[:2] == ["GET /subjects", "POST /subjects/inferstream.Job/versions"]


def test_without_the_registry_s_ca_its_certificate_is_one_line_naming_schema_registry_cafile(
        certificates: Certificates) -> None:
    """ssl_cafile, the brokers' CA, is not the registry's: the line says so."""
    with https_registry(certificates.cert, certificates.key) as registry:
        unset = Config(schema_registry_url=registry.url, ssl_cafile=str(certificates.ca))
        said = refusal(unset)
        assert said.startswith(
            f"the schema registry's certificate at {registry.url} could not be verified "
            "against schema_registry_cafile (none: the system's CAs; ssl_cafile is for the "
            "brokers only) (unable to get local issuer certificate): set schema_registry_cafile"
            " (INFERSTREAM_SCHEMA_REGISTRY_CAFILE) to the CA that signed it"), said
        wrong = settings(registry.url, cafile=certificates.other_ca)
        assert f"schema_registry_cafile ({certificates.other_ca})" in refusal(wrong)
        with pytest.raises(SchemaError, match="could not be verified against") as raised:
            Codec.for_config(wrong).encode("Job", JOB)  # a role's later request says the same
        assert "\n" not in str(raised.value)
    assert registry.requests == []


def test_a_registry_certificate_for_another_host_is_one_line_naming_the_url(
        certificates: Certificates) -> None:
    with https_registry(certificates.client, certificates.client_key) as registry:
        said = refusal(settings(registry.url, cafile=certificates.ca))
    assert said == (
        f"the schema registry's certificate at {registry.url} is not valid for 127.0.0.1 (IP "
        "address mismatch, certificate is not valid for '127.0.0.1'.): name the registry in "
        "schema_registry_url as its certificate does")


@pytest.mark.parametrize("tls12", [False, True], ids=["tls1.3", "tls1.2"])
def test_a_registry_that_asks_for_a_client_certificate_gets_schema_registry_certfile(
        certificates: Certificates, tls12: bool) -> None:
    """With TLS 1.3 the registry's alert may be lost to the connection's close, and with TLS
    1.2 it may say only "handshake failure": either way the line names the settings."""
    with https_registry(certificates.cert, certificates.key, certificates.ca,
                        tls12) as registry:
        given = settings(registry.url, cafile=certificates.ca, certfile=certificates.client,
                         keyfile=certificates.client_key)
        check_registry(given)
        codec = Codec.for_config(given)
        assert codec.decode(codec.encode("Job", JOB)) == JOB
        none = refusal(settings(registry.url, cafile=certificates.ca))
        assert none.startswith(f"the schema registry at {registry.url} ")
        assert CLIENT_SETTINGS in none
        other = refusal(settings(registry.url, cafile=certificates.ca,
                                 certfile=certificates.other_ca,
                                 keyfile=certificates.other_key))
    assert f"the client certificate of schema_registry_certfile {certificates.other_ca}" \
        in other
    assert registry.requests == ["GET /subjects", "POST /subjects/inferstream.Job/versions"]


def test_a_registry_tls_file_that_does_not_load_is_one_line_naming_its_setting(
        certificates: Certificates, tmp_path: Path) -> None:
    url = "https://127.0.0.1:1"  # nothing is asked: the files are read first
    missing = tmp_path / "missing.pem"
    cases = {
        settings(url, cafile=missing):
            f"schema_registry_cafile {missing}: cannot read it (No such file or directory)",
        settings(url, cafile=certificates.key):
            f"schema_registry_cafile {certificates.key}: it holds no PEM CA certificate "
            "(NO_CERTIFICATE_OR_CRL_FOUND)",
        settings(url, certfile=missing, keyfile=certificates.client_key):
            f"schema_registry_certfile {missing}: cannot read it (No such file or directory)",
        settings(url, certfile=certificates.client, keyfile=certificates.key):
            f"schema_registry_certfile {certificates.client} and schema_registry_keyfile "
            f"{certificates.key} do not load as a certificate and its key (KEY_VALUES_MISMATCH)",
    }
    for config, line in cases.items():
        with pytest.raises(ConfigError) as raised:
            check_registry(config)
        assert str(raised.value) == line
        with pytest.raises(ConfigError):
            Codec.for_config(config)


def test_an_encrypted_client_key_is_refused_without_a_password_prompt(
        certificates: Certificates, tmp_path: Path) -> None:
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", str(certificates.client_key), "-aes256",
                    "-passout", "pass:secret", "-out", str(encrypted)], check=True)
    config = settings("https://127.0.0.1:1", certfile=certificates.client, keyfile=encrypted)
    with pytest.raises(ConfigError, match=f"schema_registry_keyfile {encrypted} is encrypted"):
        check_registry(config)


def test_registry_tls_settings_go_together_and_need_an_https_url(
        certificates: Certificates) -> None:
    with pytest.raises(ConfigError, match="schema_registry_certfile and schema_registry_keyfile "
                                          "go together"):
        settings("https://r:8081", certfile=certificates.client)
    with pytest.raises(ConfigError, match="schema_registry_cafile needs an https:// "
                                          "schema_registry_url, got http://r:8081"):
        settings("http://r:8081", cafile=certificates.ca)
    with pytest.raises(ConfigError, match="schema_registry_cafile and schema_registry_certfile "
                                          "and schema_registry_keyfile need an https:// "
                                          "schema_registry_url, which is not set"):
        Config(schema_registry_cafile=str(certificates.ca),
               schema_registry_certfile=str(certificates.client),
               schema_registry_keyfile=str(certificates.client_key))
    environ = {"INFERSTREAM_SCHEMA_REGISTRY_URL": "https://r:8081",
               "INFERSTREAM_SCHEMA_REGISTRY_CAFILE": str(certificates.ca),
               "INFERSTREAM_SCHEMA_REGISTRY_CERTFILE": str(certificates.client),
               "INFERSTREAM_SCHEMA_REGISTRY_KEYFILE": str(certificates.client_key)}
    config = load_config({}, environ)
    assert (config.schema_registry_cafile, config.schema_registry_keyfile) == (
        str(certificates.ca), str(certificates.client_key))


def test_a_command_with_a_missing_registry_ca_says_so_in_one_line_before_the_cluster(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No broker listens at 127.0.0.1:1: the file is checked before the cluster is asked."""
    missing = tmp_path / "ca.pem"
    code = main(["status", "--bootstrap-servers", "127.0.0.1:1", "--schema-registry-url",
                 "https://127.0.0.1:1", "--schema-registry-cafile", str(missing)])
    assert code == 2
    assert capsys.readouterr().err == (f"inferstream: error: schema_registry_cafile {missing}: "
                                       "cannot read it (No such file or directory)\n")


def test_a_url_whose_scheme_the_registry_does_not_speak_says_which_to_use(
        certificates: Certificates) -> None:
    with https_registry(certificates.cert, certificates.key) as registry:
        plain = registry.url.replace("https://", "http://")
        with pytest.raises(SchemaError, match="if it serves HTTPS, use an https:// URL"):
            check_registry(Config(schema_registry_url=plain))
    with serve_registry(FakeRegistry()) as registry, pytest.raises(
            SchemaError, match="it does not speak TLS: if it serves plain HTTP, use an http://"):
        check_registry(settings(registry.url.replace("http://", "https://"),
                                cafile=certificates.ca))
