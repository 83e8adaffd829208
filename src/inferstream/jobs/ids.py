"""Job ids: they sort by submission time and tell readers where in a topic to start."""

from __future__ import annotations

import calendar
import re
import secrets
import time

from inferstream.jobs.errors import InvalidJobError

#: What a job id chosen by its submitter may be: it keys the job's records and shows in
#: log lines, `status` output and commands, so no space, newline or '/' (the ids
#: `new_job_id` makes are of this form).
JOB_ID_RULE = "1 to 128 letters, digits, '.', '_', ':' or '-'"
_JOB_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def new_job_id() -> str:
    """`YYYYmmdd-HHMMSS-<8 hex>`, the submission time in UTC."""
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"


def check_job_id(job_id: object) -> None:
    """InvalidJobError unless `job_id` is a str of `JOB_ID_RULE`."""
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise InvalidJobError("job_id", job_id, JOB_ID_RULE)


def job_time_ms(job_id: str) -> int | None:
    """The submission time encoded in a job id from `new_job_id`, else None."""
    try:
        return calendar.timegm(time.strptime(job_id[:15], "%Y%m%d-%H%M%S")) * 1000
    except ValueError:
        return None
