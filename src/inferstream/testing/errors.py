"""What the in-memory broker refuses; each client module turns these into its library's errors.

The broker core knows neither aiokafka nor confluent-kafka: `aio` and `sync` translate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from threading import Event


class BrokerError(Exception):
    """A request the in-memory broker refused."""


class UnknownTopicError(BrokerError):
    """The topic does not exist (topics are made with `MemoryBroker.create_topic`)."""


class UnknownPartitionError(BrokerError):
    """The topic exists but has no such partition."""


class FencedError(BrokerError):
    """The producer's epoch is stale: a newer producer initialised its transactional id."""


class TransactionStateError(BrokerError):
    """A transactional call out of order (commit without a transaction, a second begin...)."""


class NotMemberError(BrokerError):
    """The consumer is not (or no longer) a member of its group: its session expired."""


class StaleGenerationError(BrokerError):
    """The consumer's generation is older than the group's: the group rebalanced."""


@dataclass
class Fault:
    """A failure injected into the next `times` calls `call` of a transactional id (or, for
    "offset_commit", "offset_fetch" and "leave", of a consumer group).

    With `stall`, the call first blocks until that event is set. Then `fail` says when
    `error` is raised (None: the client library's timeout error): "before" the call takes
    effect, "after" it (a commit whose outcome the caller cannot know), or None: never,
    the call goes on as usual. `reached` is set once a call has hit the fault.
    """

    call: str
    times: int = 1
    fail: str | None = "before"
    error: BaseException | None = None
    stall: Event | None = None
    reached: Event = field(default_factory=Event)


#: The calls a Fault can name: a producer's transactional calls, a consumer's own commit and
#: its look-up of its group's committed offsets, its leaving the group at its stop, and its
#: fetch (stalled: aiokafka's getmany waiting for a rebalance to end).
FAULT_CALLS = ("init", "send_offsets", "commit", "abort", "offset_commit", "offset_fetch",
               "leave", "fetch")
FAIL_WHEN = ("before", "after", None)
