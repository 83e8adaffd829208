"""The data-access interface over HTTP, on Faust's web server: JSON views of the fleet.

Every view but /metrics and the probes is answered by the policy owner (the replica that owns
the workers table); another replica forwards the request there through Faust's router, with
the request's headers (its token) and scheme. The server takes the roles' `HttpGuard`: HTTPS
with a certificate, a bearer token on everything but /healthz and /readyz.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from faust.exceptions import SameNode
from faust.web import View
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from inferstream.config import Config
from inferstream.http import CHALLENGE, HEALTHZ, READYZ, UNAUTHORIZED, HttpGuard, client_context
from inferstream.schemas.records import now_ms

if TYPE_CHECKING:
    from inferstream.sysinfo.app import SysinfoApp

#: A view's answer: its JSON body, or None for an unknown id (404).
Answer = dict[str, Any] | None


def web_settings(config: Config) -> dict[str, Any]:
    """faust.App's settings of the web server: address, the URL other replicas reach this one
    by, TLS and the token's middleware, and the client that forwards requests to the owner."""
    sysinfo = config.sysinfo
    guard = HttpGuard.of(config)
    # A replica bound to loopback is reached there only (its host name may name another
    # interface): the other replicas of this host forward to it by that address.
    local = sysinfo.bind.startswith("127.") or sysinfo.bind in ("localhost", "::1")
    host = sysinfo.advertised_host or (sysinfo.bind if local else socket.gethostname())
    context = guard.server_context()
    settings: dict[str, Any] = {
        "web_enabled": True,
        "web_bind": sysinfo.bind,
        "web_port": sysinfo.port,
        "web_host": host,
        "canonical_url": f"{'https' if context else 'http'}://{host}:{sysinfo.port}",
        "web_application_options": {"middlewares": [_token_middleware(guard)]},
    }
    if context is not None:
        forwarding = client_context(config.http_tls_cafile)
        settings["web_ssl_context"] = context
        settings["HttpClient"] = lambda: aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=forwarding))
    return settings


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _token_middleware(guard: HttpGuard) -> Any:
    """401 for a request without the token, but for the probes (Kubernetes sends none)."""

    @web.middleware
    async def token(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in (HEALTHZ, READYZ) or guard.allows(
                request.headers.get("Authorization")):
            return await handler(request)
        return web.json_response({"error": UNAUTHORIZED}, status=401,
                                 headers={"WWW-Authenticate": CHALLENGE})

    return token


def add_pages(sysinfo: SysinfoApp) -> None:
    """Register the HTTP views of `sysinfo` on its Faust app."""
    fleet = sysinfo.fleet
    page = _fleet_page(sysinfo)
    page("/health", lambda request: fleet.health_json(now_ms()))
    page("/workers", lambda request: fleet.workers_json(now_ms()))
    page("/workers/{worker}", lambda request, worker: fleet.worker_json(worker, now_ms()),
         "worker")
    page("/sysinfo/{worker}",
         lambda request, worker: fleet.history_json(worker, _since(request)), "worker")
    page("/policy", lambda request: fleet.policy_json())
    page("/policy/{pool}", lambda request, pool: fleet.policy_json(pool), "pool")

    async def metrics(view: View, request: Any) -> Any:
        return view.bytes(generate_latest(sysinfo.metrics.registry),
                          content_type=CONTENT_TYPE_LATEST.split(";")[0])

    sysinfo.app.page("/metrics", name="metrics")(metrics)

    async def healthz(view: View, request: Any) -> Any:
        return view.text("ok\n")  # answered on the app's own loop: it is not wedged

    async def readyz(view: View, request: Any) -> Any:
        reason = _not_ready(sysinfo)
        return view.text("ready\n") if reason is None else view.text(f"{reason}\n",
                                                                     status=503)

    sysinfo.app.page(HEALTHZ, name="healthz")(healthz)
    sysinfo.app.page(READYZ, name="readyz")(readyz)


def _not_ready(sysinfo: SysinfoApp) -> str | None:
    """Why the replica is not doing its job yet (None: it is): it has not joined the app's
    group, the group rebalances, or its tables recover."""
    app = sysinfo.app
    if app.rebalancing_count == 0:
        return f"has not joined group {app.conf.id} yet"
    if app.rebalancing:
        return "the group is rebalancing"
    if getattr(app, "in_recovery", False):
        return "recovering its tables"
    return None


def _fleet_page(sysinfo: SysinfoApp) -> Callable[..., None]:
    from inferstream.sysinfo.app import FLEET_KEY, WORKERS_TABLE

    def page(path: str, answer: Callable[..., Answer], noun: str | None = None) -> None:
        async def get(view: View, request: Any, **match: str) -> Any:
            try:
                return await sysinfo.app.router.route_req(WORKERS_TABLE, FLEET_KEY, view.web,
                                                          request)
            except SameNode:
                pass
            except aiohttp.ClientError as exc:
                # faust's router forwards to the owner the assignor last named and lets a
                # dead owner's connection error become a bare 500 (table routing is fragile
                # upstream too: faust-streaming/faust#514); answer 503 until the group notices
                return view.error(503, f"policy owner unreachable, retry: {exc}")
            try:
                body = answer(request, **match)
            except ValueError as exc:
                return view.error(400, str(exc))
            if body is None:
                return view.error(404, f"unknown {noun}: {next(iter(match.values()))}")
            return view.json(body)

        get.__name__ = "sysinfo_" + path.strip("/").replace("/", "_").replace("{", "") \
            .replace("}", "")
        sysinfo.app.page(path, name=get.__name__)(get)

    return page


def _since(request: Any) -> int | None:
    raw = request.query.get("since")
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"since must be milliseconds since the epoch, got {raw!r}") from None
