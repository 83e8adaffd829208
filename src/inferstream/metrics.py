"""Prometheus metrics of the worker, the stream member and the controller, each built as one
bundle from an injected registry (the sysinfo app's are in `streams.sysinfo.metrics`)."""

from __future__ import annotations

import copy
import re
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from inferstream.errors import ConfigError
from inferstream.schemas.records import LedgerStatus
from inferstream.streams.controller.hooks import ControllerHooks, RoundState, Tally
from inferstream.streams.worker.hooks import WorkerHooks

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class WorkerMetrics(WorkerHooks):
    """The worker's metrics, fed through its hooks; those that add up across a pool carry
    the `worker` and `pool` labels (the worker id of its results)."""

    def __init__(self, registry: CollectorRegistry, worker: str = "", pool: str = "") -> None:
        self.registry = registry
        self.worker, self.pool = worker, pool
        who = ["worker", "pool"]
        self.items = Counter(
            "inferstream_items_processed_total", "Items processed, by outcome",
            [*who, "model", "status"], registry=registry,
        )
        self.tasks = Counter(
            "inferstream_tasks_committed_total", "Tasks whose result and offset were committed",
            [*who, "model"], registry=registry,
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
        self.commit = Histogram(
            "inferstream_commit_duration_seconds",
            "Time of one partition's commit (results and offset in one transaction)",
            buckets=_SECONDS_BUCKETS, registry=registry,
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
            "inferstream_worker_sysinfo_samples_total",
            "System-information samples, by outcome (published, failed: lost)", ["outcome"],
            registry=registry,
        )
        self.compiled = Gauge(
            "inferstream_model_compiled",
            "1 where the model's forward pass runs compiled (torch.compile), 0 where eager",
            ["model"], registry=registry,
        )
        self.compile = Gauge(
            "inferstream_model_compile_seconds",
            "Time spent compiling the model's forward pass at load (0: not compiled)",
            ["model"], registry=registry,
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

    def for_worker(self, worker: str) -> WorkerMetrics:
        """The same families, as another worker of this process (`--members`)."""
        other = copy.copy(self)
        other.become(worker)
        return other

    def become(self, worker: str) -> None:
        """Count as `worker` from now on (its own children of the labelled families)."""
        self.worker = worker
        self._take_children()

    def after_decode(self, model: str, seconds: float, ok: bool) -> None:
        self.decode.labels(model).observe(seconds)

    def after_batch(self, model: str, size: int, seconds: float) -> None:
        self.batch_size.labels(model).observe(size)
        self.inference.labels(model).observe(seconds)

    def after_task(self, model: str, ok_items: int, error_items: int) -> None:
        self.tasks.labels(self.worker, self.pool, model).inc()
        self.items.labels(self.worker, self.pool, model, "ok").inc(ok_items)
        self.items.labels(self.worker, self.pool, model, "error").inc(error_items)

    def after_decline(self, model: str) -> None:
        self.declined.labels(model).inc()

    def after_skip(self, model: str) -> None:
        self.skipped.labels(model).inc()

    def after_dead_letter(self, reason: str) -> None:
        self.dead_letters.labels(reason_label(reason)).inc()

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
        self._lagging = _set_by_partition(self.lag, self._lagging, lags,
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


_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class StreamMetrics(WorkerMetrics):
    """A stream member's metrics: the worker's, and records, latency and lag."""

    def __init__(self, registry: CollectorRegistry, worker: str = "", pool: str = "") -> None:
        super().__init__(registry, worker, pool)
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
        self.stream_lag = Gauge(
            "inferstream_stream_lag_records",
            "Committed input records of an owned partition with no output yet", ["partition"],
            registry=registry,
        )
        self._stream_lagging: set[str] = set()

    def after_stream_record(self, status: str, latency_s: float | None) -> None:
        self.records.labels(status).inc()
        if latency_s is not None:
            self.latency.observe(max(0.0, latency_s))

    def on_load(self, in_flight_items: int, lags: dict[int, int]) -> None:
        super().on_load(in_flight_items, lags)
        self._stream_lagging = _set_by_partition(self.stream_lag, self._stream_lagging, lags)


def reason_label(reason: str) -> str:
    """A bounded label for a free-text reason: its leading words, up to the first character
    that is not a letter, a space or an underscore (no ids, offsets or bytes), at most 40."""
    words = re.match(r"[A-Za-z_ ]*", reason)
    label = " ".join((words.group(0) if words else "").split())[:40]
    return label or "other"


def _set_by_partition(gauge: Gauge, before: set[str], values: dict[int, int],
                      *labels: str) -> set[str]:
    """Set `gauge`'s child of each partition of `values` (after `labels`); remove those of
    partitions no longer there (revoked ones must not keep their last value)."""
    now = {str(p) for p in values}
    for gone in before - now:
        gauge.remove(*labels, gone)
    for partition, value in values.items():
        gauge.labels(*labels, str(partition)).set(value)
    return now


#: Job states the controller's gauge shows, every one of them (0 when none).
JOB_STATES = (LedgerStatus.ACTIVE, LedgerStatus.COMPLETED, LedgerStatus.REJECTED,
              LedgerStatus.FAILED, LedgerStatus.CANCELLED)
#: Most active jobs whose progress is a series of its own (bounded cardinality: the oldest
#: ones, by job id, which begins with the submission time).
MAX_JOB_SERIES = 20
_ROUND_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ControllerMetrics(ControllerHooks):
    """A controller replica's metrics: what its committed rounds decided, and what it holds."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.jobs = Gauge("inferstream_controller_jobs", "Jobs this replica holds, by state",
                          ["state"], registry=registry)
        self.accepted = Counter("inferstream_controller_jobs_accepted_total",
                                "Jobs accepted", registry=registry)
        self.issued = Counter("inferstream_controller_tasks_issued_total",
                              "Tasks issued (first attempts)", ["pool"], registry=registry)
        self.done = Counter("inferstream_controller_tasks_done_total",
                            "Tasks whose first result was counted", ["pool"], registry=registry)
        self.reissued = Counter(
            "inferstream_controller_tasks_reissued_total",
            "Tasks issued again: migrated (late, or an unhealthy worker) or declined",
            ["pool", "reason"], registry=registry)
        self.dropped = Counter(
            "inferstream_controller_late_results_dropped_total",
            "Results of a task that was done already (a migrated task's late attempt)",
            registry=registry)
        self.items = Counter("inferstream_controller_items_done_total",
                             "Items of the counted results, by status", ["status"],
                             registry=registry)
        self.ledger = Counter("inferstream_controller_ledger_records_total",
                              "Ledger entries committed", registry=registry)
        self.round = Histogram("inferstream_controller_round_duration_seconds",
                               "One round: consume, decide, commit", buckets=_ROUND_BUCKETS,
                               registry=registry)
        self.commit = Histogram("inferstream_controller_commit_duration_seconds",
                                "One home partition's transaction", buckets=_ROUND_BUCKETS,
                                registry=registry)
        self.owned = Gauge("inferstream_controller_owned_partitions",
                           "Job partitions this replica owns", registry=registry)
        self.job_done = Gauge("inferstream_job_items_done", "Items done of an active job",
                              ["job_id"], registry=registry)
        self.job_items = Gauge("inferstream_job_items",
                               "Items of an active job (once its inputs are expanded)",
                               ["job_id"], registry=registry)
        self._job_series: set[str] = set()
        self._job_items_shown: set[str] = set()
        for state in JOB_STATES:
            self.jobs.labels(state.value)

    def after_transaction(self, seconds: float, tally: Tally) -> None:
        self.commit.observe(seconds)
        for (what, *labels), n in tally.items():
            if what == "tasks_issued":
                self.issued.labels(*labels).inc(n)
                for reason in ("migrated", "declined"):  # a pool's series, from 0
                    self.reissued.labels(*labels, reason)
            elif what == "tasks_done":
                self.done.labels(*labels).inc(n)
            elif what == "tasks_reissued":
                self.reissued.labels(*labels).inc(n)
            elif what == "items_done":
                self.items.labels(*labels).inc(n)
            elif what == "jobs_accepted":
                self.accepted.inc(n)
            elif what == "late_results_dropped":
                self.dropped.inc(n)
            elif what == "ledger_records":
                self.ledger.inc(n)

    def after_round(self, seconds: float, state: RoundState) -> None:
        self.round.observe(seconds)
        self.owned.set(state.owned_partitions)
        for job_state in JOB_STATES:
            self.jobs.labels(job_state.value).set(state.jobs_by_state.get(job_state.value, 0))
        shown = sorted(state.active, key=lambda job: job.job_id)[:MAX_JOB_SERIES]
        now = {job.job_id for job in shown}
        for gone in self._job_series - now:
            self.job_done.remove(gone)
            if gone in self._job_items_shown:
                self.job_items.remove(gone)
                self._job_items_shown.discard(gone)
        for job in shown:
            self.job_done.labels(job.job_id).set(job.done_items)
            if job.total_items is not None:
                self.job_items.labels(job.job_id).set(job.total_items)
                self._job_items_shown.add(job.job_id)
        self._job_series = now


def serve_metrics(registry: CollectorRegistry, port: int, addr: str) -> None:
    """Serve `/metrics` on `addr`:`port` from a daemon thread; one that cannot be served
    (a port in use, an address not of this host) is a ConfigError."""
    try:
        start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise ConfigError(f"--metrics-addr {addr} --metrics-port {port} cannot be served: "
                          f"{exc.strerror or exc}: pick another") from exc
