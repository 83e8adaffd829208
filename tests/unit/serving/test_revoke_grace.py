"""A revoke lasts at most the worker's `revoke_grace_s`, however long a commit under way
waits on a hung broker: the group's rebalance, and so every worker of the pool, waits for it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from inferstream.config import Config
from inferstream.kafka.clients import AsyncProducer
from inferstream.serving.committers import exactly_once
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker
from tests.unit.support.memory import as_worker, make_config
from tests.unit.support.records import all_committed, put_tasks, results, task_counts
from tests.unit.support.running import Running

MakeWorker = Callable[..., Worker]


def transactional_id(config: Config, partition: int) -> str:
    return f"{config.topic_prefix}{config.pool}.{config.task_topic()}.{partition}"


def rebalanced(broker: MemoryBroker, config: Config) -> Callable[[], bool]:
    """Both workers hold partitions: the rebalance that the second one's join began is over."""
    def done() -> bool:
        members = broker.describe_group(config.worker_group())
        return len(members) == 2 and all(assignment for _, _, assignment in members)
    return done


@pytest.mark.parametrize("stop_hangs", [False, True], ids=["commit-hangs", "stop-hangs-too"])
def test_a_commit_hung_on_a_broker_holds_a_revoke_no_longer_than_its_grace(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running,
        monkeypatch: pytest.MonkeyPatch, stop_hangs: bool) -> None:
    """A broker SIGSTOPped for 90 s: a commit under way waits up to its 30 s timeout a try,
    and the revoke waited for it (and then for the next partition's), so the pool's
    rebalance, and every worker, stood still 43 s past a 10 s grace; given up at the grace,
    the commit's producer then took up to 10 s more to stop, the revoke waiting for that
    too. The revoke now ends at its grace; the hung commit fails when the broker wakes, and
    its tasks are done once."""
    monkeypatch.setattr(exactly_once, "COMMIT_TIMEOUT_S", 600.0)  # hung, not timed out
    hung = threading.Event()
    if stop_hangs:
        real_stop = exactly_once.quietly_stop

        async def stop_when_awake(producer: AsyncProducer) -> None:
            while not hung.is_set():
                await asyncio.sleep(0.005)
            await real_stop(producer)
        monkeypatch.setattr(exactly_once, "quietly_stop", stop_when_awake)
    config = make_config(worker={"revoke_grace_s": 0.2})
    put_tasks(broker, config, 8)
    fault = broker.inject(transactional_id(config, 0), "commit", fail=None, stall=hung)
    running.workers(make_worker(config))
    running.wait_for(fault.reached.is_set)

    running.workers(make_worker(as_worker(config, "w2")))
    running.wait_for(rebalanced(broker, config))
    assert not hung.is_set()  # the rebalance did not wait for the hung commit
    hung.set()
    running.until(all_committed(broker, config))
    assert task_counts(results(broker, config)) == dict.fromkeys(range(8), 1)
