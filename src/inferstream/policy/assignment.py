"""Who owns which partition of a pool's task topic: capacity shares in, partitions out.

Pure and deterministic (no Kafka, no clock): `plan` takes the group's members, the
partitions to share and the pool's policy, and returns each member's partitions. A member's
count is proportional to its capacity share (largest remainder, at least one for each member
with a share when there are enough partitions); members keep as many of the partitions they
own as their count allows, so a small change in shares moves few partitions.

Model affinity: where the policy gives the models of a pool ranges of partitions
(`ModelRange`), `plan_by_model` plans each range among the members that serve its model,
with their shares, and the partitions of no range (or of a range nobody serves) among all
members, so that no partition is left without an owner.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inferstream.policy.view import ModelRange, WorkerPolicy
from inferstream.schemas.records import serves


@dataclass(frozen=True)
class Member:
    """One member of the group as its subscription metadata describes it.

    `owned`: the partitions it holds now, as of assignment `epoch` (higher wins a conflict);
    `calibration_items_per_s`: its speed measured at start, None when not measured.
    """

    member_id: str
    worker: str
    models: tuple[str, ...] = ()
    owned: tuple[int, ...] = ()
    epoch: int = 0
    calibration_items_per_s: float | None = None



@dataclass(frozen=True)
class Plan:
    """Partitions per member id, the share each member was planned with (summing to 1),
    and whether the plan is the even fallback (no policy)."""

    partitions: dict[str, list[int]]
    shares: dict[str, float]
    even: bool = False
    moved: int = field(default=0, compare=False)


def plan(members: Sequence[Member], partitions: Sequence[int],
         policy: Mapping[str, WorkerPolicy] | None) -> Plan:
    """The assignment of `partitions` to `members` under `policy` (None or empty: even)."""
    ordered = sorted(members, key=lambda m: (m.worker, m.member_id))
    if not ordered:
        return Plan({}, {}, even=not policy)
    shares = member_shares(ordered, policy)
    counts = target_counts(shares, len(partitions), [m.member_id for m in ordered])
    owned = resolve_claims(ordered, set(partitions))
    assigned, moved = fill_sticky(counts, owned, sorted(partitions),
                                  [m.member_id for m in ordered])
    return Plan(assigned, shares, even=not policy, moved=moved)






def plan_by_model(members: Sequence[Member], partitions: Sequence[int],
                  policy: Mapping[str, WorkerPolicy] | None,
                  ranges: Sequence[ModelRange] = ()) -> Plan:
    """`plan` of each of `ranges` among the members that serve its model, and of the other
    `partitions` among all members; the union. A member's share in the union is its
    planned fraction of all `partitions`. Without ranges, or a policy, it is `plan`."""
    if not ranges or not policy:
        return plan(members, partitions, policy)
    rest = set(partitions)
    parts: list[tuple[Plan, int]] = []
    for model_range in ranges:
        serving = [m for m in members if any(serves(s, model_range.model) for s in m.models)]
        mine = [p for p in model_range.partitions if p in rest]
        if serving and mine:
            parts.append((plan(serving, mine, policy), len(mine)))
            rest -= set(mine)
    parts.append((plan(members, sorted(rest), policy), len(rest)))
    return _union(members, parts, len(partitions))


def _union(members: Sequence[Member], parts: Sequence[tuple[Plan, int]], total: int) -> Plan:
    assigned: dict[str, list[int]] = {m.member_id: [] for m in members}
    shares = dict.fromkeys(assigned, 0.0)
    for part, size in parts:
        for member, owned in part.partitions.items():
            assigned[member] += owned
            shares[member] += part.shares.get(member, 0.0) * size / max(total, 1)
    return Plan({m: sorted(ps) for m, ps in assigned.items()}, shares,
                even=parts[-1][0].even, moved=sum(p.moved for p, _ in parts))


def member_shares(members: Sequence[Member], policy: Mapping[str, WorkerPolicy] | None
                  ) -> dict[str, float]:
    """Each member's share of the pool, summing to 1 over `members`.

    A worker the policy knows gets its share (none when it is not HEALTHY); one it does not
    know yet gets the share its calibration is worth against the pool's capacity (the mean
    known share without a calibration). Without a policy, or with no member left with a
    share, every member gets the same.
    """
    if not policy:
        return _even(members)
    weights = {m.member_id: _weight(m, policy) for m in members}
    total = sum(weights.values())
    if total <= 0:
        return _even(members)
    return {member: weight / total for member, weight in weights.items()}


def _even(members: Sequence[Member]) -> dict[str, float]:
    return {m.member_id: 1.0 / len(members) for m in members}


def _weight(member: Member, policy: Mapping[str, WorkerPolicy]) -> float:
    known = policy.get(member.worker)
    if known is not None:
        return max(0.0, known.share) if known.healthy else 0.0
    healthy = [p for p in policy.values() if p.healthy]
    mean_share = (sum(p.share for p in healthy) / len(healthy)) if healthy else 1.0
    capacity = sum(p.capacity_items_per_s for p in healthy)
    calibration = member.calibration_items_per_s
    if calibration is None or calibration <= 0 or capacity <= 0:
        return mean_share
    # The same unit as the shares: the fraction of the policy's pool the member would be.
    return calibration / capacity


def target_counts(shares: Mapping[str, float], partitions: int, order: Sequence[str]
                  ) -> dict[str, int]:
    """Partitions per member: largest remainder of `shares` x `partitions` (ties go by
    `order`), then one for each member with a share that got none, taken from the member
    furthest above its exact quota, when there are enough partitions."""
    rank = {m: i for i, m in enumerate(order)}
    quotas = {m: shares[m] * partitions for m in order}
    counts = {m: math.floor(quotas[m]) for m in order}
    rest = partitions - sum(counts.values())
    # A member without a share never gets a seat for a float's rounding error.
    by_remainder = sorted(order, key=lambda m: (shares[m] <= 0, counts[m] - quotas[m],
                                                rank[m]))
    for member in by_remainder[:rest]:
        counts[member] += 1
    wanting = [m for m in order if shares[m] > 0 and counts[m] == 0]
    if len([m for m in order if shares[m] > 0]) <= partitions:
        for member in wanting:
            donor = max((m for m in order if counts[m] > 1),
                        key=lambda m: (counts[m] - quotas[m], -rank[m]))
            counts[donor] -= 1
            counts[member] += 1
    return counts


def resolve_claims(members: Sequence[Member], valid: set[int]) -> dict[str, list[int]]:
    """What each member may keep of what it claims to own: partitions still in `valid`,
    and of a partition claimed twice only the claim of the newest assignment epoch."""
    winner: dict[int, Member] = {}
    for member in sorted(members, key=lambda m: (-m.epoch, m.member_id)):
        for partition in member.owned:
            if partition in valid and partition not in winner:
                winner[partition] = member
    kept: dict[str, list[int]] = {m.member_id: [] for m in members}
    for partition, member in sorted(winner.items()):
        kept[member.member_id].append(partition)
    return kept


def fill_sticky(counts: Mapping[str, int], owned: Mapping[str, list[int]],
                partitions: Sequence[int], order: Sequence[str]
                ) -> tuple[dict[str, list[int]], int]:
    """Give each member `counts[m]` partitions, keeping the ones it owns first; the rest
    go out in partition order to members in `order`. Returns the assignment and how many
    partitions changed owner (or had none)."""
    assigned = {m: owned.get(m, [])[:counts[m]] for m in order}
    taken = {p for ps in assigned.values() for p in ps}
    free = [p for p in partitions if p not in taken]
    for member in order:
        need = counts[member] - len(assigned[member])
        assigned[member] = sorted(assigned[member] + free[:need])
        free = free[need:]
    return assigned, len(partitions) - len(taken)
