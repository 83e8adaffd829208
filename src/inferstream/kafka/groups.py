"""Who is in a consumer group: the live workers of a pool, asked through the admin client
(the controller routes declined tasks by it; a waiting client says when a pool is empty)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def describe_with(admin: Any, timeout_s: float = 5.0) -> Callable[[str], dict[str, list[int]]]:
    """A group describer through a confluent-kafka AdminClient: the members of a worker
    group by client id (the worker id), with the task partitions each owns; raises what
    the admin client raises when the group cannot be described."""
    def describe(group: str) -> dict[str, list[int]]:
        futures = admin.describe_consumer_groups([group], request_timeout=timeout_s)
        description = futures[group].result(timeout=timeout_s)
        return {m.client_id: [tp.partition for tp in m.assignment.topic_partitions]
                for m in description.members}
    return describe
