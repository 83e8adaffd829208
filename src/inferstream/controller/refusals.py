"""What the cluster refuses a controller replica after its start (an ACL deleted while it
runs): its group, a transactional id, a topic. Each stops the replica with the one line of
`kafka.refusals.not_authorized`, as a refusal at its start does: no retry brings the ACL,
and a replica retrying for ever looked healthy while no job moved."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException

from inferstream.config import Config
from inferstream.kafka.clients import Message
from inferstream.kafka.errors import AuthorizationError, StuckCallError, TopicRefusedError
from inferstream.kafka.refusals import not_authorized

ROLE = "controller"


def refusal(config: Config, exc: BaseException, *, transactional_id: str | None = None,
            topics: Iterable[str] = ()) -> AuthorizationError | None:
    """The error to stop with when `exc` is a refusal for want of an ACL, else None.

    `transactional_id` and `topics` are what the failed call used (a partition's
    transaction: its producer's id and the topics it wrote)."""
    if isinstance(exc, TopicRefusedError):
        return topic_refused(config, exc)
    if isinstance(exc, AuthorizationError):
        return exc
    if isinstance(exc, StuckCallError) or not isinstance(exc, KafkaException):
        return None
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    code = error.code() if error is not None else None
    if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
        return not_authorized(config, ROLE, f"use group {config.controller_group()}")
    if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return not_authorized(config, ROLE, f"use transactional id {transactional_id}"
                              if transactional_id else "use its transactional ids")
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        named = sorted(set(topics))
        what = (f"write {'topic' if len(named) == 1 else 'topics'} {', '.join(named)}"
                if named else "use its topics")
        return not_authorized(config, ROLE, what)
    return None


def topic_refused(config: Config, exc: TopicRefusedError) -> AuthorizationError:
    return not_authorized(config, ROLE, f"{exc.what} topic {exc.topic}")


def check_allowed(config: Config, message: Message) -> None:
    """AuthorizationError in words when no ACL lets this principal join the controller
    group (librdkafka says so in an error message of no partition, at each attempt) or read
    a topic it consumes (in an error message of that topic, at each fetch)."""
    error = message.error()
    if error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
        raise not_authorized(config, ROLE, f"join group {config.controller_group()}")
    if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        raise not_authorized(config, ROLE, f"read topic {message.topic()}")
