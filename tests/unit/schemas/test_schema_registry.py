"""The codec against a fake Confluent Schema Registry served on 127.0.0.1."""

from __future__ import annotations

import io
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from inferstream.schemas import Codec, SchemaError, load_schema

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


class FakeRegistry:
    """The two Schema Registry endpoints the codec uses, with ids counted from 1."""

    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[str] = []
        self.fail_with: int | None = None
        self.url = ""

    def register(self, subject: str, schema_text: str) -> int:
        wanted = json.loads(schema_text)
        known = [i for i, text in self.schemas.items() if json.loads(text) == wanted]
        schema_id = known[0] if known else len(self.schemas) + 1
        self.schemas[schema_id] = schema_text
        self.subjects.setdefault(subject, []).append(schema_id)
        return schema_id

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        self.requests.append(f"{method} {path}")
        if self.fail_with is not None:
            return self.fail_with, {"error_code": self.fail_with, "message": "boom"}
        parts = path.strip("/").split("/")
        if method == "POST" and len(parts) == 3 and parts[0] == "subjects":
            schema_id = self.register(parts[1], json.loads(body)["schema"])
            return 200, {"id": schema_id}
        if method == "GET" and parts[:2] == ["schemas", "ids"] and int(parts[2]) in self.schemas:
            return 200, {"schema": self.schemas[int(parts[2])]}
        return 404, {"error_code": 40403, "message": "Schema not found"}


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    fake = FakeRegistry()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, answer = fake.answer(self.command, self.path, self.rfile.read(length))
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _reply

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake
    server.shutdown()
    server.server_close()
    thread.join()


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
