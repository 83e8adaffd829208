"""Model affinity, pure parts: the policy's partition range per model, the plan of each
range among the members that serve its model, and the controller's placement in it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from inferstream.controller.placement import task_partition
from inferstream.policy.assignment import Member, plan_by_model
from inferstream.policy.assignor import LeaderState, TopicPlan
from inferstream.policy.entries import model_ranges, pool_entries
from inferstream.policy.strategies import StrategySettings, ThroughputStrategy, WorkerView
from inferstream.policy.trigger import RebalanceTrigger
from inferstream.policy.view import ModelRange, WorkerPolicy, model_range
from inferstream.schemas import Codec
from inferstream.schemas.records import PolicyEntry, PolicyKind, WorkerHealth, plain_record

NOW = 1_700_000_000_000
LITE = "efficientnet_lite0"


def view(worker: str, rate: float, *models: str, **fields: Any) -> WorkerView:
    base = WorkerView(worker=worker, pool="mixed", health=WorkerHealth.HEALTHY,
                      models=models, measured_items_per_s=rate, calibration_items_per_s=None)
    return replace(base, **fields)


def ranges_of(workers: list[WorkerView], partitions: int,
              previous: list[ModelRange] | None = None) -> list[ModelRange]:
    entries = pool_entries("mixed", workers, ThroughputStrategy(), StrategySettings(), 1.0,
                           NOW, partitions=partitions, previous=previous or [])
    pool = entries[-1]
    assert pool["kind"] == PolicyKind.POOL
    assert all(e["model_partitions"] == [] for e in entries[:-1])
    return pool["model_partitions"]


# -- the ranges in the policy -----------------------------------------------------------------
def test_two_models_split_the_partitions_by_their_capacity() -> None:
    workers = [view("a", 30.0, LITE), view("b", 60.0, "sim:ms=2"), view("c", 30.0, "sim:ms=5")]
    assert ranges_of(workers, 12) == [
        ModelRange(LITE, 0, 3), ModelRange("sim:ms=2", 3, 9)]  # every sim: model is one range


def test_one_model_a_single_partition_or_no_partition_count_gives_no_ranges() -> None:
    sims = [view("a", 10.0, "sim:ms=2"), view("b", 10.0, "sim:ms=80")]
    assert ranges_of(sims, 12) == []
    mixed = [view("a", 10.0, LITE), view("b", 10.0, "sim:ms=2")]
    assert ranges_of(mixed, 1) == []
    assert ranges_of(mixed, 0) == []


def test_a_small_model_gets_one_partition_and_unhealthy_workers_do_not_count() -> None:
    workers = [view("a", 1.0, LITE), view("b", 1000.0, "sim:ms=2"),
               view("c", 1000.0, "resnet50", health=WorkerHealth.STALE)]
    assert ranges_of(workers, 8) == [ModelRange(LITE, 0, 1), ModelRange("sim:ms=2", 1, 7)]


def test_a_worker_serving_two_models_counts_half_for_each() -> None:
    workers = [view("a", 40.0, LITE, "sim:ms=2"), view("b", 20.0, LITE)]
    # lite0: 20 + 20, sim: 20 -> 2:1 of 12
    assert [r.count for r in ranges_of(workers, 12)] == [8, 4]


def test_ranges_stay_while_the_measured_rates_wobble_and_move_when_they_change() -> None:
    first = ranges_of([view("a", 50.0, LITE), view("b", 50.0, "sim:ms=2")], 12)
    assert [r.count for r in first] == [6, 6]
    wobble = ranges_of([view("a", 54.0, LITE), view("b", 46.0, "sim:ms=2")], 12, first)
    assert wobble == first  # quota 6.48: still within one partition of 6
    moved = ranges_of([view("a", 75.0, LITE), view("b", 25.0, "sim:ms=2")], 12, first)
    assert [r.count for r in moved] == [9, 3]


def test_without_a_measured_capacity_each_worker_weighs_the_same() -> None:
    entries = [{"health": WorkerHealth.HEALTHY, "capacity_items_per_s": 0.0, "models": [m]}
               for m in (LITE, "sim:ms=2", "sim:ms=5")]
    ranges = model_ranges(entries, 9)  # type: ignore[arg-type]
    assert [(r.model, r.count) for r in ranges] == [(LITE, 3), ("sim:ms=2", 6)]


def test_a_pool_entry_with_ranges_survives_the_codec() -> None:
    codec = Codec()
    pool = pool_entries("mixed", [view("a", 10.0, LITE), view("b", 10.0, "sim:ms=2")],
                        ThroughputStrategy(), StrategySettings(), 1.0, NOW, partitions=4)[-1]
    value = codec.encode("PolicyEntry", plain_record(PolicyEntry, pool))
    assert codec.decode(value)["model_partitions"] == [
        {"model": LITE, "first": 0, "count": 2}, {"model": "sim:ms=2", "first": 2, "count": 2}]


# -- the plan of each range -------------------------------------------------------------------
RANGES = (ModelRange(LITE, 0, 4), ModelRange("sim:ms=2", 4, 8))


def member(worker: str, *models: str, owned: tuple[int, ...] = ()) -> Member:
    return Member(f"m-{worker}", worker, models, owned)


def policy(**shares: float) -> dict[str, WorkerPolicy]:
    return {w: WorkerPolicy(s, True, s * 100) for w, s in shares.items()}


def test_members_get_only_partitions_of_the_models_they_serve() -> None:
    members = [member("a", LITE), member("b", "sim:ms=5"), member("c", "sim:ms=2")]
    result = plan_by_model(members, range(12), policy(a=0.2, b=0.2, c=0.6), RANGES)
    assert result.partitions["m-a"] == [0, 1, 2, 3]
    assert set(result.partitions["m-b"]) | set(result.partitions["m-c"]) == set(range(4, 12))
    # within the sim range, shares follow capacity: 0.2 : 0.6 of 8 partitions
    assert (len(result.partitions["m-b"]), len(result.partitions["m-c"])) == (2, 6)
    assert sum(result.shares.values()) == pytest.approx(1.0)


def test_partitions_of_no_range_or_of_a_range_nobody_serves_go_to_everyone() -> None:
    members = [member("a", LITE), member("b", LITE)]
    result = plan_by_model(members, range(14), policy(a=0.5, b=0.5), RANGES)
    every = sorted(p for ps in result.partitions.values() for p in ps)
    assert every == list(range(14))
    assert [len(ps) for ps in result.partitions.values()] == [7, 7]


def test_a_member_serving_both_models_takes_part_in_both_ranges_and_stays_sticky() -> None:
    members = [member("a", LITE, "sim:ms=2"), member("b", "sim:ms=2")]
    result = plan_by_model(members, range(12), policy(a=0.5, b=0.5), RANGES)
    assert result.partitions["m-a"][:4] == [0, 1, 2, 3]
    assert len(result.partitions["m-a"]) == 8 and len(result.partitions["m-b"]) == 4
    again = [replace(m, owned=tuple(result.partitions[m.member_id])) for m in members]
    assert plan_by_model(again, range(12), policy(a=0.5, b=0.5), RANGES).moved == 0


def test_the_leader_rebalances_when_the_model_ranges_change() -> None:
    members = [member("a", LITE), member("b", "sim:ms=2")]
    planned = plan_by_model(members, range(12), policy(a=0.5, b=0.5), RANGES)
    as_planned = tuple(replace(m, owned=tuple(planned.partitions[m.member_id]))
                       for m in members)
    state = LeaderState("mixed", {"t": TopicPlan(as_planned, tuple(range(12)), planned,
                                                 RANGES)}, at=0.0)
    trigger = RebalanceTrigger(0.15, 30.0, clock=lambda: 100.0)
    assert trigger.check(state, policy(a=0.5, b=0.5), RANGES) is None
    moved = (ModelRange(LITE, 0, 8), ModelRange("sim:ms=2", 8, 4))
    reason = trigger.check(state, policy(a=0.5, b=0.5), moved)
    assert reason is not None and "model ranges" in reason


# -- placement --------------------------------------------------------------------------------
def test_a_jobs_tasks_go_round_robin_within_its_models_range() -> None:
    within = model_range("sim:ms=40", RANGES)
    assert within == RANGES[1]
    placed = [task_partition("job-1", t, 12, within) for t in range(16)]
    assert set(placed) == set(range(4, 12))
    assert all(placed.count(p) == 2 for p in range(4, 12))


def test_a_model_without_a_range_or_a_range_beyond_the_topic_uses_every_partition() -> None:
    assert model_range("resnet50", RANGES) is None
    assert {task_partition("job-1", t, 12, None) for t in range(12)} == set(range(12))
    too_far = ModelRange(LITE, 8, 8)
    assert {task_partition("job-1", t, 12, too_far) for t in range(12)} == set(range(12))
