"""Errors of the Kafka layer: a cluster that cannot be used, a call that hangs, a partition lost."""

from inferstream.errors import InferstreamError


class KafkaSetupError(InferstreamError):
    """The cluster cannot be reached or a topic cannot be created or described."""



class AuthorizationError(KafkaSetupError):
    """The cluster refused this principal what no ACL allows it (a topic, a group, a
    transactional id): no retry and no restart brings the ACL."""



class TopicRefusedError(AuthorizationError):
    """The cluster answered TOPIC_AUTHORIZATION_FAILED for a topic named to it: this principal
    may not `what` it ("describe", "read", "write"). A caller that knows the role says so
    with `refusals.not_authorized`."""

    def __init__(self, topic: str, what: str = "describe") -> None:
        super().__init__(f"no ACL allows this principal to {what} topic {topic}")
        self.topic = topic
        self.what = what


class StuckCallError(InferstreamError):
    """A Kafka client call did not return within its own timeout and a grace period after it."""



class PartitionReadError(InferstreamError):
    """A topic partition could not be read back (not an end-of-partition event)."""



class PartitionLostError(InferstreamError):
    """A worker's task partition is no longer its own: fenced by a new owner, revoked, or
    given up on after repeated commit failures. Its uncommitted tasks go to the next owner."""



class TransactionalIdRefusedError(PartitionLostError):
    """No ACL allows the transactional id of a partition's producer: the partition is given
    up, its uncommitted tasks go to the next owner, and the worker stops (no retry brings
    the ACL)."""

    def __init__(self, transactional_id: str) -> None:
        super().__init__(f"transactional id {transactional_id}: no ACL allows it")
        self.transactional_id = transactional_id
