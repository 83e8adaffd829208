"""A successor that fences a transactional id while its owner's commit is under way."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from inferstream.testing import MemoryBroker


@contextmanager
def fenced_mid_commit(broker: MemoryBroker, transactional_id: str,
                      call: str = "send_offsets") -> Iterator[None]:
    """Inside the block, the owner's first `call` stalls until a successor has taken
    `transactional_id` (a new epoch), then goes on and finds itself fenced."""
    stall = threading.Event()
    fault = broker.inject(transactional_id, call, fail=None, stall=stall)

    def successor() -> None:
        fault.reached.wait(10)
        broker.fence(transactional_id)
        stall.set()

    thread = threading.Thread(target=successor)
    thread.start()
    try:
        yield
    finally:
        stall.set()
        thread.join()
