"""Consumer groups of the in-memory broker: members, eager rebalances, committed offsets.

A change of membership (a join, a leave, an expired session) starts a rebalance: every
member must first revoke what it holds (its consumer runs the revoke callback on its next
poll), and only when all have done so does the group hand out the new assignment, in a
new generation. So a partition never has two members that both think they hold it in the
current generation: the old owner's revoke callback (which commits in-flight work) runs
before the new owner's assign callback. A member whose session expired is out at once;
its consumer learns it on its next poll, revokes, and joins again as a new member.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from inferstream.testing.errors import NotMemberError, StaleGenerationError
from inferstream.testing.log import Key

REVOKE, ASSIGN, EXPIRED = "revoke", "assign", "expired"


@dataclass(eq=False)
class Member:
    member_id: str
    seq: int
    topics: tuple[str, ...]
    assignment: list[Key] = field(default_factory=list)
    generation: int = -1  # the generation `assignment` belongs to
    client_id: str = ""
    joined: bool = False  # has revoked and waits for this rebalance's assignment
    told: int = -1  # the latest generation whose assignment its consumer has been given
    assignor: Any = None  # a client-side assignor object (e.g. PolicyAssignor), or None
    user_data: bytes = b""  # what the leader's assignor sent along with `assignment`


@dataclass(frozen=True)
class GroupEvent:
    """What a member's consumer must do on its next poll."""

    kind: str  # REVOKE, ASSIGN or EXPIRED
    partitions: tuple[Key, ...] = ()
    generation: int = -1


@dataclass
class Group:
    group_id: str
    strategy: str = "range"
    members: dict[str, Member] = field(default_factory=dict)
    generation: int = 0
    rebalancing: bool = False
    committed: dict[Key, int] = field(default_factory=dict)


class GroupCoordinator:
    """Every consumer group; not thread-safe by itself (the broker calls it under its lock)."""

    def __init__(self, partitions_of: dict[str, int]) -> None:
        self._partitions_of = partitions_of  # the broker's topic -> partition count, shared
        self.groups: dict[str, Group] = {}
        self._seq = itertools.count(1)

    def group(self, group_id: str) -> Group:
        return self.groups.setdefault(group_id, Group(group_id))

    def join(self, group_id: str, client_id: str, topics: tuple[str, ...],
             strategy: str, assignor: Any = None) -> str:
        group = self.group(group_id)
        if not group.members:
            group.strategy = strategy
        seq = next(self._seq)
        member_id = f"{client_id or 'consumer'}-{seq}"
        group.members[member_id] = Member(member_id, seq, topics, client_id=client_id,
                                          assignor=assignor)
        self._rebalance(group)
        return member_id

    def leave(self, group_id: str, member_id: str) -> None:
        group = self.group(group_id)
        if group.members.pop(member_id, None) is not None:
            self._rebalance(group)

    def next_event(self, group_id: str, member_id: str) -> GroupEvent | None:
        group = self.group(group_id)
        member = group.members.get(member_id)
        if member is None:
            return GroupEvent(EXPIRED)
        if group.rebalancing and not member.joined:
            return GroupEvent(REVOKE, tuple(member.assignment), member.generation)
        if not group.rebalancing and member.told < group.generation:
            member.told = group.generation
            return GroupEvent(ASSIGN, tuple(member.assignment), group.generation)
        return None

    def revoked(self, group_id: str, member_id: str) -> None:
        """The member's consumer ran its revoke callback: it holds nothing now."""
        group = self.group(group_id)
        member = group.members.get(member_id)
        if member is None or not group.rebalancing:
            return
        member.joined = True
        member.assignment = []
        if all(m.joined for m in group.members.values()):
            self._assign(group)

    def check(self, group_id: str, member_id: str, generation: int) -> None:
        """Refuse an offset commit of a member that left or of an older generation."""
        group = self.group(group_id)
        if member_id not in group.members:
            raise NotMemberError(f"{member_id} is not a member of {group_id}")
        if generation != group.generation:
            raise StaleGenerationError(
                f"{member_id} has generation {generation}, {group_id} is at {group.generation}")

    def commit(self, group_id: str, offsets: dict[Key, int]) -> None:
        self.group(group_id).committed.update(offsets)

    def committed(self, group_id: str, key: Key) -> int | None:
        return self.group(group_id).committed.get(key)

    def rebalance(self, group_id: str) -> None:
        self._rebalance(self.group(group_id))

    def assignment_of(self, group_id: str, member_id: str, partitions: tuple[Key, ...]
                      ) -> ConsumerProtocolMemberAssignment:
        member = self.group(group_id).members.get(member_id)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        return ConsumerProtocolMemberAssignment(
            1, sorted(by_topic.items()), member.user_data if member else b"")

    # -- internals ---------------------------------------------------------------------------
    def _rebalance(self, group: Group) -> None:
        group.rebalancing = bool(group.members)
        for member in group.members.values():
            member.joined = False

    def _assign(self, group: Group) -> None:
        members = sorted(group.members.values(), key=lambda m: m.seq)
        leader = members[0].assignor
        if leader is not None and all(m.assignor is not None for m in members):
            shares = _client_side(leader, members, self._partitions_of)
        else:
            assign = _round_robin if group.strategy == "roundrobin" else _range
            shares = assign(members, self._partitions_of)
        group.generation += 1
        for member in members:
            member.assignment = shares[member.member_id]
            member.generation = group.generation
        group.rebalancing = False


def _range(members: list[Member], partitions_of: dict[str, int]) -> dict[str, list[Key]]:
    """Each topic's partitions cut into contiguous runs, one per subscribed member in order:
    equal partition indexes of equally sized topics land on the same member."""
    shares: dict[str, list[Key]] = {m.member_id: [] for m in members}
    for topic in sorted({t for m in members for t in m.topics}):
        takers = [m for m in members if topic in m.topics]
        count = partitions_of.get(topic, 0)
        each, extra = divmod(count, len(takers))
        start = 0
        for i, member in enumerate(takers):
            size = each + (1 if i < extra else 0)
            shares[member.member_id].extend((topic, p) for p in range(start, start + size))
            start += size
    return shares


def _round_robin(members: list[Member], partitions_of: dict[str, int]
                 ) -> dict[str, list[Key]]:
    """All subscribed partitions in (topic, partition) order, dealt to members in turn."""
    shares: dict[str, list[Key]] = {m.member_id: [] for m in members}
    turn = itertools.cycle(members)
    for topic in sorted({t for m in members for t in m.topics}):
        for partition in range(partitions_of.get(topic, 0)):
            member = next(turn)
            while topic not in member.topics:
                member = next(turn)
            shares[member.member_id].append((topic, partition))
    return shares


class _Cluster:
    """The one call an aiokafka assignor makes of the cluster metadata."""

    def __init__(self, partitions_of: dict[str, int]) -> None:
        self._partitions_of = partitions_of

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self._partitions_of.get(topic)
        return None if count is None else set(range(count))


def _client_side(leader: Any, members: list[Member], partitions_of: dict[str, int]
                 ) -> dict[str, list[Key]]:
    """As aiokafka's leader does: every member's `metadata`, the first member's `assign`;
    each member keeps its assignment's user data for its consumer's `on_assignment`."""
    metadata = {m.member_id: m.assignor.metadata(m.topics) for m in members}
    assignments: dict[str, ConsumerProtocolMemberAssignment] = leader.assign(
        _Cluster(partitions_of), metadata)
    shares: dict[str, list[Key]] = {}
    for member in members:
        assignment = assignments[member.member_id]
        member.user_data = assignment.user_data
        shares[member.member_id] = [(tp.topic, tp.partition) for tp in assignment.partitions()]
    return shares
