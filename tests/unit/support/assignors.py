"""A consumer group's rebalance as aiokafka's group coordinator drives its assignors, with no
broker: each member's metadata, the leader's `assign`, every member's `on_assignment`."""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka.coordinator.protocol import ConsumerProtocol

from inferstream.policy.assignor import PolicyAssignor

#: The task topic of `make_config()`'s pool.
TOPIC = "t.tasks.default"


class Cluster:
    """The one call an assignor makes of aiokafka's ClusterMetadata."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.partitions)) if topic == TOPIC else None


def join(assignors: Mapping[str, PolicyAssignor], partitions: int
         ) -> dict[str, list[int]]:
    """One rebalance: metadata from every member, `assign` on the first, on_assignment."""
    members = {mid: ConsumerProtocol.METADATA.decode(a.metadata([TOPIC]).encode())
               for mid, a in assignors.items()}
    leader = next(iter(assignors.values()))
    assignments = leader.assign(Cluster(partitions), members)
    owned: dict[str, list[int]] = {}
    for mid, assignor in assignors.items():
        wire = ConsumerProtocol.ASSIGNMENT.decode(assignments[mid].encode())
        assignor.on_assignment(wire)
        owned[mid] = [tp.partition for tp in wire.partitions()]
    return owned
