"""The codec against a fake Confluent Schema Registry served on 127.0.0.1: the wire format,
compatibility refusals and basic auth."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_writer

from inferstream.config import MASK, Config, StreamConfig
from inferstream.errors import ConfigError
from inferstream.kafka.preflight import check_registry
from inferstream.schemas import SCHEMA_NAMES, Codec, SchemaError, load_schema
from inferstream.schemas.codec import history_schemas
from inferstream.schemas.schema_registry import SchemaRegistryClient
from inferstream.stream.formats import AvroEnvelope
from tests.unit.support.fake_registry import FakeRegistry, serve_registry

PASSWORD = "s3cret"  # noqa: S105 (a test value)

T0 = 1_700_000_000_000
JOB = {
    "job_id": "job-1",
    "model": "googlenet",
    "model_version": None,
    "pool": "gpu",
    "top_k": 3,
    "chunk_size": 16,
    "inputs": ["/data/val"],
    "inline_items": [],
    "submitted_at": T0,
    "submitter": "alice",
    "output_path": None,
    "priority": 0,
    "weight": 1.0,
}


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with serve_registry(FakeRegistry()) as fake:
        yield fake


def test_round_trip_through_the_confluent_wire_format(registry: FakeRegistry) -> None:
    encoded = Codec(registry.url).encode("Job", JOB)
    (schema_id,) = registry.subjects["inferstream.Job"]
    assert encoded[0] == 0
    assert int.from_bytes(encoded[1:5], "big") == schema_id
    assert json.loads(registry.schemas[schema_id]) == load_schema("Job")
    assert Codec(registry.url).decode(encoded, expected="Job") == JOB
    assert f"GET /schemas/ids/{schema_id}" in registry.requests


def test_ids_are_registered_once_and_cached(registry: FakeRegistry) -> None:
    codec = Codec(registry.url)
    for _ in range(3):
        assert codec.decode(codec.encode("Job", JOB)) == JOB
    assert registry.requests == ["POST /subjects/inferstream.Job/versions"]


def test_unknown_schema_id_is_a_schema_error(registry: FakeRegistry) -> None:
    with pytest.raises(SchemaError, match="unknown schema id 999") as info:
        Codec(registry.url).decode(b"\x00\x00\x00\x03\xe7\x02")
    assert f"{registry.url}/schemas/ids/999" in str(info.value)
    assert "404" in str(info.value)


def test_older_writer_from_the_registry_is_projected(registry: FakeRegistry) -> None:
    v1 = load_schema("Job")
    v1["fields"] = [f for f in v1["fields"] if f["name"] not in ("submitter", "output_path")]
    schema_id = registry.register("inferstream.Job", json.dumps(v1))
    body = io.BytesIO()
    old = {k: v for k, v in JOB.items() if k not in ("submitter", "output_path")}
    schemaless_writer(body, parse_schema(v1), old)
    data = b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()
    assert Codec(registry.url).decode(data) == {**old, "submitter": "", "output_path": None}


def test_registry_http_failure_names_url_and_status(registry: FakeRegistry) -> None:
    registry.fail_with = 500
    with pytest.raises(SchemaError, match="HTTP 500") as info:
        Codec(registry.url).encode("Task", {})
    assert f"{registry.url}/subjects/inferstream.Task/versions" in str(info.value)


def test_unreachable_registry_is_a_schema_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(SchemaError, match=f"{url}/subjects/inferstream.Job/versions failed"):
        Codec(url, timeout_s=2.0).encode("Job", JOB)


def test_registry_codec_still_reads_single_object_encoding(registry: FakeRegistry) -> None:
    assert Codec(registry.url).decode(Codec().encode("Job", JOB)) == JOB
    assert registry.requests == []


def test_registry_url_must_be_http() -> None:
    with pytest.raises(SchemaError, match="must be http"):
        Codec("file:///etc/passwd")


def test_a_schema_that_cannot_read_the_subject_s_records_is_refused_in_words(
        registry: FakeRegistry) -> None:
    """As Confluent's registry does at its default level, BACKWARD: the subject holds a Job
    schema whose top_k was a string, which the current schema (an int) cannot read, so the
    registry refuses it and the codec says why instead of writing."""
    earlier = load_schema("Job")
    earlier["fields"] = [{**f, "type": "string", "default": "3"} if f["name"] == "top_k" else f
                         for f in earlier["fields"]]
    registry.register("inferstream.Job", json.dumps(earlier))
    with pytest.raises(SchemaError, match="HTTP 409") as info:
        Codec(registry.url).encode("Job", JOB)
    message = str(info.value)
    assert "incompatible with the subject's earlier versions" in message
    assert "top_k" in message and "\n" not in message
    assert registry.subjects["inferstream.Job"] == [1]


def test_a_new_field_without_a_default_is_refused_and_one_with_a_default_accepted(
        registry: FakeRegistry) -> None:
    client = SchemaRegistryClient(registry.url)
    job = load_schema("Job")
    client.register("inferstream.Job", job)
    with pytest.raises(SchemaError, match=r"HTTP 409.*queue: a new field without a default"):
        client.register("inferstream.Job", {**job, "fields": [
            *job["fields"], {"name": "queue", "type": "string"}]})
    later = {**job, "fields": [*job["fields"], {"name": "queue", "type": "string",
                                                "default": ""}]}
    assert client.register("inferstream.Job", later) == 2
    assert registry.subjects["inferstream.Job"] == [1, 2]


def test_every_schema_reads_all_its_earlier_versions_as_a_registry_checks_it(
        registry: FakeRegistry) -> None:
    """A registry at BACKWARD_TRANSITIVE that holds each schema's history, oldest first,
    accepts the current schema: no new version of a record breaks a registry's subject."""
    registry.level = "BACKWARD_TRANSITIVE"
    client = SchemaRegistryClient(registry.url)
    for schema in history_schemas():
        client.register(f"inferstream.{schema['name']}", schema)
    for name in SCHEMA_NAMES:
        client.register(f"inferstream.{name}", load_schema(name))
    assert all(len(registry.subjects[f"inferstream.{name}"]) >= 1 for name in SCHEMA_NAMES)


def test_basic_auth_right_credentials_pass_and_wrong_ones_are_one_line() -> None:
    with serve_registry(FakeRegistry(users={"alice": PASSWORD})) as registry:
        codec = Codec(registry.url, user="alice", password=PASSWORD)
        assert codec.decode(codec.encode("Job", JOB)) == JOB
        for user, password in (("alice", "wrong"), ("mallory", PASSWORD)):
            with pytest.raises(SchemaError, match="HTTP 401: it refused the credentials") as info:
                Codec(registry.url, user=user, password=password).encode("Job", JOB)
            assert "\n" not in str(info.value) and password not in str(info.value)
        with pytest.raises(SchemaError, match="HTTP 401"):
            Codec(registry.url).encode("Job", JOB)


def test_registry_credentials_from_settings_and_a_password_file(tmp_path: Path) -> None:
    secret = tmp_path / "registry.password"
    secret.write_text(PASSWORD + "\n")
    with serve_registry(FakeRegistry(users={"alice": PASSWORD})) as registry:
        config = Config(schema_registry_url=registry.url, schema_registry_user="alice",
                        schema_registry_password_file=str(secret))
        codec = Codec.for_config(config)
        assert codec.decode(codec.encode("Job", JOB)) == JOB
    assert config.masked()["schema_registry_password"] == MASK
    assert PASSWORD not in repr(config)


def test_a_registry_password_needs_a_user_and_a_url() -> None:
    with pytest.raises(ConfigError, match="needs schema_registry_user"):
        Config(schema_registry_url="http://127.0.0.1:1", schema_registry_password=PASSWORD)
    with pytest.raises(ConfigError, match="need schema_registry_url"):
        Config(schema_registry_user="alice", schema_registry_password=PASSWORD)


def test_a_registry_under_a_path_as_apicurio_serves_confluent_s_api() -> None:
    with serve_registry(FakeRegistry(prefix="/apis/ccompat/v7")) as registry:
        encoded = Codec(registry.url).encode("Job", JOB)
        assert Codec(registry.url).decode(encoded) == JOB
        assert registry.url.endswith("/apis/ccompat/v7")
        assert registry.requests[0] == "POST /subjects/inferstream.Job/versions"


def test_a_stream_reads_a_foreign_producer_s_records_through_a_registry_with_basic_auth(
) -> None:
    upload = {"type": "record", "name": "Upload", "namespace": "com.example",
              "fields": [{"name": "id", "type": "string"}, {"name": "image", "type": "bytes"}]}
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(upload), {"id": "a", "image": b"pixels"})
    with serve_registry(FakeRegistry(users={"alice": PASSWORD})) as registry:
        schema_id = registry.register("uploads-value", json.dumps(upload))
        config = Config(schema_registry_url=registry.url, schema_registry_user="alice",
                        schema_registry_password=PASSWORD,
                        stream=StreamConfig(input_format="avro", field="image"))
        value = b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()
        assert AvroEnvelope(config).decode(value) == {"id": "a", "image": b"pixels"}
        assert registry.requests == [f"GET /schemas/ids/{schema_id}"]


def test_a_role_s_start_up_check_refuses_wrong_registry_credentials_in_one_line() -> None:
    with serve_registry(FakeRegistry(users={"alice": PASSWORD})) as registry:
        check_registry(Config(schema_registry_url=registry.url, schema_registry_user="alice",
                              schema_registry_password=PASSWORD))
        wrong = Config(schema_registry_url=registry.url, schema_registry_user="alice",
                       schema_registry_password="not-it")  # noqa: S106 (a test value)
        with pytest.raises(SchemaError, match=r"GET .*/subjects returned HTTP 401: it refused"):
            check_registry(wrong)
        check_registry(Config())  # no registry: nothing to ask
        assert registry.requests == ["GET /subjects", "GET /subjects"]


def test_a_registry_that_does_not_answer_is_one_line_naming_the_setting() -> None:
    """As a broker that does not answer names --bootstrap-servers (docs/configuration.md,
    start-up checks), not `<urlopen error [Errno 111] Connection refused>` alone."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"  # bound, not listening
        with pytest.raises(SchemaError) as raised:
            check_registry(Config(schema_registry_url=url))
    said = str(raised.value)
    assert said.startswith(f"schema registry GET {url}/subjects failed: [Errno 111]")
    assert "set --schema-registry-url (INFERSTREAM_SCHEMA_REGISTRY_URL)" in said
    assert "<urlopen error" not in said and "\n" not in said
    with serve_registry(FakeRegistry()) as registry, pytest.raises(SchemaError) as raised:
        check_registry(Config(schema_registry_url=registry.url + "/not-the-registry"))
    assert "returned HTTP 404" in str(raised.value)
    assert "set --schema-registry-url" in str(raised.value)
