"""The sysinfo app's intake, health, aggregates, fleet views and settings: no Kafka."""

from __future__ import annotations

import json

import pytest

from inferstream.config import load_config
from inferstream.config.sysinfo import SysinfoConfig
from inferstream.errors import ConfigError
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    ModelRange,
    PolicyEntry,
    PolicyKind,
    WorkerHealth,
    as_record,
    now_ms,
)
from inferstream.sysinfo.fleet import Fleet, record_of
from inferstream.sysinfo.intake import read_sample
from inferstream.sysinfo.workers import WorkerRecord, health
from tests.sysinfo_samples import sample

CODEC = Codec()
SYSINFO = SysinfoConfig(gone_after_s=30.0, hysteresis=0.02)


def feed(fleet: Fleet, *samples: object, received_at: int | None = None) -> None:
    for s in samples:
        worker = s["worker"]  # type: ignore[index]
        previous = fleet.records.get(worker)
        record = record_of(s, previous["perf"] if previous else {},  # type: ignore[arg-type]
                           received_at or now_ms(), SYSINFO)
        fleet.observe(record)


# -- intake -------------------------------------------------------------------------------------
def test_a_sample_reads_back_and_garbage_becomes_a_dead_letter_reason() -> None:
    now = now_ms()
    good = read_sample(CODEC, CODEC.encode("SysInfoSample", sample("w1", 10.0)), now, 300)
    assert good.sample is not None and good.sample["worker"] == "w1"
    garbage = read_sample(CODEC, b"\xc3\x01not a sample", now, 300)
    assert garbage.sample is None and garbage.dead_letter and "undecodable" in garbage.dead_letter
    assert read_sample(CODEC, None, now, 300).dead_letter


@pytest.mark.parametrize(("fields", "reason"), [
    ({"throughput_items_per_s": -5.0}, "negative_throughput"),
    ({"timestamp": now_ms() + 3_600_000}, "future_timestamp"),
    ({"queue_depth": -1}, "negative_count"),
    ({"latency_seconds_p95": float("nan")}, "negative_latency"),
    ({"worker": ""}, "no_worker_id"),
])
def test_absurd_samples_are_dropped_with_a_reason(fields: dict[str, object], reason: str) -> None:
    record = sample("w1", 10.0)
    record.update(fields)  # type: ignore[typeddict-item]
    outcome = read_sample(CODEC, CODEC.encode("SysInfoSample", record), now_ms(), 300)
    assert outcome.sample is None and outcome.dropped == reason


# -- health and aggregates ----------------------------------------------------------------------
def test_health_is_stale_after_three_missed_intervals_and_gone_after_the_set_time() -> None:
    assert health(0, 2.0, 6_000, 3, 30) == WorkerHealth.HEALTHY
    assert health(0, 2.0, 6_001, 3, 30) == WorkerHealth.STALE
    assert health(0, 2.0, 30_001, 3, 30) == WorkerHealth.GONE


def test_idle_samples_keep_the_smoothed_capacity() -> None:
    fleet = Fleet(SYSINFO, {})
    feed(fleet, sample("w1", 100.0), sample("w1", 0.0), sample("w1", 0.0))
    agg = fleet.records["w1"]["perf"]["sim:ms=10"]
    assert agg["ewma_items_per_s"] == pytest.approx(100.0)
    assert agg["busy_samples"] == 1 and agg["samples"] == 3 and len(agg["window"]) == 3


def test_a_worker_with_too_little_work_keeps_its_capacity() -> None:
    """Both go 10 ms per item while busy; "starved" finished half the items, because its
    partitions ran dry half the time. Shares taken from items/s would be 2:1 and move
    partitions away from it, which would starve it more: capacity is the busy rate."""
    fleet = Fleet(SYSINFO, {})
    starved = sample("starved", 50.0)
    starved["models"][0]["item_seconds"] = 0.01
    feed(fleet, sample("busy", 100.0), starved)
    fleet.mark_written(fleet.policy_to_write(now_ms()))
    policy = fleet.policy_json()
    assert policy is not None
    shares = {e["worker"]: e["share"] for e in policy["entries"] if e["worker"]}
    assert shares == pytest.approx({"busy": 0.5, "starved": 0.5})
    assert fleet.worker_json("starved", now_ms())["items_per_s"] == pytest.approx(50.0)


def test_a_v1_sample_without_model_figures_still_counts() -> None:
    fleet = Fleet(SYSINFO, {})
    feed(fleet, sample("w1", 40.0, models=[], served_models=[]))
    row = fleet.worker_json("w1", now_ms())
    assert row is not None and row["models"] == ["sim:ms=10"]
    assert row["capacity_items_per_s"] == pytest.approx(40.0)


# -- fleet: policy and JSON ---------------------------------------------------------------------
def test_fleet_policy_and_views_for_two_workers_and_a_silent_one() -> None:
    fleet = Fleet(SYSINFO, {})
    now = now_ms()
    feed(fleet, sample("fast", 100.0), sample("slow", 25.0))
    feed(fleet, sample("dead", 50.0, timestamp=now - 10_000), received_at=now - 10_000)
    written = fleet.policy_to_write(now)
    fleet.mark_written(written)
    policy = fleet.policy_json()
    assert policy is not None
    shares = {e["worker"]: e["share"] for e in policy["entries"] if e["worker"]}
    assert shares == pytest.approx({"fast": 0.8, "slow": 0.2, "dead": 0.0})
    health_json = fleet.health_json(now)
    assert health_json == {"status": "ok", "workers": 2, "pools": ["default"],
                           "policy_updated_at": now}
    rows = {r["worker"]: r for r in fleet.workers_json(now)["workers"]}
    assert rows["dead"]["health"] == "STALE" and rows["fast"]["share"] == pytest.approx(0.8)
    assert set(rows["fast"]) == {
        "worker", "pool", "host", "health", "last_seen", "models", "device", "accelerator",
        "items_per_s", "latency_seconds_p95", "share", "capacity_items_per_s",
        "assigned_partitions", "queue_depth", "consumer_lag", "calibration", "model_rates"}
    assert rows["fast"]["model_rates"] == {"sim:ms=10": pytest.approx(100.0)}
    json.dumps([health_json, rows, policy, fleet.worker_json("fast", now)])
    assert fleet.policy_to_write(now + 1000) == []  # nothing moved: nothing rewritten


def test_the_policy_view_serves_each_models_partitions_as_plain_json() -> None:
    fleet = Fleet(SYSINFO, {}, task_partitions=lambda _pool: 8)
    now = now_ms()
    feed(fleet, sample("lite", 30.0, model="efficientnet_lite0"), sample("sim", 90.0))
    fleet.mark_written(fleet.policy_to_write(now))
    policy = fleet.policy_json("default")
    assert policy is not None
    (pool,) = [e for e in policy["entries"] if e["kind"] == PolicyKind.POOL]
    assert pool["model_partitions"] == [{"model": "efficientnet_lite0", "first": 0, "count": 2},
                                        {"model": "sim:ms=10", "first": 2, "count": 6}]
    read = as_record(PolicyEntry, json.loads(json.dumps(pool)))  # as the client reads it
    assert read["model_partitions"][1] == ModelRange("sim:ms=10", 2, 6)


def test_after_a_rebalance_silence_is_counted_from_its_end() -> None:
    fleet = Fleet(SYSINFO, {})
    now = now_ms()
    feed(fleet, sample("late", 50.0, timestamp=now - 7_000), received_at=now - 7_000)
    assert fleet.workers_json(now)["workers"][0]["health"] == "STALE"
    fleet.rebalanced(now - 2_000, now - 1_000)  # the group rebalanced a second ago
    row = fleet.workers_json(now)["workers"][0]
    assert row["health"] == "HEALTHY" and row["last_seen"] == now - 7_000
    assert fleet.workers_json(now + 6_000)["workers"][0]["health"] == "STALE"


def test_a_rebalance_does_not_revive_a_worker_silent_long_before_it() -> None:
    fleet = Fleet(SYSINFO, {})
    now = now_ms()
    feed(fleet, sample("dead", 50.0, timestamp=now - 20_000), received_at=now - 20_000)
    fleet.rebalanced(now - 1_000, now)  # e.g. the app just started
    assert fleet.workers_json(now)["workers"][0]["health"] == "STALE"


def test_workers_silent_past_forget_after_leave_the_tables() -> None:
    fleet = Fleet(SYSINFO, {})
    now = now_ms()
    feed(fleet, sample("old", 50.0, timestamp=now - 700_000), received_at=now - 700_000)
    feed(fleet, sample("new", 50.0))
    fleet.mark_written(fleet.policy_to_write(now))
    assert fleet.prune(now) == ["old"]
    assert [w["worker"] for w in fleet.workers_json(now)["workers"]] == ["new"]
    assert fleet.history_json("old", None) is None
    policy = fleet.policy_json()
    assert policy is not None and {e["worker"] for e in policy["entries"]} == {"", "new"}


def test_a_failing_strategy_keeps_the_last_entries() -> None:
    class Broken:
        name = "broken"

        def plan(self, workers: object, settings: object) -> dict[str, object]:
            raise ZeroDivisionError("bug in a plug-in")

    fleet = Fleet(SYSINFO, {}, strategy_loader=lambda name, pool: Broken())  # type: ignore
    feed(fleet, sample("a", 10.0))
    assert fleet.policy_to_write(now_ms()) == []


def test_history_since_and_unknown_ids() -> None:
    fleet = Fleet(SYSINFO, {})
    feed(fleet, sample("w1", 10.0, timestamp=1000), sample("w1", 10.0, timestamp=2000))
    history = fleet.history_json("w1", since_ms=1500)
    assert history is not None and [s["timestamp"] for s in history["samples"]] == [2000]
    assert fleet.history_json("nobody", None) is None
    assert fleet.worker_json("nobody", now_ms()) is None
    assert fleet.policy_json("no-pool") is None


def test_a_new_owner_restores_from_the_table_and_rewrites_everything() -> None:
    table: dict[str, WorkerRecord] = {}
    first = Fleet(SYSINFO, table)
    feed(first, sample("a", 100.0), sample("b", 25.0))
    first.mark_written(first.policy_to_write(now_ms()))
    survivor = Fleet(SYSINFO, table)
    assert len(survivor.policy_to_write(now_ms())) == 3
    assert survivor.history_json("a", None) is not None


# -- settings -----------------------------------------------------------------------------------
def test_sysinfo_settings_from_environment_and_file(tmp_path: object) -> None:
    config = load_config({}, {"INFERSTREAM_SYSINFO_PORT": "7001",
                              "INFERSTREAM_SYSINFO_POOL_STRATEGIES": "gpu=latency-slo",
                              "INFERSTREAM_SYSINFO_HYSTERESIS": "0.05"})
    assert config.sysinfo.port == 7001 and config.sysinfo.hysteresis == 0.05
    assert config.sysinfo.strategy_for("gpu") == "latency-slo"
    assert config.sysinfo.strategy_for("cpu") == "throughput"


@pytest.mark.parametrize(("environ", "message"), [
    ({"INFERSTREAM_SYSINFO_PORT": "70000"}, "sysinfo.port 70000 is not a TCP port"),
    ({"INFERSTREAM_SYSINFO_POOL_STRATEGIES": "gpu"}, "expects POOL=STRATEGY"),
    ({"INFERSTREAM_SYSINFO_EWMA_ALPHA": "0"}, "ewma_alpha must be in"),
    ({"INFERSTREAM_SYSINFO_GONE_AFTER_S": "-1"}, "sysinfo.gone_after_s must be >="),
])
def test_wrong_sysinfo_settings_are_one_line_errors(environ: dict[str, str],
                                                    message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config({}, environ)
