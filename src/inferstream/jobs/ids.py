"""Job ids: they sort by submission time and tell readers where in a topic to start."""

from __future__ import annotations

import calendar
import secrets
import time


def new_job_id() -> str:
    """`YYYYmmdd-HHMMSS-<8 hex>`, the submission time in UTC."""
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"


def job_time_ms(job_id: str) -> int | None:
    """The submission time encoded in a job id from `new_job_id`, else None."""
    try:
        return calendar.timegm(time.strptime(job_id[:15], "%Y%m%d-%H%M%S")) * 1000
    except ValueError:
        return None
