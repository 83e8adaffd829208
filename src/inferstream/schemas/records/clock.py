"""The unit of every timestamp field: milliseconds since the Unix epoch."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the Unix epoch, now."""
    return int(time.time() * 1000)
