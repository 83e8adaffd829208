"""Hooks on the controller's round: no-op methods that its metrics override.

What a round decides is tallied per home partition in its `Outbox` and reported only for the
partitions whose transaction committed, so a rolled-back round (a fenced producer, a broker
gone) is not counted twice when its records are read and decided again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from inferstream.controller.backlog import PoolBacklog

#: What a round tallies, by (what, *labels): ("tasks_issued", pool), ("tasks_done", pool),
#: ("tasks_reissued", pool, "migrated" | "declined"), ("items_done", "ok" | "error"),
#: ("jobs_accepted",), ("late_results_dropped",), ("ledger_records",) (tombstones too).
Tally = Counter[tuple[str, ...]]


@dataclass(frozen=True)
class JobProgress:
    """One active job's progress: items done of its total (None until it is expanded)."""

    job_id: str
    done_items: int
    total_items: int | None


@dataclass(frozen=True)
class RoundState:
    """What the controller holds after a round."""

    jobs_by_state: dict[str, int]
    owned_partitions: int
    active: list[JobProgress] = field(default_factory=list)
    #: each pool's backlog at this replica (`backlog`), by pool
    backlog: dict[str, PoolBacklog] = field(default_factory=dict)
    #: entries in its warm copy of the ledger, every partition (`replay.LedgerStandby`)
    standby_entries: int = 0


class ControllerHooks:
    """Override what you need; every method is a cheap no-op here."""

    def after_transaction(self, seconds: float, tally: Tally) -> None:
        """One home partition's transaction committed in `seconds`, with what `tally`
        counts."""

    def after_round(self, seconds: float, state: RoundState) -> None:
        """One round (consume, decide, commit) took `seconds`; `state` is what it left."""
