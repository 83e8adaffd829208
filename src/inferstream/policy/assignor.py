"""`PolicyAssignor`: the aiokafka partition assignor of a pool's workers (classic protocol).

Every worker's consumer has its own instance (aiokafka calls `metadata`, `assign` and
`on_assignment` on whatever object the strategy list holds; keeping state on the instance
avoids the class-level state of aiokafka's sticky assignor, aio-libs/aiokafka#1175, and it
carries its own assignment epoch instead of the generation aiokafka never sets, #1176).
The group's leader decodes each member's metadata, reads the `PolicyTable` and plans with
`assignment.plan_by_model` (each model's range of partitions among the members that serve
it); it keeps what it planned (`leader_state`) for the rebalance trigger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from inferstream.policy.assignment import Member, Plan, plan_by_model
from inferstream.policy.subscription import (
    AssignmentInfo,
    MemberMetadata,
    decode_assignment,
    decode_member,
    encode_assignment,
    encode_member,
)
from inferstream.policy.view import NO_POLICY, ModelRange, PolicyView, WorkerPolicy

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class TopicPlan:
    """One topic's plan: the members as planned (`owned` = what they got), partitions, and
    the model ranges it was planned with."""

    members: tuple[Member, ...]
    partitions: tuple[int, ...]
    plan: Plan
    ranges: tuple[ModelRange, ...] = ()


@dataclass(frozen=True)
class LeaderState:
    """What the leader assigned last, by topic, and when (monotonic seconds)."""

    pool: str
    topics: dict[str, TopicPlan]
    at: float


class PolicyAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Capacity-proportional, sticky partitions for the members of `pool`'s group.

    `policy` is what the leader plans by (the worker's `PolicyTable`): each member's share
    and the model ranges of `pool`; `models()` and `calibration()` what this worker serves
    and its calibrated items/s, asked at each join.
    """

    name = "inferstream-policy"
    version = 1

    def __init__(self, pool: str, worker: str, policy: PolicyView = NO_POLICY,
                 models: Callable[[], Sequence[str]] = tuple,
                 calibration: Callable[[], float | None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self.worker = worker
        self.policy = policy
        self.models = models
        self.calibration = calibration
        self.clock = clock
        self.owned: dict[str, tuple[int, ...]] = {}
        self.epoch = 0
        self.is_leader = False
        self.leader_state: LeaderState | None = None
        self._even_told = False

    # -- every member ------------------------------------------------------------------------
    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        meta = MemberMetadata(worker=self.worker, models=tuple(self.models()),
                              owned=self.owned, epoch=self.epoch,
                              calibration_items_per_s=self.calibration())
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), encode_member(meta))

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        info = decode_assignment(assignment.user_data)
        owned: dict[str, list[int]] = {}
        for tp in assignment.partitions():
            owned.setdefault(tp.topic, []).append(tp.partition)
        self.owned = {t: tuple(sorted(ps)) for t, ps in owned.items()}
        self.epoch = info.epoch
        self.is_leader = bool(info.leader) and info.leader == self.worker
        if not self.is_leader:
            self.leader_state = None

    # -- the leader --------------------------------------------------------------------------
    def assign(self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
               ) -> dict[str, ConsumerProtocolMemberAssignment]:
        metas = {mid: decode_member(m.user_data, mid) for mid, m in members.items()}
        epoch = max((m.epoch for m in metas.values()), default=0) + 1
        policy = self.policy.workers(self.pool)
        # plan_by_model ignores the ranges without a policy
        ranges = tuple(self.policy.model_ranges(self.pool))
        self._tell_fallback(policy)
        topics: dict[str, TopicPlan] = {}
        for topic in sorted({t for m in members.values() for t in m.subscription}):
            partitions = cluster.partitions_for_topic(topic)
            if partitions is None:
                log.warning("no partition metadata for topic %s", topic)
                continue
            subscribed = [mid for mid, m in members.items() if topic in m.subscription]
            topics[topic] = plan_topic(topic, [metas[mid] for mid in subscribed], subscribed,
                                       sorted(partitions), policy, ranges)
        self.leader_state = LeaderState(self.pool, topics, self.clock())
        info = encode_assignment(AssignmentInfo(epoch, self.worker))
        return {mid: _assignment(self.version, mid, topics, info) for mid in members}

    def _tell_fallback(self, policy: Mapping[str, WorkerPolicy] | None) -> None:
        if policy:
            self._even_told = False
        elif not self._even_told:
            log.warning("no policy for pool %s: even assignment", self.pool)
            self._even_told = True


def plan_topic(topic: str, metas: Sequence[MemberMetadata], member_ids: Sequence[str],
               partitions: Sequence[int], policy: Mapping[str, WorkerPolicy] | None,
               ranges: Sequence[ModelRange] = ()) -> TopicPlan:
    """The plan of one topic for the members subscribed to it (`ranges`: its models')."""
    members = [Member(mid, meta.worker, meta.models, meta.owned.get(topic, ()), meta.epoch,
                      meta.calibration_items_per_s)
               for mid, meta in zip(member_ids, metas, strict=True)]
    planned = plan_by_model(members, partitions, policy, ranges)
    log.info("assigned topic=%s partitions=%d moved=%d even=%s ranges=%d counts=%s", topic,
             len(partitions), planned.moved, planned.even, len(ranges),
             {m.worker: len(planned.partitions[m.member_id]) for m in members})
    as_planned = tuple(replace(m, owned=tuple(planned.partitions[m.member_id]))
                       for m in members)
    return TopicPlan(as_planned, tuple(partitions), planned, tuple(ranges))


def _assignment(version: int, member_id: str, topics: Mapping[str, TopicPlan],
                info: bytes) -> ConsumerProtocolMemberAssignment:
    owned = [(topic, tp.plan.partitions[member_id]) for topic, tp in sorted(topics.items())
             if tp.plan.partitions.get(member_id)]
    return ConsumerProtocolMemberAssignment(version, owned, info)
