"""Bounded librdkafka calls: the one place that works around librdkafka calls that misbehave
while a coordinator's broker is away.

Two upstream bugs, both in the code that reaches a group or transaction coordinator
(rdkafka_coord.c), whose request waits for its coordinator with no timeout of its own:

* a call that hangs past its timeout (`send_offsets_to_transaction`): `call_with_deadline`;
* an admin request that aborts the process if it timed out before its coordinator came back,
  and an admin client that keeps asking a broker that is no longer the coordinator
  (`describe_consumer_groups`): `CoordinatorRequests`.

And one in destroying a client, which joins its broker threads, one of which may never end
once every broker was away: `let_go` destroys a replaced client on a thread of its own.

Drop each once the confluent-kafka we pin ships a librdkafka with its fix.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from confluent_kafka import KafkaError, KafkaException

from inferstream.kafka.errors import StuckCallError

T = TypeVar("T")

#: The longest timeout librdkafka takes for an admin request (AdminOptions request_timeout).
ADMIN_REQUEST_TIMEOUT_MAX_S = 3600.0
#: A coordinator's answer to a request sent to the wrong broker.
_NOT_THE_COORDINATOR = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE}


def call_with_deadline(call: Callable[..., T], *args: Any, deadline_s: float) -> T:
    """`call(*args)` on a helper thread; StuckCallError if it has not returned in `deadline_s`.

    For librdkafka calls that can block past their own timeout. Known case:
    `send_offsets_to_transaction` after the group coordinator's broker dies, in librdkafka up
    to at least 2.16.0 (https://github.com/confluentinc/librdkafka/issues/5456 and
    https://github.com/confluentinc/librdkafka/issues/5511, fix proposed in
    https://github.com/confluentinc/librdkafka/pull/5457). The chaos suite hit it as a
    controller that stopped for good after a broker kill -9.

    A call that is given up on keeps running on its daemon thread, which also keeps its
    client object alive; the caller must stop using that client (for a transactional
    producer: replace it, and the new one's init_transactions fences the old one). Giving up
    on the call does not touch librdkafka's request, so it cannot free anything twice.
    """
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call(*args))
        except BaseException as exc:  # re-raised on the caller's thread below
            failure.append(exc)

    name = getattr(call, "__name__", "call")
    thread = threading.Thread(target=run, name=f"deadline-{name}", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        raise StuckCallError(f"{name} did not return in {deadline_s:g}s")
    if failure:
        raise failure[0]
    return outcome[0]  # type: ignore[no-any-return]


class CoordinatorRequests(Generic[T]):
    """Admin requests to group coordinators, through an admin client of their own: one
    outstanding per key, never timed out by librdkafka, waited for here instead.

    librdkafka up to at least 2.16.0 aborts the whole process (`rd_kafka_enq_once_del_source_
    return: Assertion 'eonce->refcnt > 0' failed`) when an admin request aimed at a group
    coordinator (describe_consumer_groups, list_consumer_group_offsets, ...) times out
    before its coordinator can be reached and the coordinator is then found: the request to
    the coordinator, still queued, drops the admin request's last reference, and
    rd_kafka_coord_req_fsm then answers the freed request once more. A controller describing
    its workers' group while that group's coordinator broker was killed died 5-15 s later
    (https://github.com/confluentinc/librdkafka/issues/4605, fix proposed in
    https://github.com/confluentinc/librdkafka/pull/5397). So a request is given
    librdkafka's longest timeout, the caller who sent it waits `wait_s` for it, and while
    it is still out later callers are told at once (TimeoutError) rather than wait again.

    The admin client is replaced (the old one, destroyed, drops its requests without
    answering them: that path frees nothing twice) when a coordinator answers that it is
    not the coordinator, since librdkafka keeps a broker in its coordinator cache for as
    long as the entry is used (rdkafka_coord.c) and asks it again and again after the
    coordinator moved, and when a request has been out `renew_after_s`.
    """

    def __init__(self, new_admin: Callable[[], Any], wait_s: float,
                 renew_after_s: float = 60.0) -> None:
        self.new_admin = new_admin
        self.wait_s = wait_s
        self.renew_after_s = renew_after_s
        self._admin = new_admin()
        #: key -> the outstanding request and when it was sent (monotonic)
        self._outstanding: dict[str, tuple[Future[T], float]] = {}
        self._lock = threading.Lock()

    def result(self, key: str, send: Callable[[Any, float], Future[T]]) -> T:
        """The answer to the request that `send(admin, timeout_s)` makes for `key`;
        TimeoutError when it did not come in `wait_s`, or at once while an earlier
        request for `key` is still out. An answer that came after its caller gave up is
        dropped: the next caller asks again."""
        with self._lock:
            now = time.monotonic()
            if any(not f.done() and now - sent > self.renew_after_s
                   for f, sent in self._outstanding.values()):
                self._renew()
            outstanding = self._outstanding.get(key)
            if outstanding is not None and not outstanding[0].done():
                future, wait_s = outstanding[0], 0.0
            else:
                future, wait_s = send(self._admin, ADMIN_REQUEST_TIMEOUT_MAX_S), self.wait_s
                self._outstanding[key] = (future, now)
        try:
            return future.result(timeout=wait_s)
        except KafkaException as exc:
            if exc.args[0].code() in _NOT_THE_COORDINATOR:
                with self._lock:
                    self._renew()
            raise

    def _renew(self) -> None:
        self._outstanding.clear()
        let_go(self._admin)  # its destroy may never return (`let_go`)
        self._admin = self.new_admin()


#: How long `let_go` waits for the caller to drop its own references to a client.
LET_GO_WAIT_S = 60.0


def let_go(client: object) -> None:
    """Destroy `client`, a librdkafka client the caller is done with, on a daemon thread of
    its own, once the caller holds it no more.

    Destroying a client (rd_kafka_destroy, which confluent-kafka calls when the object is
    freed, the lock released) joins its threads, and a broker thread can stay stuck for good
    after every broker was away for a while (https://github.com/confluentinc/librdkafka/
    issues/4519, open in 2.16.0): a controller whose group describer replaced its admin
    client when the brokers came back after a 30 s outage blocked there for ever, alive to
    its supervisor and holding its partitions, and its job never completed (gdb:
    Admin_dealloc -> rd_kafka_destroy_app -> pthread_join of rdk:main, itself joining a
    rdk:broker thread). On a thread of its own a stuck destroy costs that thread and the
    client's memory. The thread waits until its reference is the last one (the caller may
    still be replacing the one it held), at most `LET_GO_WAIT_S`."""
    held = [client]
    del client
    threading.Thread(target=_destroy_when_last, args=(held,), name="let-go-client",
                     daemon=True).start()


def _destroy_when_last(held: list[object]) -> None:
    client = held.pop()
    deadline = time.monotonic() + LET_GO_WAIT_S
    pause = threading.Event()  # waited on, not time.sleep: a test may patch that module-wide
    # 2: this frame's name, and getrefcount's own argument
    while sys.getrefcount(client) > 2 and time.monotonic() < deadline:
        pause.wait(0.01)
    del client  # the destroy runs here, on this thread, where it was the last reference
