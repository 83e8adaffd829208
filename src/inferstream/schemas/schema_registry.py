"""A minimal client of the Confluent Schema Registry REST API (standard library only)."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from inferstream.schemas.errors import SchemaError, SchemaRegistryError, SchemaRegistryTLSError
from inferstream.schemas.registry_tls import RegistryTls

if TYPE_CHECKING:
    from inferstream.config import Config

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
#: What a registry's refusal means, by HTTP status, in the user's terms.
_REFUSALS = {
    401: "refused the credentials: check schema_registry_user and "
         "schema_registry_password_file",
    403: "refused the credentials: check schema_registry_user and "
         "schema_registry_password_file",
    409: "refused the schema as incompatible with the subject's earlier versions at its "
         "compatibility level (GET /config/SUBJECT)",
}


class SchemaRegistryClient:
    """Registers schemas and fetches them by id; callers cache the answers.

    With `user` and `password`, every request carries them in HTTP basic auth. An https
    registry's certificate is checked against `tls.cafile` (None: the system's CAs), and
    `tls.certfile` is this client's certificate where the registry asks for one.
    """

    def __init__(self, url: str, *, timeout_s: float = 10.0, user: str | None = None,
                 password: str | None = None, tls: RegistryTls | None = None) -> None:
        scheme = urllib.parse.urlsplit(url).scheme
        if scheme not in ("http", "https"):
            raise SchemaError(f"schema registry url must be http(s), got {url!r}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._tls = tls or RegistryTls()
        self._context = self._tls.context() if scheme == "https" else None
        self._authorization = None if user is None else "Basic " + base64.b64encode(
            f"{user}:{password or ''}".encode()).decode("ascii")

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """Register `schema` under `subject` (idempotent) and return its global id."""
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        body = json.dumps({"schema": json.dumps(schema)}).encode()
        answer = self._object("POST", path, body)
        return _int_field(answer, "id", self.url + path)

    def subjects(self) -> list[str]:
        """The subjects the registry shows this user: a cheap request that any logged-in
        user may make, to check the URL and the credentials."""
        answer = self._request("GET", "/subjects", None)
        if not isinstance(answer, list):
            raise SchemaRegistryError(f"schema registry {self.url}/subjects answered {answer!r}",
                                      url=self.url + "/subjects", status=200)
        return [str(subject) for subject in answer]

    def schema_by_id(self, schema_id: int) -> dict[str, Any]:
        """Fetch the schema registered with `schema_id`; SchemaError when there is none."""
        path = f"/schemas/ids/{schema_id}"
        try:
            answer = self._object("GET", path, None)
        except SchemaRegistryError as exc:
            if exc.status == 404:
                raise SchemaRegistryError(
                    f"unknown schema id {schema_id}: {exc}", url=exc.url, status=404
                ) from exc
            raise
        text = answer.get("schema")
        if not isinstance(text, str):
            raise SchemaError(f"schema registry {self.url}{path} answered without a schema")
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"schema id {schema_id} is not JSON: {exc}") from exc
        if not isinstance(schema, dict):
            raise SchemaError(f"schema id {schema_id} is not a record schema")
        return schema

    def _object(self, method: str, path: str, body: bytes | None) -> dict[str, Any]:
        """A request whose answer must be a JSON object."""
        answer = self._request(method, path, body)
        if not isinstance(answer, dict):
            raise SchemaRegistryError(f"schema registry {method} {self.url}{path} answered "
                                      f"{answer!r}", url=self.url + path, status=200)
        return answer

    def _request(self, method: str, path: str, body: bytes | None) -> Any:
        url = self.url + path
        headers = {"Accept": _CONTENT_TYPE}
        if body is not None:
            headers["Content-Type"] = _CONTENT_TYPE
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        request = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310 - scheme checked in __init__
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s,  # noqa: S310 - scheme checked in __init__
                                        context=self._context) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                said = _message(exc.read())
            finally:
                exc.close()  # the error carries the open response
            meaning = _REFUSALS.get(exc.code)
            raise SchemaRegistryError(
                f"schema registry {method} {url} returned HTTP {exc.code}"
                + (f": it {meaning}" if meaning else "") + (f" ({said})" if said else ""),
                url=url, status=exc.code,
            ) from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            refused = None if self._context is None else self._tls.refusal(self.url, reason)
            if refused is not None:
                raise SchemaRegistryTLSError(refused, url=url, status=None) from exc
            raise SchemaRegistryError(
                f"schema registry {method} {url} failed: {self._failure(reason)}",
                url=url, status=None
            ) from exc
        except json.JSONDecodeError as exc:
            raise SchemaRegistryError(
                f"schema registry {method} {url} answered non-JSON: {exc}", url=url, status=200
            ) from exc
        return answer

    def _failure(self, reason: object) -> str:
        """Why a request got no answer, with a hint where the URL's scheme is not what the
        registry speaks."""
        said = str(reason) or type(reason).__name__
        if self._context is not None and isinstance(reason, ssl.SSLError) and \
                reason.reason == "WRONG_VERSION_NUMBER":
            return f"{said}; it does not speak TLS: if it serves plain HTTP, use an http:// URL"
        if self._context is None and isinstance(
                reason, ConnectionResetError | http.client.BadStatusLine):
            return f"{said}; if it serves HTTPS, use an https:// URL"
        return said


def registry_client(config: Config) -> SchemaRegistryClient | None:
    """The client of `config`'s schema registry, logged in as schema_registry_user, its TLS
    from the schema_registry_*file settings; None without schema_registry_url."""
    if config.schema_registry_url is None:
        return None
    return SchemaRegistryClient(config.schema_registry_url, user=config.schema_registry_user,
                                password=config.schema_registry_password,
                                tls=RegistryTls.of(config))


def _message(body: bytes) -> str:
    """The `message` of a registry's JSON error body; empty when it has none."""
    try:
        answer = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return ""
    said = answer.get("message") if isinstance(answer, dict) else None
    return said if isinstance(said, str) else ""


def _int_field(answer: dict[str, Any], key: str, url: str) -> int:
    value = answer.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SchemaRegistryError(
            f"schema registry {url} answered without an {key}", url=url, status=200
        )
    return value
