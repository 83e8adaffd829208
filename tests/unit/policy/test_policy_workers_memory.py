"""Two workers on the in-memory transport with the PolicyAssignor: the policy on the topic
decides their shares of the task partitions, and a new policy makes the leader rebalance."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from inferstream.config import Config
from inferstream.policy import membership
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker
from tests.unit.support.memory import make_config, new_broker
from tests.unit.support.policies import entry, write
from tests.unit.support.running import TIMEOUT_S, Running


def worker_config(worker_id: str) -> Config:
    return make_config(partitions=8, task_partitions=8, worker={
        "worker_id": worker_id, "decode_threads": 1, "sysinfo_interval_s": 0,
        "calibration_items": 0, "min_rebalance_interval_s": 0.0})


@pytest.fixture
def broker() -> MemoryBroker:
    """The test's broker: 8 partitions a topic."""
    return new_broker(worker_config("fast"))


def owned(broker: MemoryBroker, config: Config) -> dict[str, int]:
    return {client: len(parts) for _, client, parts
            in broker.describe_group(config.worker_group())}


def test_the_policy_shares_the_partitions_and_a_new_policy_rebalances(
        broker: MemoryBroker, running: Running, make_worker: Callable[..., Worker],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(membership, "CHECK_INTERVAL_S", 0.01)  # the leader looks at once
    config = worker_config("fast")
    write(broker, entry("fast", 0.75), entry("slow", 0.25), entry("", 1.0))
    workers = [make_worker(worker_config(name)) for name in ("fast", "slow")]
    running.workers(*workers)
    for w in workers:
        assert w.membership.table.caught_up.wait(TIMEOUT_S)
    running.wait_for(lambda: owned(broker, config) == {"fast": 6, "slow": 2})
    write(broker, entry("fast", 0.5), entry("slow", 0.5), entry("", 1.0))
    running.wait_for(lambda: owned(broker, config) == {"fast": 4, "slow": 4})
    assert sum(w.membership.rejoins for w in workers) >= 1
