"""A client's stop at shutdown (`kafka.stopping`): its own failures come back as values for
the caller to log, within the bound; the caller's own cancellation is still a cancellation."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError

from inferstream.kafka.stopping import stop_client


async def ends_cancelled() -> None:
    """What aiokafka's consumer stop does with a fetch in its retry back-off (aiokafka#647)."""
    raise asyncio.CancelledError


async def never_answers() -> None:
    await asyncio.Event().wait()


async def refused() -> None:
    raise KafkaConnectionError("Connection at 127.0.0.1:9092 closed")


@pytest.mark.parametrize(("stop", "ended"), [(ends_cancelled, asyncio.CancelledError),
                                             (never_answers, TimeoutError),
                                             (refused, KafkaConnectionError)])
def test_a_stop_that_fails_or_hangs_is_returned_not_raised(stop: object,
                                                           ended: type[BaseException]) -> None:
    error = asyncio.run(stop_client(stop(), 0.1))  # type: ignore[operator]
    assert isinstance(error, ended)


def test_a_stop_that_stops_returns_none() -> None:
    assert asyncio.run(stop_client(asyncio.sleep(0), 1.0)) is None


def test_cancelling_the_caller_cancels_it_and_its_stop() -> None:
    async def cancelled_while_stopping() -> asyncio.Task[None]:
        stop = asyncio.ensure_future(never_answers())
        caller = asyncio.ensure_future(stop_client(stop, 30))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0)
        return stop

    assert asyncio.run(cancelled_while_stopping()).cancelled()


def test_a_bug_in_a_stop_is_not_taken_for_the_cluster() -> None:
    async def broken() -> None:
        raise AttributeError("no _fetcher")

    with pytest.raises(AttributeError):
        asyncio.run(stop_client(broken(), 1.0))
