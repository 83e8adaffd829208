"""`SysInfoClient`: the sysinfo app's HTTP API (workers, samples, policy, health) from Python.

    client = SysInfoClient.from_config(load_config())
    for w in client.workers():
        print(w["worker"], w["health"], w["items_per_s"])

Standard library only (urllib), so that scripts and `inferstream top` start fast without
the Kafka clients. Results are the JSON of the API, typed; health and kind fields are enums.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, TypedDict, TypeVar, cast

from inferstream.client.errors import (
    SysInfoNotFoundError,
    SysInfoRefusedError,
    SysInfoResponseError,
    SysInfoUnreachableError,
)
from inferstream.config import Config
from inferstream.errors import ConfigError
from inferstream.http import client_context
from inferstream.schemas.records import (
    Calibration,
    PolicyEntry,
    SysInfoSample,
    WorkerHealth,
    as_record,
)

#: Where the URL is set, for the one-line error when nothing answers there.
URL_SETTING = "--sysinfo-url or INFERSTREAM_SYSINFO_URL"
#: Where the token and the CA are set, for the one-line errors when they are refused.
TOKEN_SETTING = "http_token_file (INFERSTREAM_HTTP_TOKEN_FILE)"  # noqa: S105 - a name
CA_SETTING = "http_tls_cafile (INFERSTREAM_HTTP_TLS_CAFILE)"


class AppHealth(TypedDict):
    """GET /health: the app's status, its live workers, pools, last policy write (ms)."""

    status: str
    workers: int
    pools: list[str]
    policy_updated_at: int | None


class WorkerInfo(TypedDict):
    """One worker as the sysinfo app sees it (GET /workers); times in ms since the epoch."""

    worker: str
    pool: str
    host: str
    health: WorkerHealth
    last_seen: int
    models: list[str]
    device: str
    accelerator: str | None
    items_per_s: float
    latency_seconds_p95: float | None
    share: float | None
    capacity_items_per_s: float | None
    assigned_partitions: list[int]
    queue_depth: int
    consumer_lag: int | None
    calibration: Calibration | None
    #: items/s of each model it serves, by reference (NAME, or NAME:VERSION)
    model_rates: dict[str, float]


class WorkerDetail(WorkerInfo):
    """GET /workers/{id}: a worker and its latest sample."""

    sample: SysInfoSample


_T = TypeVar("_T", bound=Mapping[str, object])


class SysInfoClient:
    """Calls of the sysinfo app's HTTP API at `base_url`; each waits at most `timeout_s`.

    Each call carries `token` as `Authorization: Bearer` where given; an https URL's
    certificate is checked against `cafile` (None: the system's CAs). Errors are
    `SysInfoError`s: unreachable, not found (404, with the server's message), the token or the
    certificate refused, or a response outside the contract.
    """

    def __init__(self, base_url: str, timeout_s: float = 5.0, *, token: str | None = None,
                 cafile: str | None = None) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"sysinfo_url {base_url!r} is not an http(s):// URL")
        if timeout_s <= 0:
            raise ConfigError(f"sysinfo timeout must be > 0, got {timeout_s:g}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._token = token
        self._context = client_context(cafile) if parts.scheme == "https" else None

    @classmethod
    def from_config(cls, config: Config, timeout_s: float = 5.0) -> SysInfoClient:
        """A client of `config.sysinfo_url` with its `http_token` and `http_tls_cafile`."""
        return cls(config.sysinfo_url, timeout_s, token=config.http_token,
                   cafile=config.http_tls_cafile)

    def health(self) -> AppHealth:
        return _typed(self._get("/health"), AppHealth, "/health")

    def workers(self) -> list[WorkerInfo]:
        """Every worker the app has seen and not yet forgotten, healthy or not."""
        body = self._get("/workers")
        return [_typed(w, WorkerInfo, "/workers") for w in _list(body, "workers", "/workers")]

    def worker(self, worker_id: str) -> WorkerDetail:
        path = f"/workers/{_segment(worker_id)}"
        detail = _typed(self._get(path), WorkerDetail, path)
        detail["sample"] = _typed(detail["sample"], SysInfoSample, path)
        return detail

    def sysinfo(self, worker_id: str, since_ms: int | None = None) -> list[SysInfoSample]:
        """A worker's samples the app still holds, oldest first; `since_ms` keeps newer ones."""
        path = f"/sysinfo/{_segment(worker_id)}"
        query = {} if since_ms is None else {"since": str(since_ms)}
        body = self._get(path, query)
        return [_typed(s, SysInfoSample, path) for s in _list(body, "samples", path)]

    def policy(self, pool: str | None = None) -> list[PolicyEntry]:
        """The policy table's entries: of every pool, or of `pool` only."""
        path = "/policy" if pool is None else f"/policy/{_segment(pool)}"
        return [_typed(e, PolicyEntry, path) for e in _list(self._get(path), "entries", path)]

    def _get(self, path: str, query: dict[str, str] | None = None) -> Any:
        url = self.base_url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Accept": "application/json"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(url, headers=headers)  # noqa: S310 - scheme checked in __init__
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s,  # noqa: S310 - scheme checked in __init__
                                        context=self._context) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise _status_error(url, exc, self._token is not None) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLCertVerificationError):
                raise self._untrusted(url, exc.reason) from exc
            raise self._unreachable(url, exc.reason) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(url, exc) from exc
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise SysInfoResponseError(url, f"{url} did not answer JSON: {exc}") from exc

    def _untrusted(self, url: str, reason: ssl.SSLCertVerificationError
                   ) -> SysInfoRefusedError:
        why = reason.verify_message or reason.reason or str(reason)
        return SysInfoRefusedError(
            url, f"the sysinfo API at {self.base_url} has a certificate this client does not "
            f"trust ({why}): set {CA_SETTING} to the CA that signed it")

    def _unreachable(self, url: str, reason: object) -> SysInfoUnreachableError:
        if isinstance(reason, socket.timeout | TimeoutError):
            why = f"no answer within {self.timeout_s:g}s"
        elif isinstance(reason, ConnectionRefusedError):
            why = "connection refused"
        elif self._context is None and isinstance(
                reason, ConnectionResetError | http.client.RemoteDisconnected):
            why = f"{reason}; if it serves HTTPS, use an https:// URL"
        elif isinstance(reason, ssl.SSLError) and reason.reason == "WRONG_VERSION_NUMBER":
            why = "it does not speak TLS; if it serves plain HTTP, use an http:// URL"
        else:
            why = str(reason) or type(reason).__name__
        return SysInfoUnreachableError(
            url, f"cannot reach the sysinfo app at {self.base_url} ({why}); is "
            f"`inferstream sysinfo` running there? Set the URL with {URL_SETTING}")


def _segment(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _status_error(url: str, exc: urllib.error.HTTPError, token_sent: bool) -> Exception:
    try:
        body = json.loads(exc.read())
        reason = str(body["error"]) if isinstance(body, dict) and "error" in body else ""
    except (ValueError, OSError):
        reason = ""
    finally:
        exc.close()  # the error carries the open response
    if exc.code == 404:
        return SysInfoNotFoundError(url, reason or "no such resource")
    if exc.code == 401:
        what = "refused the token" if token_sent else "wants a token and none was set"
        return SysInfoRefusedError(url, f"the sysinfo API {what}: {url} answered 401; set "
                                   f"{TOKEN_SETTING} to the file of the app's http_token")
    return SysInfoResponseError(url, f"{url} answered HTTP {exc.code}: {reason or exc.reason}")


def _typed(value: Any, kind: type[_T], path: str) -> _T:
    """`value` as the TypedDict `kind` once it is an object with all of kind's fields, its
    enum fields enums (`as_record`)."""
    if not isinstance(value, dict):
        raise SysInfoResponseError(path, f"{path}: expected a JSON object, got {value!r:.80}")
    missing = sorted(kind.__required_keys__ - value.keys())  # type: ignore[attr-defined]
    if missing:
        raise SysInfoResponseError(path, f"{path}: {kind.__name__} lacks fields {missing}")
    try:
        return as_record(kind, value)
    except (ValueError, TypeError) as exc:
        raise SysInfoResponseError(path, f"{path}: {kind.__name__}: {exc}") from exc


def _list(body: Any, key: str, path: str) -> list[Any]:
    if not isinstance(body, dict) or not isinstance(body.get(key), list):
        raise SysInfoResponseError(path, f"{path}: expected an object with a list {key!r}")
    return cast(list[Any], body[key])
