"""Asking an aiokafka consumer to rejoin its group: the one place inferstream reaches into
aiokafka's internals, because aiokafka 0.14 has no public call for it.

`AIOKafkaConsumer._coordinator` is the consumer's `GroupCoordinator` (set by `start()`);
its `request_rejoin()` resolves `_rejoin_needed_fut`, which the coordination routine waits
on, so the member revokes, joins again and the leader assigns anew. Upstream:
https://github.com/aio-libs/aiokafka/blob/v0.14.0/aiokafka/consumer/group_coordinator.py
(`GroupCoordinator.request_rejoin`, `need_rejoin`, `__coordination_routine`). A test in
tests/unit/policy/test_policy_rebalance.py fails if an upgrade moves any of it.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def request_rejoin(consumer: Any) -> bool:
    """Make `consumer` rejoin its group at once; False (and a warning) where it cannot:
    not started, no group, or a consumer without aiokafka's coordinator."""
    coordinator = getattr(consumer, "_coordinator", None)
    rejoin = getattr(coordinator, "request_rejoin", None)
    if rejoin is None or not hasattr(coordinator, "_rejoin_needed_fut"):
        log.warning("cannot ask %s to rejoin its group: no group coordinator",
                    type(consumer).__name__)
        return False
    rejoin()
    return True
