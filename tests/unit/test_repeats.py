"""The client libraries' repeated lines (a broker away) held back: the first of each kind
through, then one of that kind a window with the count it stands for; inferstream's own
lines never."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from inferstream.repeats import RepeatFilter, hold_back_repeats


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO, Clock]]:
    """A handler with a RepeatFilter of a 30 s window on a clock the test moves."""
    out, clock = io.StringIO(), Clock()
    handler = logging.StreamHandler(out)
    handler.addFilter(RepeatFilter(30.0, clock=clock))
    root = logging.getLogger("test-repeats")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False
    yield root, out, clock
    root.removeHandler(handler)


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_a_librarys_repeats_show_once_a_window_with_their_count(
        logged: tuple[logging.Logger, io.StringIO, Clock]) -> None:
    root, out, clock = logged
    aiokafka = logging.getLogger("test-repeats.aiokafka.conn")
    filtered = RepeatFilter(30.0, loggers=("test-repeats.aiokafka",), clock=clock)
    root.handlers[0].filters[:] = [filtered]
    for attempt in range(220):  # a second of a broker away: node ids and ports differ
        clock.now = attempt / 220
        aiokafka.error("Unable connect to node with id %d: [Errno 111] port %d", attempt % 3,
                       9092 + attempt)
    assert lines(out) == ["Unable connect to node with id 0: [Errno 111] port 9092"]
    clock.now = 30.5
    aiokafka.error("Unable connect to node with id %d: [Errno 111] port %d", 1, 9093)
    assert lines(out)[1] == ("Unable connect to node with id 1: [Errno 111] port 9093 "
                             "(219 more like it in the last 30 s)")
    clock.now = 61.0
    aiokafka.error("Unable connect to node with id %d: [Errno 111] port %d", 1, 9093)
    assert lines(out)[2] == "Unable connect to node with id 1: [Errno 111] port 9093"


def test_other_kinds_and_inferstreams_own_lines_go_through(
        logged: tuple[logging.Logger, io.StringIO, Clock]) -> None:
    root, out, clock = logged
    root.handlers[0].filters[:] = [RepeatFilter(30.0, loggers=("test-repeats.lib",),
                                                clock=clock)]
    library, own = logging.getLogger("test-repeats.lib"), logging.getLogger("test-repeats.own")
    for _ in range(3):
        library.error("Connect to broker failed")
        library.warning("Connect to broker failed")  # another level: another kind
        library.error("Unable to update metadata")
        own.warning("fetch failed: %r", "the same")
    assert lines(out) == ["Connect to broker failed", "Connect to broker failed",
                          "Unable to update metadata", *["fetch failed: 'the same'"] * 3]


def test_the_root_handlers_get_one_filter_each() -> None:
    logger = logging.getLogger("test-repeats-root")
    handler = logging.StreamHandler(io.StringIO())
    logger.addHandler(handler)
    try:
        hold_back_repeats(logger)
        hold_back_repeats(logger)
        assert [type(f) for f in handler.filters] == [RepeatFilter]
    finally:
        logger.removeHandler(handler)
