"""`call_with_deadline`: the bounded librdkafka call the controller makes (librdkafka#5456);
`CoordinatorRequests`: the admin requests that librdkafka must not time out (librdkafka#4605);
`let_go`: a client destroyed on a thread of its own (librdkafka#4519)."""

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
    let_go,
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


class StuckDestroy:
    """A client whose destroy blocks until `release` is set, as librdkafka's may for good
    after a broker outage (librdkafka#4519); it records the thread it was destroyed on."""

    def __init__(self, release: threading.Event, destroyed: list[str]) -> None:
        self.release, self.destroyed = release, destroyed
        self.answer: Future[str] = Future()

    def __del__(self) -> None:
        self.destroyed.append(threading.current_thread().name)
        self.release.wait(30)


def test_let_go_destroys_on_a_thread_of_its_own_once_the_caller_dropped_it() -> None:
    release, destroyed = threading.Event(), []
    client = StuckDestroy(release, destroyed)
    let_go(client)
    time.sleep(0.05)
    assert destroyed == []  # the caller still holds it: not destroyed under its feet
    started = time.monotonic()
    del client  # the caller's last reference: the destroy is the let-go thread's
    assert time.monotonic() - started < 1
    deadline = time.monotonic() + 5
    while not destroyed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert destroyed == ["let-go-client"]
    release.set()


def test_a_renewed_admin_whose_destroy_hangs_does_not_hold_the_caller() -> None:
    release, destroyed = threading.Event(), []
    made: list[StuckDestroy] = []

    def new_admin() -> StuckDestroy:
        made.append(StuckDestroy(release, destroyed))
        return made[-1]

    def send(admin: StuckDestroy, _timeout_s: float) -> Future[str]:
        return admin.answer

    requests: CoordinatorRequests[str] = CoordinatorRequests(new_admin, wait_s=1.0)
    made[0].answer.set_exception(KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)))
    made.clear()  # only the requests hold the first admin now
    with pytest.raises(KafkaException):
        requests.result("workers", send)  # renews: the first admin's destroy hangs
    made[0].answer.set_result("from the new coordinator")
    started = time.monotonic()
    assert requests.result("workers", send) == "from the new coordinator"
    assert time.monotonic() - started < 1
    deadline = time.monotonic() + 5
    while not destroyed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert destroyed == ["let-go-client"]  # under way, on its own thread, still hanging
    release.set()
