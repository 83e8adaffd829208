"""Each model's speed and task size in the policy (issue 27.6): a worker's rate of every model
it serves, the pool's median worker per model, what the table answers a job of a model with,
and when a moved rate is worth rewriting. Pure functions and the table's `apply`: no Kafka."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from inferstream.policy.entries import Hysteresis, pool_entries
from inferstream.policy.strategies import (
    LeastLoadedStrategy,
    StrategySettings,
    ThroughputStrategy,
    WorkerView,
)
from inferstream.policy.table import PolicyTable
from inferstream.policy.view import WorkerPolicy, model_figure
from inferstream.schemas.records import PolicyEntry, PolicyKind, WorkerHealth, plain_record
from tests.unit.support.memory import CODEC, make_config

SETTINGS = StrategySettings()
NOW = 1_700_000_000_000
SLOW, FAST = "googlenet", "alexnet"


def view(worker: str, rates: dict[str, float], **fields: Any) -> WorkerView:
    """A HEALTHY worker serving the models of `rates` at those items/s, measured."""
    base = WorkerView(worker=worker, pool="default", health=WorkerHealth.HEALTHY,
                      models=tuple(sorted({r.split(":")[0] for r in rates})),
                      measured_items_per_s=sum(rates.values()), calibration_items_per_s=None,
                      model_rates=rates)
    return replace(base, **fields)


def rates(entry: PolicyEntry) -> dict[str, tuple[float, int | None]]:
    return {r["model"]: (r["items_per_s"], r["task_size"]) for r in entry["model_rates"]}


def entries_of(*views: WorkerView, task_seconds: float = 2.0,
               strategy: Any = None) -> dict[str, PolicyEntry]:
    """The pool's entries by worker ("" for the POOL entry)."""
    made = pool_entries("default", list(views), strategy or ThroughputStrategy(), SETTINGS,
                        task_seconds, NOW)
    return {e["worker"]: e for e in made}


def table_of(entries: dict[str, PolicyEntry]) -> PolicyTable:
    """A table that read `entries` from the policy topic."""
    table = PolicyTable(make_config(), codec=CODEC, max_age_s=None)
    for worker, entry in entries.items():
        key = f"default/{worker}" if worker else "default"
        table.apply(key.encode(), CODEC.encode("PolicyEntry", plain_record(PolicyEntry, entry)))
    return table


def test_a_pool_of_a_slow_and_a_fast_model_sizes_each_models_tasks_for_its_speed() -> None:
    entries = entries_of(view("slow-only", {SLOW: 5.0}), view("fast-only", {FAST: 500.0}),
                         view("both", {SLOW: 3.0, FAST: 400.0}))
    pool = entries[""]
    # the median worker of each model: (5 + 3) / 2 and (500 + 400) / 2, for 2 s of work
    assert rates(pool) == {FAST: (450.0, 900), SLOW: (4.0, 8)}
    assert rates(entries["both"]) == {FAST: (400.0, 800), SLOW: (3.0, 6)}
    table = table_of(entries)
    assert table.task_size("default", SLOW) == 8
    assert table.task_size("default", FAST) == 900
    # a model no worker measured: the pool's size, the median of its workers' own
    assert table.task_size("default", "resnet50") == pool["task_size"] == 806
    assert table.task_size("default") == 806
    both = (table.workers("default") or {})["both"]
    assert both.rate_for(SLOW) == 3.0 and both.rate_for(FAST) == 400.0
    assert both.rate_for("resnet50") == both.capacity_items_per_s == 403.0


def test_each_version_of_a_repository_model_has_its_own_figure() -> None:
    table = table_of(entries_of(view("a", {"faces:1": 10.0, "faces:2": 40.0}),
                                view("b", {"faces:2": 60.0}), task_seconds=1.0))
    assert table.task_size("default", "faces:1") == 10
    assert table.task_size("default", "faces:2") == 50
    assert table.task_size("default", "faces") == 50  # no version yet: the newest's
    assert table.task_size("default", "faces:3") == table.task_size("default")


def test_simulated_models_are_one_model_at_the_rates_of_all_their_workers() -> None:
    """Any sim: worker answers any sim: task (of the same output): its size is theirs."""
    pool = entries_of(view("a", {"sim:ms=10": 100.0}), view("b", {"sim:ms=40": 25.0}),
                      task_seconds=1.0)[""]
    assert rates(pool) == {"sim:ms=10": (62.5, 62)}
    assert table_of({"": pool}).task_size("default", "sim:ms=5") == 62


def test_the_strategy_scales_each_models_rate_as_it_scales_the_worker() -> None:
    backlog = view("busy", {SLOW: 10.0, FAST: 90.0}, queue_depth=100, consumer_lag=0)
    entry = entries_of(backlog, strategy=LeastLoadedStrategy(), task_seconds=1.0)["busy"]
    # 1 s of backlog at 100 items/s halves the worker's capacity, and each model's rate
    assert entry["capacity_items_per_s"] == pytest.approx(50.0)
    assert rates(entry) == {SLOW: (pytest.approx(5.0), 5), FAST: (pytest.approx(45.0), 45)}


def test_a_worker_without_a_figure_of_the_model_is_planned_at_its_capacity() -> None:
    worker = WorkerPolicy(1.0, True, 80.0, (SLOW,), {SLOW: 4.0})
    assert worker.rate_for(SLOW) == 4.0 and worker.rate_for(FAST) == 80.0
    assert worker.rate_for(None) == 80.0
    assert model_figure("faces", {"faces:1": 1, "faces:12": 12, "faces:2": 2}) == 12


def test_a_model_measured_for_the_first_time_and_a_moved_rate_are_rewritten() -> None:
    hysteresis = Hysteresis(0.1, refresh_s=3600)
    first = list(entries_of(view("a", {SLOW: 5.0})).values())
    assert len(hysteresis.select(first, NOW)) == 2
    # the same rates: nothing to write; a second model measured: written
    assert hysteresis.select(list(entries_of(view("a", {SLOW: 5.0})).values()), NOW) == []
    both = list(entries_of(view("a", {SLOW: 5.0, FAST: 50.0})).values())
    assert {e["worker"] for e in hysteresis.select(both, NOW)} == {"a", ""}
    # the slow model 4 % slower: within the hysteresis; 40 % slower: the POOL entry moves
    wobble = list(entries_of(view("a", {SLOW: 4.8, FAST: 50.0})).values())
    assert hysteresis.select(wobble, NOW) == []
    slower = list(entries_of(view("a", {SLOW: 3.0, FAST: 50.0})).values())
    chosen = hysteresis.select(slower, NOW)
    assert [e["kind"] for e in chosen if e["worker"] == ""] == [PolicyKind.POOL]
    assert rates(next(e for e in chosen if e["worker"] == ""))[SLOW] == (3.0, 6)
