"""Bounded librdkafka calls: the one place that works around calls that ignore their timeout."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from inferstream.kafka.errors import StuckCallError

T = TypeVar("T")


def call_with_deadline(call: Callable[..., T], *args: Any, deadline_s: float) -> T:
    """`call(*args)` on a helper thread; StuckCallError if it has not returned in `deadline_s`.

    For librdkafka calls that can block past their own timeout. Known case:
    `send_offsets_to_transaction` after the group coordinator's broker dies, in librdkafka up
    to at least 2.16.0 (https://github.com/confluentinc/librdkafka/issues/5456 and
    https://github.com/confluentinc/librdkafka/issues/5511, fix proposed in
    https://github.com/confluentinc/librdkafka/pull/5457). The chaos suite hit it as a
    controller that stopped for good after a broker kill -9. Drop this wrapper once the
    confluent-kafka we pin ships a librdkafka with that fix.

    A call that is given up on keeps running on its daemon thread, which also keeps its
    client object alive; the caller must stop using that client (for a transactional
    producer: replace it, and the new one's init_transactions fences the old one).
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
