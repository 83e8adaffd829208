"""What every role's metrics share: serving `/metrics`, and labels kept bounded.

Each role builds its metrics as one bundle from an injected registry, in its own folder:
`serving.metrics` (the worker's data path), `stream.metrics`, `controller.metrics`,
`sysinfo.metrics`."""

from __future__ import annotations

import re
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app

from inferstream.errors import ConfigError
from inferstream.http import Health, HttpGuard, only_at, serve

#: Where the metrics are served; any other path (but the probes') is 404.
METRICS_PATH = "/metrics"

#: Histogram buckets of the durations of a data path step (seconds).
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def reason_label(reason: str) -> str:
    """A bounded label for a free-text reason: its leading words, up to the first character
    that is not a letter, a space or an underscore (no ids, offsets or bytes), at most 40."""
    words = re.match(r"[A-Za-z_ ]*", reason)
    label = " ".join((words.group(0) if words else "").split())[:40]
    return label or "other"


def set_by_partition(gauge: Gauge, before: set[str], values: dict[int, int],
                      *labels: str) -> set[str]:
    """Set `gauge`'s child of each partition of `values` (after `labels`); remove those of
    partitions no longer there (revoked ones must not keep their last value)."""
    now = {str(p) for p in values}
    for gone in before - now:
        gauge.remove(*labels, gone)
    for partition, value in values.items():
        gauge.labels(*labels, str(partition)).set(value)
    return now


def serve_metrics(registry: CollectorRegistry, port: int, addr: str, *,
                  guard: HttpGuard | None = None, health: Health | None = None) -> WSGIServer:
    """Serve `/metrics` (other paths: 404) on `addr`:`port` from a daemon thread, and the
    role's `health` at /healthz and /readyz, behind `guard` (TLS, a bearer token; none by
    default). One that cannot be served (a port in use, an address not of this host, a
    certificate that does not load) is a ConfigError."""
    try:
        return serve(only_at(METRICS_PATH, make_wsgi_app(registry)), port, addr,
                     guard or HttpGuard(), health or Health())
    except OSError as exc:
        raise ConfigError(f"--metrics-addr {addr} --metrics-port {port} cannot be served: "
                          f"{exc.strerror or exc}: pick another") from exc
