"""A fake sysinfo app: the HTTP API's JSON contract served on loopback from a thread.

Tests change `workers`, `samples` and `policy` while it runs; each request reads them fresh.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NOW_MS = 1_760_000_000_000


def sample(worker: str, timestamp: int, **fields: Any) -> dict[str, Any]:
    """A SysInfoSample as JSON, every field present."""
    base: dict[str, Any] = {
        "worker": worker, "pool": "gpu", "host": "node-1", "timestamp": timestamp,
        "model": "sim:ms=10", "device": "cpu", "cpu_percent": 12.5,
        "memory_bytes": 200_000_000, "gpu_utilization": None, "gpu_memory_bytes": None,
        "throughput_items_per_s": 99.5, "latency_seconds_p50": 0.3, "queue_depth": 3,
        "assigned_partitions": [0, 1], "extra": {}, "interval_s": 2.0,
        "host_cpu_percent": 40.0, "host_memory_available_bytes": 8_000_000_000,
        "accelerator": None, "gpu_memory_total_bytes": None, "latency_seconds_p95": 0.33,
        "consumer_lag": 5, "served_models": ["sim:ms=10"], "models": [], "calibration": None,
        "software": {"inferstream": "0.1"}, "calibrations": [],
    }
    return {**base, **fields}


def worker(name: str, pool: str = "gpu", **fields: Any) -> dict[str, Any]:
    """A worker (W) of the /workers contract."""
    base: dict[str, Any] = {
        "worker": name, "pool": pool, "host": "node-1", "health": "HEALTHY",
        "last_seen": NOW_MS - 2_000, "models": ["sim:ms=10"], "device": "cpu",
        "accelerator": None, "items_per_s": 99.5, "latency_seconds_p95": 0.33, "share": 0.8,
        "capacity_items_per_s": 100.0, "assigned_partitions": [0, 1, 2, 5],
        "queue_depth": 3, "consumer_lag": 5, "calibration": None,
        "model_rates": {"sim:ms=10": 100.0},
    }
    return {**base, **fields}


def policy_entry(name: str, pool: str = "gpu", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "worker": name, "pool": pool, "model": None, "capacity_items_per_s": 100.0,
        "weight": 0.8, "strategy": "throughput", "updated_at": NOW_MS, "kind": "WORKER",
        "share": 0.8, "health": "HEALTHY", "batch_size": 32, "task_size": 100,
        "models": ["sim:ms=10"], "model_partitions": [],
        "model_rates": [{"model": "sim:ms=10", "items_per_s": 100.0, "task_size": 100}],
    }
    return {**base, **fields}


class FakeSysInfo:
    """The app's state; `url` is where it answers while `serving()`."""

    def __init__(self) -> None:
        self.workers: list[dict[str, Any]] = []
        self.samples: dict[str, list[dict[str, Any]]] = {}
        self.policy: list[dict[str, Any]] = []
        self.policy_updated_at: int | None = NOW_MS
        self.requests: list[str] = []
        #: When set, every request gets this (status, body) instead of its answer.
        self.failure: tuple[int, Any] | None = None
        self.url = ""

    def route(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        by_id = {w["worker"]: w for w in self.workers}
        match parts:
            case ["health"]:
                live = [w for w in self.workers if w["health"] == "HEALTHY"]
                return 200, {"status": "ok", "workers": len(live),
                             "pools": sorted({w["pool"] for w in self.workers}),
                             "policy_updated_at": self.policy_updated_at}
            case ["workers"]:
                return 200, {"workers": self.workers}
            case ["workers", name] if name in by_id:
                latest = self.samples.get(name, [sample(name, NOW_MS)])[-1]
                return 200, {**by_id[name], "sample": latest}
            case ["sysinfo", name] if name in by_id:
                since = int(query.get("since", ["0"])[0])
                kept = [s for s in self.samples.get(name, []) if s["timestamp"] > since]
                return 200, {"worker": name, "samples": kept}
            case ["policy"]:
                return 200, {"entries": self.policy}
            case ["policy", pool] if pool in {e["pool"] for e in self.policy}:
                return 200, {"pool": pool,
                             "entries": [e for e in self.policy if e["pool"] == pool]}
            case ["workers" | "sysinfo", name]:
                return 404, {"error": f"no worker {name!r}"}
            case ["policy", pool]:
                return 404, {"error": f"no pool {pool!r}"}
        return 404, {"error": f"no route {path}"}

    @contextmanager
    def serving(self, port: int = 0) -> Iterator[FakeSysInfo]:
        """Serve on loopback `port` (0: any free one) until the block ends."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                fake.requests.append(self.path)
                status, body = fake.failure or fake.route(parts.path,
                                                          urllib.parse.parse_qs(parts.query))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        thread = threading.Thread(target=server.serve_forever, args=(0.01,),
                                  daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


def unused_url() -> str:
    """A loopback URL where nothing listens (a port just bound and released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
