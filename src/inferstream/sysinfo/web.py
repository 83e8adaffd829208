"""The data-access interface over HTTP, on Faust's web server: JSON views of the fleet.

Every view but /metrics is answered by the policy owner (the replica that owns the workers
table); another replica forwards the request there through Faust's router.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from faust.exceptions import SameNode
from faust.web import View
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from inferstream.schemas.records import now_ms

if TYPE_CHECKING:
    from inferstream.sysinfo.app import SysinfoApp

#: A view's answer: its JSON body, or None for an unknown id (404).
Answer = dict[str, Any] | None


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
