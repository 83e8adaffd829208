"""Who is in a consumer group: the live workers of a pool, asked through the admin client
(the controller routes declined tasks by it; a waiting client says when a pool is empty)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferstream.kafka.stuck_calls import CoordinatorRequests


def describe_with(new_admin: Callable[[], Any], timeout_s: float = 5.0
                  ) -> Callable[[str], dict[str, list[int]]]:
    """A group describer through confluent-kafka AdminClients that `new_admin` makes (a new
    one when the last one's view of the coordinators went stale): the members of a worker
    group by client id (the worker id), with the task partitions each owns. Raises what the
    admin client raises when the group cannot be described, TimeoutError when its
    coordinator has not answered in `timeout_s` (at once while an earlier request is still
    unanswered: see `CoordinatorRequests`)."""
    requests: CoordinatorRequests[Any] = CoordinatorRequests(new_admin, timeout_s)

    def describe(group: str) -> dict[str, list[int]]:
        description = requests.result(group, lambda admin, limit_s: (
            admin.describe_consumer_groups([group], request_timeout=limit_s)[group]))
        return {m.client_id: [tp.partition for tp in m.assignment.topic_partitions]
                for m in description.members}
    return describe
