"""Two workers on the in-memory transport with the PolicyAssignor: the policy on the topic
decides their shares of the task partitions, and a new policy makes the leader rebalance."""

from __future__ import annotations

import asyncio
from typing import Any

from inferstream.config import Config, WorkerConfig
from inferstream.kafka.topics import topic_specs
from inferstream.models import load_model
from inferstream.schemas import Codec
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.worker import new_worker
from tests.unit.policy.test_policy_table import entry, write

CODEC = Codec(None)


def worker_config(worker_id: str) -> Config:
    options = WorkerConfig(models=("sim:ms=0",), worker_id=worker_id, decode_threads=1,
                           max_wait_ms=1.0, sysinfo_interval_s=0, calibration_items=0,
                           min_rebalance_interval_s=0.0)
    return Config(bootstrap_servers="mem:1", topic_prefix="t.", partitions=8, task_partitions=8,
                  worker=options)


def owned(broker: MemoryBroker, config: Config) -> dict[str, int]:
    return {client: len(parts) for _, client, parts
            in broker.describe_group(config.worker_group())}


async def until(check: Any, timeout_s: float = 10.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        found = check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out; last {check()!r}")


def test_the_policy_shares_the_partitions_and_a_new_policy_rebalances() -> None:
    config = worker_config("fast")
    broker = MemoryBroker()
    broker.create_topics(topic_specs(config))
    write(broker, entry("fast", 0.75), entry("slow", 0.25), entry("", 1.0))
    workers = [new_worker(worker_config(name), load_model("sim:ms=0"), codec=CODEC,
                          clients=MemoryKafkaClients(broker)) for name in ("fast", "slow")]

    async def scenario() -> None:
        runs = [asyncio.create_task(w.run()) for w in workers]
        for w in workers:
            await asyncio.to_thread(w.membership.table.caught_up.wait, 5)
        await until(lambda: owned(broker, config) == {"fast": 6, "slow": 2})
        write(broker, entry("fast", 0.5), entry("slow", 0.5), entry("", 1.0))
        await until(lambda: owned(broker, config) == {"fast": 4, "slow": 4})
        assert sum(w.membership.rejoins for w in workers) >= 1
        for w in workers:
            w.request_stop()
        await asyncio.gather(*runs)

    asyncio.run(scenario())
