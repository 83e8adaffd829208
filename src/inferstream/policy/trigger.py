"""When the leader asks its group to rebalance: the policy moved a member's share materially.

`RebalanceTrigger.check` compares what the leader assigned last (`LeaderState`) with what
the policy says now: a member whose share moved by more than `threshold` of its planned
share (0.20 -> 0.24 is 20 %), a member turned unhealthy (its share drops to 0), the policy
appearing or going away, the model ranges changing; and only where the new plan would move
a partition. It answers at
most once per `min_interval_s` after an assignment or a trigger, so a noisy policy cannot
cause rebalance storms, with one exception, once per assignment: a member planned without a
share (unhealthy when the leader assigned) that has one now. A worker that restarts after
its samples stopped joins while the policy still calls it STALE and gets nothing; its first
samples make it HEALTHY a few seconds later, and it should not sit idle for the rest of the
interval (34.5 s on a real broker before this, 4.5 s after). That cannot storm: a member
loses its share only through a trigger bound by the interval. Each member runs the check;
only the leader has a state to check.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from inferstream.policy.assignment import plan_by_model
from inferstream.policy.assignor import LeaderState, TopicPlan
from inferstream.policy.view import ModelRange, WorkerPolicy


class RebalanceTrigger:
    """Decides whether the leader should rebalance now; `clock` is monotonic seconds."""

    def __init__(self, threshold: float = 0.15, min_interval_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._last_trigger: float | None = None

    def check(self, state: LeaderState | None, policy: Mapping[str, WorkerPolicy] | None,
              ranges: Sequence[ModelRange] = ()) -> str | None:
        """Why to rebalance now (and count it as done), or None; `ranges`: the model ranges
        of the policy now."""
        if state is None:
            return None
        may_trigger = self._may_trigger(state)
        may_hurry = self._last_trigger is None or self._last_trigger < state.at
        for topic, planned in sorted(state.topics.items()):
            reason, urgent = self._reason(topic, planned, policy, tuple(ranges))
            if reason is not None and (may_trigger or (urgent and may_hurry)):
                self._last_trigger = self.clock()
                return reason
        return None

    def _may_trigger(self, state: LeaderState) -> bool:
        last = max(state.at, self._last_trigger or state.at)
        return self.clock() - last >= self.min_interval_s

    def _reason(self, topic: str, planned: TopicPlan,
                policy: Mapping[str, WorkerPolicy] | None,
                ranges: tuple[ModelRange, ...]) -> tuple[str | None, bool]:
        """Why to rebalance `topic` (None: no reason), and whether the reason may skip the
        interval (a member without a share in the plan has one now)."""
        fresh = plan_by_model(planned.members, planned.partitions, policy, ranges)
        if fresh.moved == 0:
            return None, False
        moves = [(m.worker, planned.plan.shares.get(m.member_id, 0.0),
                  fresh.shares.get(m.member_id, 0.0)) for m in planned.members]
        if not fresh.even and not planned.plan.even:
            for worker, old, new in moves:
                if old == 0 < new:
                    return f"topic {topic}: {worker} healthy again", True
        if fresh.even != planned.plan.even:
            return f"topic {topic}: policy {'gone' if fresh.even else 'appeared'}", False
        if ranges != planned.ranges:
            return f"topic {topic}: model ranges {len(planned.ranges)} -> {len(ranges)}", False
        for worker, old, new in moves:
            if new == 0 < old:
                return f"topic {topic}: {worker} unhealthy", False
        for worker, old, new in moves:
            if abs(new - old) > self.threshold * max(old, 1e-9):
                return f"topic {topic}: {worker} share {old:.3f} -> {new:.3f}", False
        return None, False
