"""A controller replica's metrics, fed through its hooks (`controller.hooks`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferstream.controller.hooks import ControllerHooks, RoundState, Tally
from inferstream.schemas.records import LedgerStatus
from inferstream.supervise.child import count_restarts

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
        self.registry, self.restarts = registry, count_restarts(registry, "controller")
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
            "Tasks issued again: migrated (late, or an unhealthy worker), declined, or "
            "preempted (taken back for a job of a higher priority)",
            ["pool", "reason"], registry=registry)
        self.dropped = Counter(
            "inferstream_controller_late_results_dropped_total",
            "Results of a task that was done already (a migrated task's late attempt)",
            registry=registry)
        self.items = Counter("inferstream_controller_items_done_total",
                             "Items of the counted results, by status", ["status"],
                             registry=registry)
        self.ledger = Counter("inferstream_controller_ledger_records_total",
                              "Ledger entries committed (tombstones too)", registry=registry)
        self.round = Histogram("inferstream_controller_round_duration_seconds",
                               "One round: consume, decide, commit", buckets=_ROUND_BUCKETS,
                               registry=registry)
        self.commit = Histogram("inferstream_controller_commit_duration_seconds",
                                "One home partition's transaction", buckets=_ROUND_BUCKETS,
                                registry=registry)
        self.owned = Gauge("inferstream_controller_owned_partitions",
                           "Job partitions this replica owns", registry=registry)
        self.standby = Gauge(
            "inferstream_controller_ledger_standby_entries",
            "Entries in this replica's warm copy of the whole ledger: one per job, plus one "
            "per done task of the active jobs", registry=registry)
        self._count_work_held(registry)
        for state in JOB_STATES:
            self.jobs.labels(state.value)

    def _count_work_held(self, registry: CollectorRegistry) -> None:
        """Each active job's progress; each pool's work waiting and the workers that would
        clear it (`backlog`)."""
        self.job_done = Gauge("inferstream_job_items_done", "Items done of an active job",
                              ["job_id"], registry=registry)
        self.job_items = Gauge("inferstream_job_items",
                               "Items of an active job (once its inputs are expanded)",
                               ["job_id"], registry=registry)
        self._job_series: set[str] = set()
        self._job_items_shown: set[str] = set()
        self.backlog = Gauge(
            "inferstream_pool_backlog_seconds",
            "Work waiting in the active jobs this replica holds (issued or not, no result yet), "
            "in seconds of one worker at the pool's measured speed of each model (for a model "
            "no worker measured: the last figure measured, else backlog_item_s); the "
            "replicas' figures add up to the pool's", ["pool"], registry=registry)
        self.desired = Gauge(
            "inferstream_pool_desired_workers",
            "Workers that would clear this replica's share of the pool's backlog within "
            "backlog_target_s: at least 1 while any work waits, 0 when none, at most the "
            "pool's task partitions; sum over replicas, capped at the partitions, for the "
            "pool's (one more per replica holding work at most)", ["pool"], registry=registry)

    def after_transaction(self, seconds: float, tally: Tally) -> None:
        self.commit.observe(seconds)
        for (what, *labels), n in tally.items():
            if what == "tasks_issued":
                self.issued.labels(*labels).inc(n)
                for reason in ("migrated", "declined", "preempted"):  # from 0
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
        self.standby.set(state.standby_entries)
        for pool, backlog in state.backlog.items():
            self.backlog.labels(pool).set(backlog.seconds)
            self.desired.labels(pool).set(backlog.desired_workers)
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


