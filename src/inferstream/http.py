"""What every role's HTTP server shares: TLS, a bearer token, and the health probes.

`/metrics` of a worker, controller or stream member is served here (a WSGI server on a daemon
thread, see `metrics.serve_metrics`); the sysinfo app's API is Faust's aiohttp server, which
takes the same `HttpGuard` (`sysinfo.web`). `/healthz` and `/readyz` are open on both: a
Kubernetes probe carries no token, and they say nothing secret.
"""

from __future__ import annotations

import hmac
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from inferstream.config import Config
from inferstream.errors import ConfigError

#: The probes' paths, answered without a token.
HEALTHZ, READYZ = "/healthz", "/readyz"
#: A loop that has not reported for this long is wedged: /healthz answers 503. Long enough
#: for the slowest batch of a real model on a CPU, short beside a stuck call (minutes).
STALL_S = 60.0
#: A client that has not finished its TLS handshake or request in this long is dropped, so
#: that a silent connection cannot hold a server thread.
CLIENT_TIMEOUT_S = 10.0
#: What a client without the token is told (and the scheme the 401 names).
UNAUTHORIZED = "this endpoint needs the header Authorization: Bearer <http_token>"
CHALLENGE = 'Bearer realm="inferstream"'

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class HttpGuard:
    """What a role's HTTP server enforces: HTTPS with `certfile` and `keyfile`, and, with a
    `token`, `Authorization: Bearer <token>` on every request but the probes."""

    certfile: str | None = None
    keyfile: str | None = None
    token: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, config: Config) -> HttpGuard:
        return cls(config.http_tls_certfile, config.http_tls_keyfile, config.http_token)

    def server_context(self) -> ssl.SSLContext | None:
        """The TLS context of a server, None without a certificate; ConfigError in one line
        when the files do not load or the key is not the certificate's."""
        if self.certfile is None or self.keyfile is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
        except FileNotFoundError as exc:
            raise ConfigError(f"http_tls_certfile {self.certfile} or http_tls_keyfile "
                              f"{self.keyfile}: {exc.strerror}: {exc.filename}") from exc
        except (ssl.SSLError, OSError) as exc:
            why = getattr(exc, "reason", None) or exc.strerror or str(exc)
            raise ConfigError(f"http_tls_certfile {self.certfile} and http_tls_keyfile "
                              f"{self.keyfile} do not load as a certificate and its key "
                              f"({why})") from exc
        return context

    def allows(self, authorization: str | None) -> bool:
        """Whether a request with this Authorization header may pass (constant time)."""
        if self.token is None:
            return True
        scheme, _, credentials = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), self.token.encode())


def client_context(cafile: str | None) -> ssl.SSLContext:
    """The TLS context of a client of an HTTPS surface: certificates checked against
    `cafile` (`http_tls_cafile`; None: the system's CAs); ConfigError when it does not load."""
    try:
        return ssl.create_default_context(cafile=cafile)
    except (ssl.SSLError, OSError) as exc:
        why = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise ConfigError(f"http_tls_cafile {cafile}: cannot load it ({why})") from exc


class Health:
    """A role's answers to /healthz and /readyz, kept up to date by its loop (thread-safe).

    Alive until the loop, once it has reported (`beat`), stays silent for `stall_s`. Ready
    when alive and nothing is waited for: each part of the role (`waiting(reason, part)`)
    is done (`done(part)`)."""

    def __init__(self, stall_s: float = STALL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_s = stall_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last_beat: float | None = None
        self._waiting: dict[str, str] = {}

    def beat(self) -> None:
        """The role's loop ran."""
        self._last_beat = self._clock()

    def waiting(self, reason: str, part: str = "") -> None:
        """`part` of the role is not doing its job yet: /readyz says `reason`."""
        with self._lock:
            self._waiting[part] = reason

    def done(self, part: str = "") -> None:
        """`part` of the role is doing its job."""
        with self._lock:
            self._waiting.pop(part, None)

    def liveness(self) -> tuple[int, str]:
        """/healthz: 200 and `ok`, or 503 and why."""
        last = self._last_beat
        if last is not None and self._clock() - last > self.stall_s:
            return 503, f"the loop has not run for {self._clock() - last:.0f}s"
        return 200, "ok"

    def readiness(self) -> tuple[int, str]:
        """/readyz: 200 and `ready`, or 503 and why not."""
        status, reason = self.liveness()
        if status != 200:
            return status, reason
        with self._lock:
            waiting = next(iter(self._waiting.values()), None)
        return (503, waiting) if waiting is not None else (200, "ready")

    def answer(self, path: str) -> tuple[int, str] | None:
        """The probe at `path`, None for any other path."""
        if path == HEALTHZ:
            return self.liveness()
        if path == READYZ:
            return self.readiness()
        return None


def guarded(app: WsgiApp, guard: HttpGuard, health: Health) -> WsgiApp:
    """`app` behind the probes (open) and the token (401 without it)."""

    def guarded_app(environ: dict[str, Any], start_response: Callable[..., Any]
                    ) -> Iterable[bytes]:
        probe = health.answer(environ.get("PATH_INFO", ""))
        if probe is not None:
            return _text(start_response, *probe)
        if not guard.allows(environ.get("HTTP_AUTHORIZATION")):
            return _text(start_response, 401, UNAUTHORIZED, [("WWW-Authenticate", CHALLENGE)])
        return app(environ, start_response)

    return guarded_app


def only_at(path: str, app: WsgiApp) -> WsgiApp:
    """`app` at `path` alone (and `path/`); 404 elsewhere. prometheus_client's app answers
    every path with the metrics, so a typo in a scrape config or a probe would pass."""

    def app_at_path(environ: dict[str, Any], start_response: Callable[..., Any]
                    ) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").rstrip("/") != path:
            return _text(start_response, 404, f"not found: the metrics are at {path}")
        return app(environ, start_response)

    return app_at_path


def _text(start_response: Callable[..., Any], status: int, text: str,
          headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    phrases = {200: "OK", 401: "Unauthorized", 404: "Not Found", 503: "Service Unavailable"}
    start_response(f"{status} {phrases[status]}",
                   [("Content-Type", "text/plain; charset=utf-8"), *(headers or [])])
    return [f"{text}\n".encode()]


class _QuietHandler(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes every few seconds would drown the role's own log."""


class _Server(ThreadingMixIn, WSGIServer):
    """A WSGI server with a thread per connection; with a TLS context, each connection's
    handshake runs in its own thread too (a silent client holds no one else up)."""

    daemon_threads = True
    context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(CLIENT_TIMEOUT_S)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except OSError:  # plain HTTP on the HTTPS port, a client gone: nothing to answer
            return
        with tls:
            super().finish_request(tls, client_address)


def serve(app: WsgiApp, port: int, addr: str, guard: HttpGuard, health: Health) -> WSGIServer:
    """Serve `app`, guarded, on `addr`:`port` from a daemon thread; OSError when that address
    cannot be bound (the caller says which setting to change)."""
    class Server(_Server):
        address_family = _family(addr, port)
        context = guard.server_context()

    server = make_server(addr, port, guarded(app, guard, health), Server, _QuietHandler)
    # serve_forever's poll interval bounds how long shutdown() waits (0.5 s by default)
    threading.Thread(target=server.serve_forever, args=(0.1,), name=f"http-{port}",
                     daemon=True).start()
    return server


def _family(addr: str, port: int) -> socket.AddressFamily:
    """IPv6 for an IPv6 address (`::`), else IPv4."""
    infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0]
