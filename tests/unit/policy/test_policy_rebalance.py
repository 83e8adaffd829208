"""Point 2 of issue 11: the leader rebalances when the policy moves materially, at most once
per interval; and the aiokafka internals `request_rejoin` relies on are still there."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import GroupLoadInProgressError
from aiokafka.util import create_future

from inferstream.config import Config, WorkerConfig
from inferstream.errors import ConfigError
from inferstream.policy.assignment import Member, plan
from inferstream.policy.assignor import LeaderState, TopicPlan
from inferstream.policy.membership import PoolMembership
from inferstream.policy.rejoin import request_rejoin
from inferstream.policy.trigger import RebalanceTrigger
from inferstream.policy.view import WorkerPolicy
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.assignors import join
from tests.unit.support.memory import CODEC
from tests.unit.support.policies import FixedPolicy

TOPIC = "t.tasks.default"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def policy(**shares: float) -> dict[str, WorkerPolicy]:
    return {w: WorkerPolicy(s, s > 0, s * 100) for w, s in shares.items()}


def assigned(table: dict[str, WorkerPolicy] | None, at: float, partitions: int = 40
             ) -> LeaderState:
    """The leader's state after assigning `partitions` to workers a, b, c under `table`."""
    members = [Member(f"m-{w}", w) for w in "abc"]
    first = plan(members, range(partitions), table)
    as_planned = tuple(Member(m.member_id, m.worker, owned=tuple(first.partitions[m.member_id]))
                       for m in members)
    return LeaderState("default", {TOPIC: TopicPlan(as_planned, tuple(range(partitions)),
                                                    first)}, at)


def test_a_share_moving_more_than_the_threshold_triggers_a_rebalance() -> None:
    clock = Clock()
    trigger = RebalanceTrigger(0.15, 30.0, clock)
    state = assigned(policy(a=0.5, b=0.3, c=0.2), at=clock.now)
    clock.now += 31
    assert trigger.check(state, policy(a=0.48, b=0.31, c=0.21)) is None  # within 15 %
    reason = trigger.check(state, policy(a=0.3, b=0.3, c=0.4))
    assert reason is not None and "share" in reason


def test_a_member_turning_unhealthy_triggers_a_rebalance() -> None:
    clock = Clock()
    trigger = RebalanceTrigger(0.15, 30.0, clock)
    state = assigned(policy(a=0.5, b=0.3, c=0.2), at=clock.now - 60)
    now = policy(a=0.6, b=0.4)
    now["c"] = WorkerPolicy(0.0, False)
    reason = trigger.check(state, now)
    assert reason is not None and "c unhealthy" in reason


def test_at_most_one_rebalance_per_interval() -> None:
    clock = Clock()
    trigger = RebalanceTrigger(0.15, 30.0, clock)
    state = assigned(policy(a=0.5, b=0.3, c=0.2), at=clock.now)
    moved = policy(a=0.2, b=0.3, c=0.5)
    clock.now += 10
    assert trigger.check(state, moved) is None  # 10 s after the assignment
    clock.now += 20
    assert trigger.check(state, moved) is not None
    clock.now += 5
    assert trigger.check(state, moved) is None  # 5 s after the last trigger
    clock.now += 25
    assert trigger.check(state, moved) is not None


def test_a_member_back_to_healthy_gets_its_share_within_the_interval() -> None:
    """A restarted worker joins while the policy still calls it STALE (no share); once its
    samples make it HEALTHY the leader rebalances at once, not at the interval's end: once
    for that assignment, and nothing else skips the interval."""
    clock = Clock()
    trigger = RebalanceTrigger(0.15, 30.0, clock)
    joined = policy(a=0.6, b=0.4)
    joined["c"] = WorkerPolicy(0.0, False)
    state = assigned(joined, at=clock.now)
    assert not state.topics[TOPIC].plan.partitions["m-c"]
    clock.now += 3
    assert trigger.check(state, joined) is None
    b_moved = policy(a=0.3, b=0.7)
    b_moved["c"] = WorkerPolicy(0.0, False)
    assert trigger.check(state, b_moved) is None  # a share's move waits for the interval
    back = policy(a=0.4, b=0.3, c=0.3)
    reason = trigger.check(state, back)
    assert reason is not None and "c healthy again" in reason
    clock.now += 1  # no new assignment yet: not asked again before the interval
    assert trigger.check(state, back) is None
    again = assigned(joined, at=clock.now)  # the rebalance came, c unhealthy once more
    clock.now += 2
    assert trigger.check(again, back) is not None


def test_the_policy_appearing_after_an_even_start_triggers_one() -> None:
    clock = Clock()
    trigger = RebalanceTrigger(0.15, 30.0, clock)
    state = assigned(None, at=clock.now - 30)
    reason = trigger.check(state, policy(a=0.7, b=0.2, c=0.1))
    assert reason is not None and "appeared" in reason
    assert trigger.check(None, policy(a=0.7)) is None  # a follower has nothing to check


def test_a_change_that_moves_no_partition_triggers_nothing() -> None:
    clock = Clock()
    trigger = RebalanceTrigger(0.15, 0.0, clock)
    state = assigned(policy(a=0.50, b=0.49, c=0.01), at=clock.now, partitions=3)
    assert trigger.check(state, policy(a=0.49, b=0.49, c=0.02)) is None


def test_request_rejoin_reaches_the_group_coordinator_of_a_real_consumer() -> None:
    """Fails when an aiokafka upgrade renames what `rejoin.request_rejoin` uses."""
    async def scenario() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers="localhost:1", group_id="g")
        assert consumer._coordinator is None  # set by start()
        assert request_rejoin(consumer) is False
        # A coordinator as start() makes, minus its network task: the state request_rejoin
        # flips and the coordination routine waits on.
        coordinator = GroupCoordinator.__new__(GroupCoordinator)
        coordinator._rejoin_needed_fut = create_future()
        consumer._coordinator = coordinator

        class Subscribed:
            assignment = object()

        assert not coordinator.need_rejoin(Subscribed())
        assert request_rejoin(consumer) is True
        assert coordinator.need_rejoin(Subscribed())
        routine = inspect.getsource(inspect.getmodule(GroupCoordinator))
        assert "futures.append(self._rejoin_needed_fut)" in routine
        assert "self._coordinator._rejoin_needed_fut = create_future()" in routine
        consumer._coordinator = None
        await consumer.stop()

    asyncio.run(scenario())


class FakeCoordinator:
    def __init__(self) -> None:
        self._rejoin_needed_fut = None
        self.requests = 0

    def request_rejoin(self) -> None:
        self.requests += 1


class FakeConsumer:
    def __init__(self) -> None:
        self._coordinator = FakeCoordinator()


def test_the_leaders_watch_asks_its_consumer_to_rejoin() -> None:
    config = Config(bootstrap_servers="mem:1", topic_prefix="t.",
                    worker=WorkerConfig(min_rebalance_interval_s=0.0))
    table: dict[str, dict[str, WorkerPolicy] | None] = {"default": None}
    memberships = {f"m-{w}": PoolMembership(config, w, MemoryKafkaClients(), CODEC,
                                            lambda: ("sim",), lambda: None)
                   for w in ("a", "b")}
    for membership in memberships.values():
        membership.assignor.policy = FixedPolicy(table.get)
    join({m: ms.assignor for m, ms in memberships.items()}, 10)
    consumers = {m: FakeConsumer() for m in memberships}
    assert not any(ms.check(consumers[m]) for m, ms in memberships.items())
    table["default"] = policy(a=0.8, b=0.2)
    assert memberships["m-a"].check(consumers["m-a"])  # the leader
    assert not memberships["m-b"].check(consumers["m-b"])
    assert consumers["m-a"]._coordinator.requests == 1
    assert memberships["m-a"].strategies() == (memberships["m-a"].assignor,)


def test_roundrobin_leaves_the_policy_out() -> None:
    config = Config(bootstrap_servers="mem:1", worker=WorkerConfig(assignor="roundrobin"))
    membership = PoolMembership(config, "w", MemoryKafkaClients(), CODEC, tuple,
                                lambda: None)
    assert membership.strategies() == (RoundRobinPartitionAssignor,)
    with pytest.raises(ConfigError):
        Config(bootstrap_servers="mem:1", worker=WorkerConfig(assignor="sticky"))


class _JoinRecorder:
    """The coordinator side of aiokafka's `CoordinatorGroupRebalance`: records each
    JoinGroup request and answers "coordinator loading" (the member retries later)."""

    _rebalance_timeout_ms = 1000
    member_id = ""
    _group_instance_id = None

    def __init__(self) -> None:
        self.requests: list[object] = []

    async def _send_req(self, request: object) -> object:
        self.requests.append(request)
        return SimpleNamespace(error_code=GroupLoadInProgressError.errno, member_id="")


@pytest.mark.parametrize("assignor", ["policy", "roundrobin"])
def test_a_worker_sends_one_join_request_per_join(assignor: str) -> None:
    """aiokafka sends one JoinGroup per configured assignor (aio-libs/aiokafka#1168); with
    two, every join changed the member's metadata and two workers rebalanced each other
    for minutes. The worker's consumer must send exactly one per join."""
    config = Config(bootstrap_servers="mem:1", worker=WorkerConfig(assignor=assignor))
    membership = PoolMembership(config, "w", MemoryKafkaClients(), CODEC, tuple,
                                lambda: None)
    recorder = _JoinRecorder()
    subscription = SimpleNamespace(topics={"t.tasks.default"}, active=True)
    rebalance = CoordinatorGroupRebalance(recorder, "g", 1, subscription,
                                          membership.strategies(), 10_000, 1)
    assert asyncio.run(rebalance.perform_group_join()) is None
    assert len(recorder.requests) == 1
