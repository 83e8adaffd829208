"""The pure assignment of a pool's partitions: proportional, sticky, deterministic."""

from __future__ import annotations

import random

from inferstream.policy.assignment import Member, plan, target_counts
from inferstream.policy.view import WorkerPolicy


def members(*workers: str, owned: dict[str, list[int]] | None = None) -> list[Member]:
    owned = owned or {}
    return [Member(f"m-{w}", w, ("sim",), tuple(owned.get(w, ()))) for w in workers]


def policy(**shares: float) -> dict[str, WorkerPolicy]:
    return {w: WorkerPolicy(s, s > 0, s * 100) for w, s in shares.items()}


def counts(result_partitions: dict[str, list[int]]) -> dict[str, int]:
    return {m.removeprefix("m-"): len(ps) for m, ps in result_partitions.items()}


def test_capacities_1_2_4_8_share_120_partitions_in_proportion() -> None:
    result = plan(members("a", "b", "c", "d"), range(120),
                  policy(a=1 / 15, b=2 / 15, c=4 / 15, d=8 / 15))
    assert counts(result.partitions) == {"a": 8, "b": 16, "c": 32, "d": 64}
    every = sorted(p for ps in result.partitions.values() for p in ps)
    assert every == list(range(120))
    assert not result.even


def test_largest_remainder_gives_the_spare_partitions_to_the_biggest_fractions() -> None:
    # quotas 3.33 / 3.33 / 3.33 with 10 partitions: one spare, to the first in order
    assert target_counts({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, 10, ["a", "b", "c"]) == {
        "a": 4, "b": 3, "c": 3}
    # quotas 6.5 / 2.7 / 0.8: floors 6 / 2 / 0, spares to 0.8 then 0.7
    assert target_counts({"a": 0.65, "b": 0.27, "c": 0.08}, 10, ["a", "b", "c"]) == {
        "a": 6, "b": 3, "c": 1}


def test_every_member_with_a_share_gets_at_least_one_when_there_are_enough() -> None:
    result = plan(members("big", "tiny"), range(12), policy(big=0.99, tiny=0.01))
    assert counts(result.partitions) == {"big": 11, "tiny": 1}
    scarce = plan(members("a", "b", "c"), range(2), policy(a=0.5, b=0.3, c=0.2))
    assert sum(counts(scarce.partitions).values()) == 2


def test_a_member_the_policy_marks_unhealthy_gets_none_while_others_are_healthy() -> None:
    table = policy(a=0.5, b=0.5)
    table["c"] = WorkerPolicy(0.0, False, 40.0)
    result = plan(members("a", "b", "c"), range(12), table)
    assert counts(result.partitions) == {"a": 6, "b": 6, "c": 0}


def test_all_members_unhealthy_share_evenly() -> None:
    table = {w: WorkerPolicy(0.0, False) for w in ("a", "b")}
    assert counts(plan(members("a", "b"), range(4), table).partitions) == {"a": 2, "b": 2}


def test_an_unknown_member_gets_its_share_from_its_calibration() -> None:
    # the policy's pool does 100 items/s (a: 25, b: 75); the newcomer calibrated at 100
    table = {"a": WorkerPolicy(0.25, True, 25.0), "b": WorkerPolicy(0.75, True, 75.0)}
    new = Member("m-new", "new", ("sim",), calibration_items_per_s=100.0)
    result = plan([*members("a", "b"), new], range(40), table)
    assert counts(result.partitions) == {"a": 5, "b": 15, "new": 20}
    uncalibrated = Member("m-new", "new")
    mean = plan([*members("a", "b"), uncalibrated], range(30), table)
    assert counts(mean.partitions)["new"] == 10


def test_a_small_share_change_moves_few_partitions() -> None:
    first = plan(members("a", "b", "c", "d"), range(120),
                 policy(a=1 / 15, b=2 / 15, c=4 / 15, d=8 / 15))
    owned = {m.removeprefix("m-"): ps for m, ps in first.partitions.items()}
    second = plan(members("a", "b", "c", "d", owned=owned), range(120),
                  policy(a=0.08, b=2 / 15, c=4 / 15, d=8 / 15 - 0.08 + 1 / 15))
    assert second.moved == 2  # a: 8 -> 10, from d
    for worker in "abcd":
        kept = set(owned[worker]) & set(second.partitions[f"m-{worker}"])
        assert len(kept) == min(len(owned[worker]), len(second.partitions[f"m-{worker}"]))


def test_a_partition_claimed_twice_stays_with_the_newest_epoch() -> None:
    old = Member("m-a", "a", owned=(0, 1), epoch=3)
    new = Member("m-b", "b", owned=(1,), epoch=4)
    result = plan([old, new], range(2), None)
    assert result.partitions == {"m-a": [0], "m-b": [1]}
    assert result.moved == 0


def test_without_a_policy_the_assignment_is_even_and_sticky() -> None:
    result = plan(members("a", "b", "c", owned={"c": [0, 1, 2, 3, 4, 5]}), range(12), None)
    assert result.even
    assert counts(result.partitions) == {"a": 4, "b": 4, "c": 4}
    assert result.partitions["m-c"] == [0, 1, 2, 3]


def test_the_plan_is_deterministic_whatever_the_member_order() -> None:
    group = members("a", "b", "c", "d")
    table = policy(a=0.1, b=0.2, c=0.3, d=0.4)
    assert plan(group, range(50), table) == plan(list(reversed(group)), range(50), table)


def test_no_member_no_partitions() -> None:
    assert plan([], range(3), None).partitions == {}


def test_a_hundred_workers_on_240_partitions_stay_within_one_of_their_quota() -> None:
    rng = random.Random(11)
    raw = {f"w{i:03d}": rng.uniform(1, 8) for i in range(100)}
    total = sum(raw.values())
    table = policy(**{w: v / total for w, v in raw.items()})
    result = plan(members(*raw), range(240), table)
    got = counts(result.partitions)
    assert sum(got.values()) == 240 and min(got.values()) >= 1
    for worker, count in got.items():
        assert abs(count - table[worker].share * 240) < 2
