"""An at-least-once commit sends a result's pieces, and has them acknowledged, before the
TaskResult that names them: with no transaction, a TaskResult delivered beside a piece that
failed would be counted by the controller and never made whole by its readers."""

from __future__ import annotations

import asyncio
from typing import Any

from inferstream.kafka.clients import Outgoing
from inferstream.serving.committers.at_least_once import AtLeastOnceCommitter


class HeldSends:
    """A producer whose sends are acknowledged only when the test says so."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.acks: dict[bytes, asyncio.Future[None]] = {}

    async def send(self, topic: str, value: bytes, **_: Any) -> asyncio.Future[None]:
        self.sent.append(value)
        self.acks[value] = asyncio.get_running_loop().create_future()
        return self.acks[value]


def test_the_pieces_are_acknowledged_before_their_taskresult_is_sent() -> None:
    async def scenario() -> list[list[bytes]]:
        producer = HeldSends()
        committer: Any = AtLeastOnceCommitter.__new__(AtLeastOnceCommitter)
        committer._shared = producer
        records = [Outgoing("t.results", 3, b"j", b"piece-0", first=True),
                   Outgoing("t.results", 3, b"j", b"piece-1", first=True),
                   Outgoing("t.results", 3, b"j", b"result"),
                   Outgoing("t.results", 3, b"j", b"another task's result")]
        sending = asyncio.ensure_future(committer._send(records))
        seen = []
        for _ in range(5):
            await asyncio.sleep(0)
        seen.append(list(producer.sent))
        for value in (b"piece-0", b"piece-1"):
            producer.acks[value].set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)
        seen.append(list(producer.sent))
        for value in (b"result", b"another task's result"):
            producer.acks[value].set_result(None)
        await asyncio.wait_for(sending, 5)
        return seen

    before, after = asyncio.run(scenario())
    assert before == [b"piece-0", b"piece-1"]
    assert after == [b"piece-0", b"piece-1", b"result", b"another task's result"]
