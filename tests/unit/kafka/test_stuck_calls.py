"""`call_with_deadline`: the bounded librdkafka call the controller makes (librdkafka#5456);
`CoordinatorRequests`: the admin requests that librdkafka must not time out (librdkafka#4605)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException

from inferstream.kafka.errors import StuckCallError
from inferstream.kafka.stuck_calls import (
    ADMIN_REQUEST_TIMEOUT_MAX_S,
    CoordinatorRequests,
    call_with_deadline,
)


def test_call_with_deadline_returns_the_value_and_reraises_the_error() -> None:
    assert call_with_deadline(lambda a, b: a + b, 2, 3, deadline_s=5) == 5

    def fails() -> None:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    with pytest.raises(KafkaException):
        call_with_deadline(fails, deadline_s=5)


def test_call_with_deadline_gives_up_on_a_call_that_does_not_return() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(StuckCallError, match=r"wait did not return in 0\.3s"):
        call_with_deadline(release.wait, deadline_s=0.3)
    assert time.monotonic() - started < 5
    release.set()


class Admins:
    """Admin clients as `CoordinatorRequests` makes them, each with the requests it sent;
    a request is answered with what `answer` holds when it is sent (None: not yet)."""

    def __init__(self) -> None:
        self.made: list[list[tuple[Future[str], float]]] = []
        self.answer: str | KafkaException | None = None

    def new(self) -> list[tuple[Future[str], float]]:
        self.made.append([])
        return self.made[-1]

    def send(self, admin: list[tuple[Future[str], float]], timeout_s: float) -> Future[str]:
        future: Future[str] = Future()
        if isinstance(self.answer, KafkaException):
            future.set_exception(self.answer)
        elif self.answer is not None:
            future.set_result(self.answer)
        admin.append((future, timeout_s))
        return future


def test_coordinator_requests_bound_the_wait_and_send_one_request_while_it_is_out() -> None:
    admins = Admins()
    requests: CoordinatorRequests[str] = CoordinatorRequests(admins.new, wait_s=0.2)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        requests.result("workers", admins.send)
    assert 0.2 <= time.monotonic() - started < 2
    started = time.monotonic()
    for _ in range(3):  # the coordinator is away: said at once, nothing sent again
        with pytest.raises(TimeoutError):
            requests.result("workers", admins.send)
    assert time.monotonic() - started < 0.2
    # One request, which librdkafka may not time out itself (librdkafka#4605): the waits
    # above gave up on it, librdkafka did not.
    assert [timeout for _, timeout in admins.made[0]] == [ADMIN_REQUEST_TIMEOUT_MAX_S]
    # An answer that came after every caller gave up is old news: the next caller asks again.
    admins.made[0][0][0].set_result("late")
    admins.answer = "now"
    assert requests.result("workers", admins.send) == "now"
    assert len(admins.made) == 1 and len(admins.made[0]) == 2


def test_coordinator_requests_use_a_new_admin_client_once_the_coordinator_moved() -> None:
    admins = Admins()
    requests: CoordinatorRequests[str] = CoordinatorRequests(admins.new, wait_s=1.0)
    admins.answer = KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))
    with pytest.raises(KafkaException):
        requests.result("workers", admins.send)
    admins.answer = "from the new coordinator"
    assert requests.result("workers", admins.send) == "from the new coordinator"
    assert [len(sent) for sent in admins.made] == [1, 1]


def test_coordinator_requests_use_a_new_admin_client_when_one_is_out_too_long() -> None:
    admins = Admins()
    requests: CoordinatorRequests[str] = CoordinatorRequests(admins.new, wait_s=0.01,
                                                             renew_after_s=0.1)
    with pytest.raises(TimeoutError):
        requests.result("workers", admins.send)
    time.sleep(0.15)
    admins.answer = "answered"
    assert requests.result("workers", admins.send) == "answered"
    assert [len(sent) for sent in admins.made] == [1, 1]
