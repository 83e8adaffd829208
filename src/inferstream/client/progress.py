"""A one-line progress bar for `submit --wait` (done/total, images/s, ETA) on stderr."""

from __future__ import annotations

import sys
import time
from typing import IO

from inferstream.client.client import JobStatus


class ProgressBar:
    """Redraws one line per update; `close()` ends the line."""

    def __init__(self, stream: IO[str] | None = None, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.started = time.monotonic()
        self._last: JobStatus | None = None

    def update(self, status: JobStatus) -> None:
        self.stream.write("\r" + self.render(status) + "\x1b[K")
        self.stream.flush()
        self._last = status

    def notice(self, text: str) -> None:
        """A line of its own above the bar (a bar already drawn is redrawn below it)."""
        self.stream.write("\r" + text + "\x1b[K\n")
        if self._last is not None:
            self.stream.write(self.render(self._last) + "\x1b[K")
        self.stream.flush()

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
        if self._last is not None:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
