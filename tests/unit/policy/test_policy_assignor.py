"""`PolicyAssignor` as aiokafka's group coordinator drives it: each member's metadata, the
leader's assignment by the policy, every member's `on_assignment`; and the metadata codec."""

from __future__ import annotations

import logging

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from inferstream.policy.assignor import PolicyAssignor
from inferstream.policy.subscription import (
    MemberMetadata,
    decode_member,
    encode_member,
)
from inferstream.policy.view import WorkerPolicy
from tests.unit.support.assignors import TOPIC, join
from tests.unit.support.policies import FixedPolicy


def test_member_metadata_round_trips_through_the_wire_format() -> None:
    meta = MemberMetadata("w1", ("sim:ms=10", "alexnet"), {TOPIC: (3, 1, 2)}, 7, 98.5)
    wire = ConsumerProtocolMemberMetadata(1, [TOPIC], encode_member(meta)).encode()
    decoded = ConsumerProtocol.METADATA.decode(wire)
    assert decode_member(decoded.user_data, "member-1") == meta
    assert len(encode_member(meta)) < 120  # compact: it rides in every JoinGroup


def test_unreadable_metadata_is_a_member_that_owns_nothing() -> None:
    assert decode_member(b"\x00garbage", "m-9") == MemberMetadata("m-9")
    assert decode_member(b'{"v":1,"owned":{"t":["x"]}}', "m-9") == MemberMetadata("m-9")
    assert decode_member(None, "m-9") == MemberMetadata("m-9")


def test_the_leader_assigns_by_the_policy_and_members_remember_what_they_own() -> None:
    shares: dict[str, dict[str, WorkerPolicy] | None] = {"default": None}
    assignors = {f"m-{w}": PolicyAssignor("default", w, FixedPolicy(shares.get), lambda: ("sim",),
                                          lambda: 50.0)
                 for w in ("fast", "slow")}
    assert join(assignors, 20) == {"m-fast": list(range(10)), "m-slow": list(range(10, 20))}
    shares["default"] = {"fast": WorkerPolicy(0.8, True, 100.0),
                         "slow": WorkerPolicy(0.2, True, 25.0)}
    owned = join(assignors, 20)
    assert {m: len(ps) for m, ps in owned.items()} == {"m-fast": 16, "m-slow": 4}
    assert set(range(10)) <= set(owned["m-fast"])  # sticky: fast kept its ten
    assert assignors["m-fast"].is_leader and not assignors["m-slow"].is_leader
    assert assignors["m-slow"].epoch == 2
    state = assignors["m-fast"].leader_state
    assert state is not None and state.topics[TOPIC].plan.shares == {"m-fast": 0.8,
                                                                     "m-slow": 0.2}


def test_the_fallback_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    assignors = {"m-a": PolicyAssignor("p", "a")}
    join(assignors, 4)
    join(assignors, 4)
    told = [r for r in caplog.records if "no policy for pool p: even assignment" in r.message]
    assert len(told) == 1


def test_an_assignment_from_another_leader_is_understood() -> None:
    assignor = PolicyAssignor("p", "a")
    assignor.on_assignment(ConsumerProtocolMemberAssignment(0, [(TOPIC, [2, 0])], b""))
    assert assignor.owned == {TOPIC: (0, 2)} and not assignor.is_leader
