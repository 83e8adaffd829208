"""`submit --wait`'s progress: one redrawn line on a terminal; in a log (stderr a file or a
pipe) a line of its own at each change of state and at most every `LOG_INTERVAL_S` between,
never the carriage returns and erase codes that made a log one line of thousands."""

from __future__ import annotations

import io

from inferstream.client.client import JobStatus
from inferstream.client.progress import LOG_INTERVAL_S, ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def status(state: str, done: int) -> JobStatus:
    return JobStatus("j", state, total_items=100, done_items=done, rate_items_per_s=10.0)


def test_in_a_log_each_state_and_every_interval_is_a_line_of_its_own() -> None:
    log, clock = io.StringIO(), Clock()
    bar = ProgressBar(log, width=10, clock=clock)
    bar.update(status("ACCEPTED", 0))
    for done in range(1, 40):
        clock.now += 0.5  # 19.5 s of updates: two intervals' lines
        bar.update(status("PROGRESS", done))
    bar.notice("a worker is starting")
    bar.update(status("COMPLETED", 100))
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()
    assert LOG_INTERVAL_S == 10.0  # so: the first progress line at 0.5 s, the next at 10.5 s
    assert [line.rsplit(" ", 1)[-1] for line in lines] == [
        "accepted", "progress", "progress", "starting", "completed"]
    assert lines[3] == "a worker is starting"


def test_the_last_status_is_written_at_the_close_where_it_was_not() -> None:
    log, clock = io.StringIO(), Clock()
    bar = ProgressBar(log, clock=clock)
    bar.update(status("PROGRESS", 10))
    clock.now += 1
    bar.update(status("PROGRESS", 20))  # within the interval: not yet a line
    bar.close()
    assert [line.split()[2] for line in log.getvalue().splitlines()] == ["10/100", "20/100"]


def test_on_a_terminal_the_line_is_redrawn() -> None:
    screen = Terminal()
    bar = ProgressBar(screen, clock=Clock())
    bar.update(status("PROGRESS", 10))
    bar.update(status("PROGRESS", 20))
    bar.close()
    assert screen.getvalue().count("\r") == 2 and screen.getvalue().endswith("\x1b[K\n")
