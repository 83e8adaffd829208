"""What `submit --wait` says while a job waits for a worker of its model (issue 26.3): the
controller's words at once, and again when the wait has shown no event for a while."""

from __future__ import annotations

import time

from inferstream.client.client import JobStatus
from inferstream.client.stalls import StallWatch

JOB = "20261202-100000-0000b00c"
STARTING = ("waiting for a worker of model 'efficientnet_lite0': lite-1 of pool 'default' is "
            "starting with it")


def progress(reason: str | None, done: int = 0) -> JobStatus:
    return JobStatus(job_id=JOB, state="PROGRESS", model="efficientnet_lite0",
                     done_items=done, reason=reason)


def watch(notices: list[str], live: int | None = 1) -> StallWatch:
    return StallWatch(JOB, "default", "efficientnet_lite0", lambda: live, notices.append,
                      quiet_s=0.01)


def test_what_the_job_waits_for_is_told_once_when_it_starts_and_again_when_it_stalls() -> None:
    notices: list[str] = []
    stalls = watch(notices)
    stalls.seen(progress(STARTING))
    stalls.seen(progress(STARTING))  # the same wait: told once
    assert notices == [f"job {JOB} is {STARTING}"]

    time.sleep(0.02)
    stalls.idle()
    assert notices[1].startswith(f"job {JOB} has made no progress for ")
    assert notices[1].endswith(f" s: {STARTING}")


def test_a_job_that_waits_no_more_is_quiet_about_it() -> None:
    notices: list[str] = []
    stalls = watch(notices)  # a live worker: nothing to say about the pool
    stalls.seen(progress(STARTING))
    stalls.seen(progress(None, done=2))
    time.sleep(0.02)
    stalls.idle()
    assert notices == [f"job {JOB} is {STARTING}"]


def test_a_job_no_controller_accepted_is_told_once_however_long_the_wait() -> None:
    notices: list[str] = []
    stalls = watch(notices)
    time.sleep(0.02)
    stalls.idle()
    time.sleep(0.02)
    stalls.idle()
    assert len(notices) == 1
    assert notices[0].startswith(f"no controller has accepted job {JOB} after ")
