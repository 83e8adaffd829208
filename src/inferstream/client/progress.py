"""A one-line progress bar for `submit --wait` (done/total, items/s, ETA) on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO

from inferstream.client.client import JobStatus

#: Seconds between two progress lines where stderr is no terminal (a log file, CI).
LOG_INTERVAL_S = 10.0


class ProgressBar:
    """Redraws one line per update on a terminal; `close()` ends the line. Elsewhere (stderr
    a file or a pipe: a log), a line of its own at each change of the job's state and at
    most every `LOG_INTERVAL_S` between, where redraws made one line of thousands."""

    def __init__(self, stream: IO[str] | None = None, width: int = 30,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.clock = clock
        self.started = clock()
        self.redraw = _is_terminal(self.stream)
        self._last: JobStatus | None = None
        #: the status last written as a line of its own, and when (no terminal)
        self._logged: tuple[JobStatus, float] | None = None

    def update(self, status: JobStatus) -> None:
        self._last = status
        if self.redraw:
            self.stream.write("\r" + self.render(status) + "\x1b[K")
        elif self._log_due(status):
            self._log(status)
        self.stream.flush()

    def notice(self, text: str) -> None:
        """A line of its own above the bar (a bar already drawn is redrawn below it)."""
        if not self.redraw:
            self.stream.write(text + "\n")
        else:
            self.stream.write("\r" + text + "\x1b[K\n")
            if self._last is not None:
                self.stream.write(self.render(self._last) + "\x1b[K")
        self.stream.flush()

    def _log_due(self, status: JobStatus) -> bool:
        if self._logged is None:
            return True
        last, at = self._logged
        return status.state != last.state or self.clock() - at >= LOG_INTERVAL_S

    def _log(self, status: JobStatus) -> None:
        self.stream.write(self.render(status) + "\n")
        self._logged = (status, self.clock())

    def render(self, status: JobStatus) -> str:
        done, total = status.done_items, status.total_items
        rate = status.rate_items_per_s or 0.0
        if total:
            filled = int(self.width * done / total)
            bar = "#" * filled + "." * (self.width - filled)
            eta = _clock((total - done) / rate) if rate > 0 else "?"
            return (f"{status.job_id} [{bar}] {done}/{total} {100 * done // total}% "
                    f"{rate:.1f} items/s ETA {eta} {status.state.lower()}")
        return f"{status.job_id} {done}/? {rate:.1f} items/s {status.state.lower()}"

    def close(self) -> None:
        if self._last is None:
            return
        if self.redraw:
            self.stream.write("\n")
        elif self._logged is None or self._logged[0] != self._last:
            self._log(self._last)  # the last status, where it was not written yet
        self.stream.flush()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
