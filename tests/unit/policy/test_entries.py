"""Strategies, policy entries and hysteresis of the sysinfo app: pure functions, no Kafka."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from inferstream.errors import ConfigError
from inferstream.policy.entries import Hysteresis, policy_key, pool_entries
from inferstream.policy.strategies import (
    BUILT_IN,
    LatencySloStrategy,
    LeastLoadedStrategy,
    MemoryAwareStrategy,
    StrategySettings,
    ThroughputStrategy,
    WorkerPlan,
    WorkerView,
    load_strategy,
)
from inferstream.schemas import Codec
from inferstream.schemas.records import PolicyKind, WorkerHealth

SETTINGS = StrategySettings(latency_slo_s=0.5)
NOW = 1_700_000_000_000


def view(worker: str, measured: float | None, **fields: Any) -> WorkerView:
    base = WorkerView(worker=worker, pool="default", health=WorkerHealth.HEALTHY,
                      models=("sim:ms=10",), measured_items_per_s=measured,
                      calibration_items_per_s=None, mean_batch_size=8.0)
    return replace(base, **fields)


def shares(entries: list[Any]) -> dict[str, float]:
    return {e["worker"]: e["share"] for e in entries if e["kind"] == PolicyKind.WORKER}


# -- strategies ---------------------------------------------------------------------------------
def test_throughput_shares_follow_measured_rates() -> None:
    entries = pool_entries("default", [view("a", 100.0), view("b", 25.0)],
                           ThroughputStrategy(), SETTINGS, 1.0, NOW)
    assert shares(entries) == pytest.approx({"a": 0.8, "b": 0.2})
    assert sum(shares(entries).values()) == pytest.approx(1.0)


def test_a_new_worker_is_scheduled_by_its_calibration() -> None:
    fresh = view("new", None, calibration_items_per_s=50.0)
    entries = pool_entries("default", [view("old", 50.0), fresh], ThroughputStrategy(),
                           SETTINGS, 1.0, NOW)
    assert shares(entries) == pytest.approx({"old": 0.5, "new": 0.5})
    assert next(e for e in entries if e["worker"] == "new")["task_size"] == 50


def test_least_loaded_gives_less_to_a_worker_with_a_backlog() -> None:
    plans = LeastLoadedStrategy().plan(
        [view("idle", 100.0), view("busy", 100.0, queue_depth=100, consumer_lag=100)], SETTINGS)
    assert plans["idle"].capacity_items_per_s == pytest.approx(100.0)
    assert plans["busy"].capacity_items_per_s == pytest.approx(100.0 / 3)


def test_memory_aware_bounds_the_batch_by_free_device_memory() -> None:
    gib = 1 << 30
    roomy = view("roomy", 100.0, gpu_memory_bytes=8 * gib, gpu_memory_total_bytes=80 * gib)
    full = view("full", 100.0, gpu_memory_bytes=76 * gib, gpu_memory_total_bytes=80 * gib)
    cpu = view("cpu", 100.0)
    plans = MemoryAwareStrategy().plan([roomy, full, cpu], SETTINGS)
    assert plans["roomy"] == WorkerPlan(100.0, 72)  # 8 + (72 - 8) GiB free / 1 GiB per item
    assert plans["full"].batch_size == 7  # past the 10 % headroom: the batch must shrink
    assert plans["full"].capacity_items_per_s == pytest.approx(100.0 * 7 / 8)
    assert plans["cpu"] == WorkerPlan(100.0)


def test_latency_slo_shrinks_batches_that_miss_the_target() -> None:
    fast = view("fast", 100.0, latency_seconds_p95=0.25)
    slow = view("slow", 100.0, latency_seconds_p95=1.0)
    hopeless = view("hopeless", 100.0, latency_seconds_p95=10.0)
    plans = LatencySloStrategy().plan([fast, slow, hopeless], SETTINGS)
    assert plans["fast"] == WorkerPlan(100.0, 16)
    assert plans["slow"] == WorkerPlan(50.0, 4)
    assert plans["hopeless"] == WorkerPlan(0.0, 1)


def test_unknown_strategy_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown strategy 'fastest' for pool 'gpu'; known: "
                       "throughput, least-loaded, memory-aware, latency-slo"):
        load_strategy("fastest", "gpu")
    assert set(BUILT_IN) <= {"throughput", "least-loaded", "memory-aware", "latency-slo"}


# -- policy entries -----------------------------------------------------------------------------
def test_stale_and_gone_workers_get_no_share_and_the_pool_lists_live_models() -> None:
    workers = [view("a", 100.0, models=("m1",)),
               view("b", 100.0, models=("m2",), health=WorkerHealth.STALE),
               view("c", 100.0, models=("m3",), health=WorkerHealth.GONE)]
    entries = pool_entries("default", workers, ThroughputStrategy(), SETTINGS, 1.0, NOW)
    assert shares(entries) == {"a": 1.0, "b": 0.0, "c": 0.0}
    pool = entries[-1]
    assert pool["kind"] == PolicyKind.POOL and policy_key(pool) == "default"
    assert pool["models"] == ["m1"] and pool["capacity_items_per_s"] == pytest.approx(100.0)
    assert policy_key(entries[0]) == "default/a"


def test_without_any_capacity_healthy_workers_share_equally() -> None:
    entries = pool_entries("default", [view("a", None), view("b", None)],
                           ThroughputStrategy(), SETTINGS, 1.0, NOW)
    assert shares(entries) == {"a": 0.5, "b": 0.5}
    assert entries[0]["task_size"] is None


def test_entries_fit_the_policy_schema() -> None:
    codec = Codec()
    for entry in pool_entries("default", [view("a", 100.0)], ThroughputStrategy(), SETTINGS,
                              1.0, NOW):
        assert codec.decode(codec.encode("PolicyEntry", entry))["share"] == entry["share"]


# -- hysteresis ---------------------------------------------------------------------------------
def entries_for(rate_a: float, rate_b: float, now: int = NOW, **b: Any) -> list[Any]:
    return pool_entries("default", [view("a", rate_a), view("b", rate_b, **b)],
                        ThroughputStrategy(), SETTINGS, 1.0, now)


def test_hysteresis_writes_first_everything_then_only_material_moves() -> None:
    gate = Hysteresis(0.02, refresh_s=30.0)
    assert len(gate.select(entries_for(100.0, 25.0), NOW)) == 3
    assert gate.select(entries_for(101.0, 25.0, NOW + 1000), NOW + 1000) == []  # 0.8 -> 0.802
    moved = gate.select(entries_for(100.0, 40.0, NOW + 2000), NOW + 2000)
    assert {policy_key(e) for e in moved} == {"default/a", "default/b", "default"}
    assert sum(e["share"] for e in moved if e["kind"] == PolicyKind.WORKER) == pytest.approx(1)


def test_hysteresis_writes_a_health_change_and_refreshes_slowly() -> None:
    gate = Hysteresis(0.5, refresh_s=30.0)
    gate.select(entries_for(100.0, 100.0), NOW)
    stale = gate.select(entries_for(100.0, 100.0, health=WorkerHealth.STALE), NOW + 1)
    assert {e["worker"]: e["health"] for e in stale}["b"] == WorkerHealth.STALE
    later = NOW + 31_000
    assert len(gate.select(entries_for(100.0, 100.0, later, health=WorkerHealth.STALE),
                           later)) == 3
