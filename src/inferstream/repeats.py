"""The client libraries' repeated complaints, one line in a while.

While a broker is away, aiokafka logs "Unable connect to node" and "Unable to update
metadata" and librdkafka "Connect to ... failed" at every attempt of every client: some 220
ERROR lines a second from one worker, 6,786 in 40 s, burying whatever else the log says.
`RepeatFilter` lets the first line of each kind through, then at most one of that kind every
`REPEAT_EVERY_S`, saying how many like it it stands for. A kind is the logger, the level and
the message with its numbers blanked (ports, node ids, counts and milliseconds differ from
line to line). inferstream's own lines are never held back: only the loggers of
`LIBRARY_LOGGERS`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

#: Seconds between two lines of one kind.
REPEAT_EVERY_S = 30.0
#: The loggers whose repeats are held back: the Kafka clients' and the sysinfo app's stack.
LIBRARY_LOGGERS = ("aiokafka", "inferstream.librdkafka", "faust", "mode")
#: Kinds remembered at most (a kind is forgotten once the table is full: its next line shows).
MAX_KINDS = 1024
#: Characters of a message that tell its kind.
KIND_CHARS = 160
_NUMBERS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """A handler's filter: each kind of library line once per `every_s`, with a count of the
    lines it stands for."""

    def __init__(self, every_s: float = REPEAT_EVERY_S,
                 loggers: tuple[str, ...] = LIBRARY_LOGGERS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s, self.loggers, self.clock = every_s, loggers, clock
        #: kind -> [when its last line went through, lines held back since]
        self._kinds: dict[tuple[str, int, str], list[float]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.loggers):
            return True
        kind = (record.name, record.levelno,
                _NUMBERS.sub("#", record.getMessage())[:KIND_CHARS])
        now = self.clock()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is not None and now - seen[0] < self.every_s:
                seen[1] += 1
                return False
            if len(self._kinds) >= MAX_KINDS:
                self._kinds.clear()
            self._kinds[kind] = [now, 0]
        if seen is not None and seen[1]:
            record.msg = (f"{record.getMessage()} ({seen[1]:.0f} more like it in the last "
                          f"{now - seen[0]:.0f} s)")
            record.args = None
        return True


def hold_back_repeats(logger: logging.Logger | None = None) -> None:
    """A `RepeatFilter` on each handler of `logger` (the root's by default) that has none."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            handler.addFilter(RepeatFilter())
