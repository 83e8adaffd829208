"""The fleet: every worker's latest record, recent samples and the policy made from them.

`Fleet` holds no Kafka or Faust object: the app hands it the workers table (any mutable
mapping) and writes out what `policy_to_write` returns; the HTTP views read its `*_json`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from inferstream.config.sysinfo import SysinfoConfig
from inferstream.policy.entries import Hysteresis, policy_key, pool_entries
from inferstream.policy.strategies import Strategy, StrategySettings, WorkerView, load_strategy
from inferstream.schemas.records import (
    ModelRange,
    PolicyEntry,
    PolicyKind,
    SysInfoSample,
    WorkerHealth,
    plain_record,
)
from inferstream.sysinfo.aggregates import ModelAggregate, fold
from inferstream.sysinfo.workers import (
    WorkerRecord,
    health,
    last_seen_ms,
    performance_ref,
    performances,
    view_of,
)

log = logging.getLogger(__name__)


def record_of(sample: SysInfoSample, aggregates: Mapping[str, ModelAggregate],
              received_at: int, sysinfo: SysinfoConfig) -> WorkerRecord:
    """The worker's record after `sample`, given its aggregates so far by model and
    version (`performance_ref`)."""
    perf = {}
    for figures in performances(sample):
        ref = performance_ref(figures)
        perf[ref] = fold(aggregates.get(ref), sample["worker"], figures, sample["timestamp"],
                         sysinfo.ewma_alpha, sysinfo.window_s)
    return WorkerRecord(sample=sample, received_at=received_at, perf=perf)


class Fleet:
    """The policy owner's view of every worker; `records` is the workers table."""

    def __init__(self, sysinfo: SysinfoConfig, records: MutableMapping[str, WorkerRecord],
                 strategy_loader: Callable[[str, str | None], Strategy] = load_strategy,
                 task_partitions: Callable[[str], int] = lambda _pool: 0) -> None:
        """`task_partitions(pool)`: partitions of the pool's task topic, which the POOL
        entry splits among its models (0: no model ranges)."""
        self.sysinfo = sysinfo
        self.task_partitions = task_partitions
        self.records = records
        self._load = strategy_loader
        self._strategies: dict[str, Strategy] = {}
        self._settings = StrategySettings(latency_slo_s=sysinfo.latency_slo_s)
        self._history: dict[str, deque[SysInfoSample]] = {}
        self.hysteresis = Hysteresis(sysinfo.hysteresis, sysinfo.refresh_s)
        self.planned: dict[str, PolicyEntry] = {}
        self.written: dict[str, PolicyEntry] = {}
        self.policy_updated_at: int | None = None
        #: (strategy name, seconds) of each pool's plan in the last `policy_to_write`
        self.strategy_runs: list[tuple[str, float]] = []
        #: The last rebalance of the app's group, from its start to its end (ms). Samples read
        #: late because a replica died and its partitions moved are no evidence that a worker
        #: went quiet: a worker heard shortly before the rebalance counts silence from its end.
        self.rebalance_started_ms = 0
        self.heard_since_ms = 0

    def check_strategies(self) -> None:
        """Load the default strategy and every pool's own: UnknownStrategyError at start."""
        self.strategy("")
        for pool in self.sysinfo.strategy_map():
            self.strategy(pool)

    def strategy(self, pool: str) -> Strategy:
        if pool not in self._strategies:
            self._strategies[pool] = self._load(self.sysinfo.strategy_for(pool), pool or None)
        return self._strategies[pool]

    def observe(self, record: WorkerRecord) -> None:
        """Remember the worker's latest record and its sample in the recent history."""
        worker = record["sample"]["worker"]
        self.records[worker] = record
        self.remember(record["sample"])

    def remember(self, sample: SysInfoSample) -> None:
        size = self.sysinfo.history_size
        self._history.setdefault(sample["worker"], deque(maxlen=size)).append(sample)

    def prune(self, now_ms: int) -> list[str]:
        """Forget the workers silent for `forget_after_s`; their ids. Call it where the
        records table may be written (the fleet agent)."""
        cutoff = now_ms - self.sysinfo.forget_after_s * 1000
        gone = [w for w, r in list(self.records.items()) if last_seen_ms(r) < cutoff]
        for worker in gone:
            key = f"{self.records[worker]['sample']['pool']}/{worker}"
            del self.records[worker]
            self._history.pop(worker, None)
            self.planned.pop(key, None)
            self.written.pop(key, None)
            self.hysteresis.drop(key)
        return gone

    # -- policy ------------------------------------------------------------------------------
    def rebalanced(self, started_ms: int, ended_ms: int) -> None:
        self.rebalance_started_ms, self.heard_since_ms = started_ms, ended_ms

    def health_of(self, record: WorkerRecord, now_ms: int) -> WorkerHealth:
        sysinfo, interval_s = self.sysinfo, record["sample"]["interval_s"]
        heard = last_seen_ms(record)
        # a dead replica goes unnoticed for a session timeout before the rebalance starts
        grace_s = sysinfo.session_timeout_s + sysinfo.stale_intervals * interval_s
        if heard >= self.rebalance_started_ms - grace_s * 1000:
            heard = max(heard, self.heard_since_ms)
        return health(heard, interval_s, now_ms, sysinfo.stale_intervals, sysinfo.gone_after_s)

    def views(self, now_ms: int) -> dict[str, list[WorkerView]]:
        """Every worker's view, by pool."""
        pools: dict[str, list[WorkerView]] = {}
        for record in list(self.records.values()):
            view = view_of(record, self.health_of(record, now_ms))
            pools.setdefault(view.pool, []).append(view)
        return pools

    def policy_to_write(self, now_ms: int) -> list[PolicyEntry]:
        """Plan every pool now; return the entries worth writing (hysteresis applied)."""
        chosen: list[PolicyEntry] = []
        self.strategy_runs = []
        for pool, workers in sorted(self.views(now_ms).items()):
            strategy = self.strategy(pool)
            started = time.perf_counter()
            try:
                entries = pool_entries(pool, workers, strategy, self._settings,
                                       self.sysinfo.task_seconds, now_ms,
                                       partitions=self.task_partitions(pool),
                                       previous=self._ranges_written(pool))
            except Exception:  # a plug-in strategy's bug keeps its pool's last entries
                log.exception("strategy %s failed for pool=%s", strategy.name, pool)
                continue
            finally:
                self.strategy_runs.append((strategy.name, time.perf_counter() - started))
            self.planned.update((policy_key(e), e) for e in entries)
            chosen += self.hysteresis.select(entries, now_ms)
        return chosen

    def _ranges_written(self, pool: str) -> list[ModelRange]:
        written = self.written.get(pool)
        return written["model_partitions"] if written else []

    def mark_written(self, entries: list[PolicyEntry]) -> None:
        for entry in entries:
            self.written[policy_key(entry)] = entry
            self.policy_updated_at = max(self.policy_updated_at or 0, entry["updated_at"])

    # -- the data-access interface (JSON) ------------------------------------------------------
    def health_json(self, now_ms: int) -> dict[str, Any]:
        live = [r for r in self.records.values()
                if self.health_of(r, now_ms) == WorkerHealth.HEALTHY]
        pools = sorted({r["sample"]["pool"] for r in self.records.values()})
        return {"status": "ok", "workers": len(live), "pools": pools,
                "policy_updated_at": self.policy_updated_at}

    def workers_json(self, now_ms: int) -> dict[str, Any]:
        rows = [self._worker_row(r, now_ms) for _, r in sorted(self.records.items())]
        return {"workers": rows}

    def worker_json(self, worker: str, now_ms: int) -> dict[str, Any] | None:
        record = self.records.get(worker)
        if record is None:
            return None
        return {**self._worker_row(record, now_ms), "sample": record["sample"]}

    def history_json(self, worker: str, since_ms: int | None) -> dict[str, Any] | None:
        samples = self._history.get(worker)
        if samples is None:
            if worker not in self.records:
                return None
            samples = deque([self.records[worker]["sample"]])
        kept = [s for s in samples if since_ms is None or s["timestamp"] >= since_ms]
        return {"worker": worker, "samples": kept}

    def policy_json(self, pool: str | None = None) -> dict[str, Any] | None:
        entries = [plain_record(PolicyEntry, e) for _, e in sorted(self.written.items())
                   if pool is None or e["pool"] == pool]
        if pool is None:
            return {"entries": entries}
        if not entries:
            return None
        return {"pool": pool, "entries": entries}

    def _worker_row(self, record: WorkerRecord, now_ms: int) -> dict[str, Any]:
        sample = record["sample"]
        view = view_of(record, self.health_of(record, now_ms))
        planned = self.planned.get(f"{sample['pool']}/{sample['worker']}")
        worker_kind = planned is not None and planned["kind"] == PolicyKind.WORKER
        return {
            "worker": sample["worker"], "pool": sample["pool"], "host": sample["host"],
            "health": str(view.health), "last_seen": last_seen_ms(record),
            "models": list(view.models), "device": sample["device"],
            "accelerator": sample["accelerator"],
            "items_per_s": sample["throughput_items_per_s"],
            "latency_seconds_p95": sample["latency_seconds_p95"],
            "share": planned["share"] if planned and worker_kind else None,
            "capacity_items_per_s": (planned["capacity_items_per_s"] if planned
                                     else view.base_capacity),
            "assigned_partitions": sample["assigned_partitions"],
            "queue_depth": sample["queue_depth"], "consumer_lag": sample["consumer_lag"],
            "calibration": sample["calibration"],
            "model_rates": dict(view.model_rates),
        }
