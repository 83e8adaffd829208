"""Prometheus metrics of a worker, built as one bundle from an injected registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from inferstream.errors import ConfigError
from inferstream.streams.worker.hooks import WorkerHooks

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class WorkerMetrics(WorkerHooks):
    """The worker's metrics, fed through its hooks."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.items = Counter(
            "inferstream_items_processed_total", "Items processed, by outcome",
            ["model", "status"], registry=registry,
        )
        self.tasks = Counter(
            "inferstream_tasks_committed_total", "Tasks whose result and offset were committed",
            ["model"], registry=registry,
        )
        self.dead_letters = Counter(
            "inferstream_dead_letters_total", "Task records sent to the dead-letter topic",
            ["reason"], registry=registry,
        )
        self.batch_size = Histogram(
            "inferstream_batch_size_items", "Items per model batch",
            ["model"], buckets=_BATCH_BUCKETS, registry=registry,
        )
        self.inference = Histogram(
            "inferstream_inference_duration_seconds", "Model forward time per batch",
            ["model"], buckets=_SECONDS_BUCKETS, registry=registry,
        )
        self.decode = Histogram(
            "inferstream_decode_duration_seconds", "Fetch and preprocess time per item",
            ["model"], buckets=_SECONDS_BUCKETS, registry=registry,
        )
        self.partitions = Gauge(
            "inferstream_assigned_partitions", "Task partitions owned by this worker",
            registry=registry,
        )
        self.declined = Counter(
            "inferstream_tasks_declined_total",
            "Tasks declined because the worker does not serve their model", ["model"],
            registry=registry,
        )
        self.skipped = Counter(
            "inferstream_tasks_skipped_total",
            "Tasks not run: their job had finished or a later attempt superseded them",
            ["model"], registry=registry,
        )
        self.sysinfo_samples = Counter(
            "inferstream_sysinfo_samples_total",
            "System-information samples, by outcome (published, failed: lost)", ["outcome"],
            registry=registry,
        )
        self.collector_errors = Counter(
            "inferstream_collector_errors_total",
            "Collector calls that raised (the sample went out without them)", ["collector"],
            registry=registry,
        )
        self.collect_cpu = Counter(
            "inferstream_sysinfo_collect_cpu_seconds_total",
            "CPU time the collectors spent taking samples", registry=registry,
        )

    def after_decode(self, model: str, seconds: float, ok: bool) -> None:
        self.decode.labels(model).observe(seconds)

    def after_batch(self, model: str, size: int, seconds: float) -> None:
        self.batch_size.labels(model).observe(size)
        self.inference.labels(model).observe(seconds)

    def after_task(self, model: str, ok_items: int, error_items: int) -> None:
        self.tasks.labels(model).inc()
        self.items.labels(model, "ok").inc(ok_items)
        self.items.labels(model, "error").inc(error_items)

    def after_decline(self, model: str) -> None:
        self.declined.labels(model).inc()

    def after_skip(self, model: str) -> None:
        self.skipped.labels(model).inc()

    def after_dead_letter(self, reason: str) -> None:
        self.dead_letters.labels(reason.split(":")[0]).inc()

    def on_assignment(self, partitions: int) -> None:
        self.partitions.set(partitions)

    def after_sysinfo_sample(self, published: bool) -> None:
        self.sysinfo_samples.labels("published" if published else "failed").inc()

    def after_collector_error(self, collector: str) -> None:
        self.collector_errors.labels(collector).inc()

    def after_collect(self, cpu_seconds: float) -> None:
        self.collect_cpu.inc(cpu_seconds)


_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class StreamMetrics(WorkerMetrics):
    """A stream member's metrics: the worker's, and records, latency and lag."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.records = Counter(
            "inferstream_stream_records_total",
            "Input records whose outcome was committed, by status (ok, error, dead_letter)",
            ["status"], registry=registry,
        )
        self.latency = Histogram(
            "inferstream_stream_latency_seconds",
            "Input record timestamp to the commit of its output", buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.lag = Gauge(
            "inferstream_stream_lag_records",
            "Committed input records of an owned partition with no output yet", ["partition"],
            registry=registry,
        )

    def after_stream_record(self, status: str, latency_s: float | None) -> None:
        self.records.labels(status).inc()
        if latency_s is not None:
            self.latency.observe(max(0.0, latency_s))

    def on_lag(self, partition: int, records: int) -> None:
        self.lag.labels(str(partition)).set(records)


def serve_metrics(registry: CollectorRegistry, port: int, addr: str) -> None:
    """Serve `/metrics` on `addr`:`port` from a daemon thread; one that cannot be served
    (a port in use, an address not of this host) is a ConfigError."""
    try:
        start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise ConfigError(f"--metrics-addr {addr} --metrics-port {port} cannot be served: "
                          f"{exc.strerror or exc}: pick another") from exc
