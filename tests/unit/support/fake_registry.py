"""A fake Confluent Schema Registry on loopback: the endpoints inferstream's codec uses and
those a user checks with, compatibility checks as Confluent's, and basic auth.

Registering under a subject checks the new schema against the subject's versions at its
compatibility level (BACKWARD unless set: the new schema must read what the latest wrote) and
answers 409 when it cannot, as Confluent's registry does. With `users`, every request must
carry one of them in HTTP basic auth, else 401.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: Avro's promotions: a writer's type (key) that a reader of each listed type reads.
_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"},
               "float": {"double"}, "string": {"bytes"}, "bytes": {"string"}}
_NAMED = ("record", "enum", "fixed")
_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")


def _named(schema: Any, names: dict[str, Any], space: str = "") -> Any:
    """`schema` with each named type moved into `names` under its full name and referred to
    by it; logical types are read as their base type, so they are dropped."""
    if isinstance(schema, list):
        return [_named(branch, names, space) for branch in schema]
    if isinstance(schema, str):
        if schema in _PRIMITIVES or "." in schema or not space:
            return schema
        return f"{space}.{schema}"
    kind = schema["type"]
    if kind in _NAMED:
        full = schema["name"] if "." in schema["name"] else ".".join(
            filter(None, [schema.get("namespace", space), schema["name"]]))
        space = full.rpartition(".")[0]
        names[full] = schema = {**schema, "name": full}
        if kind == "record":
            schema["fields"] = [{**f, "type": _named(f["type"], names, space)}
                                for f in schema["fields"]]
        return full
    if kind == "array":
        return {"type": kind, "items": _named(schema["items"], names, space)}
    if kind == "map":
        return {"type": kind, "values": _named(schema["values"], names, space)}
    return _named(kind, names, space)


def _kind(schema: Any) -> str:
    return schema if isinstance(schema, str) else str(schema["type"])


class _Reading:
    """Whether a reader schema reads what a writer schema wrote (Avro schema resolution)."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self.readers: dict[str, Any] = {}
        self.writers: dict[str, Any] = {}
        self.reader = _named(reader, self.readers)
        self.writer = _named(writer, self.writers)
        self.problems: list[str] = []
        self._open: set[tuple[str, str]] = set()

    def check(self) -> list[str]:
        self._reads(self.reader, self.writer, "")
        return self.problems

    def _reads(self, reader: Any, writer: Any, at: str) -> bool:
        pair = (str(reader), str(writer))
        if pair in self._open:  # a recursive type, being checked where it began
            return True
        self._open.add(pair)
        try:
            return self._resolved(self.readers.get(reader, reader) if isinstance(reader, str)
                                  else reader,
                                  self.writers.get(writer, writer) if isinstance(writer, str)
                                  else writer, at)
        finally:
            self._open.discard(pair)

    def _resolved(self, r: Any, w: Any, at: str) -> bool:
        if isinstance(w, list):
            return all([self._reads(r, branch, at) for branch in w])
        if isinstance(r, list):
            for branch in r:
                mark = len(self.problems)
                if self._reads(branch, w, at):
                    return True
                del self.problems[mark:]
            return self._fail(at, f"no branch of the reader's union reads {_kind(w)}")
        rk, wk = _kind(r), _kind(w)
        if rk != wk:
            if rk in _PROMOTIONS.get(wk, ()):
                return True
            return self._fail(at, f"the reader's {rk} cannot read the writer's {wk}")
        if rk in _NAMED and r["name"].rpartition(".")[2] != w["name"].rpartition(".")[2]:
            return self._fail(at, f"the reader's {r['name']} is not the writer's {w['name']}")
        if rk == "record":
            return self._record(r, w, at)
        if rk == "enum" and "default" not in r and set(w["symbols"]) - set(r["symbols"]):
            return self._fail(at, f"symbols {sorted(set(w['symbols']) - set(r['symbols']))} "
                              "unknown to the reader's enum")
        if rk == "fixed" and r["size"] != w["size"]:
            return self._fail(at, "fixed sizes differ")
        if rk in ("array", "map"):
            key = "items" if rk == "array" else "values"
            return self._reads(r[key], w[key], f"{at}[]")
        return True

    def _record(self, r: dict[str, Any], w: dict[str, Any], at: str) -> bool:
        written = {f["name"]: f for f in w["fields"]}
        ok = True
        for field in r["fields"]:
            name = next((n for n in [field["name"], *field.get("aliases", [])] if n in written),
                        None)
            where = f"{at}.{field['name']}" if at else field["name"]
            if name is not None:
                ok = self._reads(field["type"], written[name]["type"], where) and ok
            elif "default" not in field:
                ok = self._fail(where, "a new field without a default") and ok
        return ok

    def _fail(self, at: str, why: str) -> bool:
        self.problems.append(f"{at or 'the schema'}: {why}")
        return False


def reading_problems(reader: Any, writer: Any) -> list[str]:
    """Why records written with `writer` cannot be read with `reader`; empty when they can."""
    return _Reading(reader, writer).check()


def compatibility_problems(level: str, new: Any, versions: list[Any]) -> list[str]:
    """What keeps `new` from joining a subject of `versions` (oldest first) at `level`."""
    if level == "NONE" or not versions:
        return []
    against = versions if level.endswith("_TRANSITIVE") else versions[-1:]
    problems: list[str] = []
    for old in against:
        if level.startswith(("BACKWARD", "FULL")):
            problems += reading_problems(new, old)
        if level.startswith(("FORWARD", "FULL")):
            problems += reading_problems(old, new)
    return problems


class FakeRegistry:
    """Subjects, versions and ids as a Confluent registry keeps them; ids counted from 1."""

    def __init__(self, users: dict[str, str] | None = None, prefix: str = "") -> None:
        self.prefix = prefix  # the API's path, as Apicurio's /apis/ccompat/v7
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}
        self.levels: dict[str, str] = {}
        self.level = "BACKWARD"
        self.users = users
        self.requests: list[str] = []
        self.fail_with: int | None = None
        self.url = ""

    def register(self, subject: str, schema_text: str) -> int:
        """Register as POST /subjects/SUBJECT/versions does, unchecked; the schema's id."""
        wanted = json.loads(schema_text)
        known = [i for i, text in self.schemas.items() if json.loads(text) == wanted]
        schema_id = known[0] if known else len(self.schemas) + 1
        self.schemas[schema_id] = schema_text
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    def answer(self, method: str, path: str, body: bytes,
               authorization: str | None = None) -> tuple[int, Any]:
        if not path.startswith(self.prefix):
            return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}
        path = path.removeprefix(self.prefix)
        self.requests.append(f"{method} {path}")
        if self.fail_with is not None:
            return self.fail_with, {"error_code": self.fail_with, "message": "boom"}
        if self.users is not None and not self._allowed(authorization):
            return 401, {"error_code": 401, "message": "Unauthorized"}
        parts = path.strip("/").split("/")
        if parts[0] == "subjects":
            return self._subjects(method, parts[1:], body)
        if parts[0] == "config":
            return self._config(method, parts[1:], body)
        if method == "GET" and parts[:2] == ["schemas", "ids"] and int(parts[2]) in self.schemas:
            return 200, {"schema": self.schemas[int(parts[2])]}
        return 404, {"error_code": 40403, "message": "Schema not found"}

    def _allowed(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "basic":
            return False
        user, _, password = base64.b64decode(token).decode().partition(":")
        return self.users is not None and self.users.get(user) == password

    def _subjects(self, method: str, parts: list[str], body: bytes) -> tuple[int, Any]:
        if not parts:
            return 200, sorted(self.subjects)
        subject = parts[0]
        if method == "POST" and parts[1:] == ["versions"]:
            schema_text = json.loads(body)["schema"]
            known = [json.loads(self.schemas[i]) for i in self.subjects.get(subject, [])]
            new = json.loads(schema_text)
            problems = [] if new in known else compatibility_problems(
                self.levels.get(subject, self.level), new, known)
            if problems:
                return 409, {"error_code": 409, "message": (
                    "Schema being registered is incompatible with an earlier schema for "
                    f"subject \"{subject}\", details: {problems}")}
            return 200, {"id": self.register(subject, schema_text)}
        if method == "GET" and parts[1:] == ["versions"] and subject in self.subjects:
            return 200, list(range(1, len(self.subjects[subject]) + 1))
        if method == "GET" and len(parts) == 3 and subject in self.subjects:
            ids = self.subjects[subject]
            version = len(ids) if parts[2] == "latest" else int(parts[2])
            if 1 <= version <= len(ids):
                schema_id = ids[version - 1]
                return 200, {"subject": subject, "version": version, "id": schema_id,
                             "schema": self.schemas[schema_id]}
        return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}

    def _config(self, method: str, parts: list[str], body: bytes) -> tuple[int, Any]:
        if method == "PUT":
            level = json.loads(body)["compatibility"]
            if level not in LEVELS:
                return 422, {"error_code": 42203, "message": f"Invalid compatibility level {level}"}
            if parts:
                self.levels[parts[0]] = level
            else:
                self.level = level
            return 200, {"compatibility": level}
        level = self.levels.get(parts[0], self.level) if parts else self.level
        return 200, {"compatibilityLevel": level}


@contextmanager
def serve_registry(fake: FakeRegistry, tls: ssl.SSLContext | None = None
                   ) -> Iterator[FakeRegistry]:
    """`fake` served on 127.0.0.1 from a thread (its `url` set) until the block ends; with
    `tls` (a server context), over HTTPS only."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, answer = fake.answer(self.command, self.path, self.rfile.read(length),
                                         self.headers.get("Authorization"))
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = _reply

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:  # each handshake runs at accept: a refused one drops the connection
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    scheme = "http" if tls is None else "https"
    fake.url = f"{scheme}://127.0.0.1:{server.server_address[1]}{fake.prefix}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def https_registry(cert: Path, key: Path, client_ca: Path | None = None,
                   tls12: bool = False) -> Iterator[FakeRegistry]:
    """The fake registry over HTTPS with `cert`; with `client_ca`, it asks every client for a
    certificate that CA signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    if tls12:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    with serve_registry(FakeRegistry(), context) as registry:
        yield registry
