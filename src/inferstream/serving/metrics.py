"""The data path's metrics: what a worker and a stream member both report, fed through their
hooks. Each role's bundle adds its own to these (`worker.metrics`, `stream.metrics`)."""

from __future__ import annotations

import copy
from typing import Any, Self

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferstream.metrics import SECONDS_BUCKETS, set_by_partition
from inferstream.serving.hooks import WorkerHooks

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_SECONDS_BUCKETS = SECONDS_BUCKETS


class ServingMetrics(WorkerHooks):
    """The data path's metrics, fed through the worker's hooks; those that add up across a
    pool carry the `worker` and `pool` labels (the worker id of its results)."""

    def __init__(self, registry: CollectorRegistry, worker: str = "", pool: str = "") -> None:
        self.registry = registry
        self.worker, self.pool = worker, pool
        self._count_work(registry)
        self._count_membership(registry)
        self._count_models_and_samples(registry)

    def _count_work(self, registry: CollectorRegistry) -> None:
        """Items, tasks, batches, decoding and commits."""
        who = ["worker", "pool"]
        self.items = Counter(
            "inferstream_items_processed_total", "Items processed, by outcome",
            [*who, "model", "status"], registry=registry,
        )
        self.tasks = Counter(
            "inferstream_tasks_committed_total", "Tasks whose result and offset were committed",
            [*who, "model"], registry=registry,
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
        self._decode_by_model: dict[str, Any] = {}
        self.commit = Histogram(
            "inferstream_commit_duration_seconds",
            "Time of one partition's commit (results and offset in one transaction)",
            buckets=_SECONDS_BUCKETS, registry=registry,
        )

    def _count_membership(self, registry: CollectorRegistry) -> None:
        """The group member's partitions, lag, rebalances and transactions."""
        who = ["worker", "pool"]
        #: the families labelled by worker and pool, by attribute: `for_worker` takes
        #: another worker's children of them
        self._families: dict[str, Any] = {
            "partitions": Gauge("inferstream_assigned_partitions",
                                "Task partitions owned by this worker", who, registry=registry),
            "in_flight": Gauge("inferstream_in_flight_items", "Items read and not committed yet",
                               who, registry=registry),
            "rebalances": Counter("inferstream_rebalances_total",
                                  "Group rebalances this worker took part in", who,
                                  registry=registry),
            "fenced": Counter("inferstream_transactions_fenced_total",
                              "Commits refused because a new owner of the partition fenced "
                              "this worker", who, registry=registry),
            "aborted": Counter("inferstream_transactions_aborted_total",
                               "Commits whose transaction failed with its outcome unknown "
                               "(then checked and retried)", who, registry=registry),
        }
        self._take_children()
        self.lag = Gauge(
            "inferstream_consumer_lag_records",
            "Committed records of an owned partition after its committed offset (a "
            "transaction's commit marker counts, as in kafka-consumer-groups)",
            [*who, "partition"], registry=registry,
        )

    def _count_models_and_samples(self, registry: CollectorRegistry) -> None:
        """How each model was prepared, and the system-information samples."""
        self.compiled = Gauge(
            "inferstream_model_compiled",
            "1 where the model's forward pass runs compiled (AOTInductor), 0 where eager",
            ["model"], registry=registry,
        )
        self.compile = Gauge(
            "inferstream_model_compile_seconds",
            "Time spent compiling the model's forward pass at load (0: not compiled, or "
            "read from the compile cache)",
            ["model"], registry=registry,
        )
        self.sysinfo_samples = Counter(
            "inferstream_worker_sysinfo_samples_total",
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

    def _take_children(self) -> None:
        families = self._families
        self.partitions = families["partitions"].labels(self.worker, self.pool)
        self.in_flight = families["in_flight"].labels(self.worker, self.pool)
        self.rebalances = families["rebalances"].labels(self.worker, self.pool)
        self.fenced = families["fenced"].labels(self.worker, self.pool)
        self.aborted = families["aborted"].labels(self.worker, self.pool)
        self._lagging: set[str] = set()

    def for_worker(self, worker: str) -> Self:
        """The same families, as another worker of this process (`--members`)."""
        other = copy.copy(self)
        other.become(worker)
        return other

    def drop_own_series(self) -> None:
        """Remove this worker's children of the labelled families: a process of `--members`
        counts as each member (`for_worker`), and its own id is no worker of the pool."""
        for family in self._families.values():
            family.remove(self.worker, self.pool)

    def become(self, worker: str) -> None:
        """Count as `worker` from now on (its own children of the labelled families)."""
        self.worker = worker
        self._take_children()

    def after_decode(self, model: str, seconds: float, ok: bool) -> None:
        child = self._decode_by_model.get(model)
        if child is None:  # labels() takes a lock and builds a key: once per item was a lot
            child = self._decode_by_model[model] = self.decode.labels(model)
        child.observe(seconds)

    def after_batch(self, model: str, size: int, seconds: float,
                    version: str | None = None) -> None:
        self.batch_size.labels(model).observe(size)
        self.inference.labels(model).observe(seconds)

    def after_task(self, model: str, ok_items: int, error_items: int) -> None:
        self.tasks.labels(self.worker, self.pool, model).inc()
        self.items.labels(self.worker, self.pool, model, "ok").inc(ok_items)
        self.items.labels(self.worker, self.pool, model, "error").inc(error_items)

    def on_assignment(self, partitions: int) -> None:
        self.partitions.set(partitions)

    def after_rebalance(self) -> None:
        self.rebalances.inc()

    def after_commit(self, partition: int, offset: int, seconds: float) -> None:
        self.commit.observe(seconds)

    def after_transaction_failed(self, fenced: bool) -> None:
        (self.fenced if fenced else self.aborted).inc()

    def on_load(self, in_flight_items: int, lags: dict[int, int]) -> None:
        self.in_flight.set(in_flight_items)
        self._lagging = set_by_partition(self.lag, self._lagging, lags,
                                          self.worker, self.pool)

    def after_sysinfo_sample(self, published: bool) -> None:
        self.sysinfo_samples.labels("published" if published else "failed").inc()

    def after_collector_error(self, collector: str) -> None:
        self.collector_errors.labels(collector).inc()

    def after_collect(self, cpu_seconds: float) -> None:
        self.collect_cpu.inc(cpu_seconds)

    def after_model_prepared(self, model: str, compiled: bool, compile_seconds: float) -> None:
        self.compiled.labels(model).set(1 if compiled else 0)
        self.compile.labels(model).set(compile_seconds)
