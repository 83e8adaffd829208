"""Errors about jobs: what a client or the controller finds wrong with one, and how one ended."""

import re
import reprlib

from inferstream.errors import InferstreamError

#: How an argument refused shows in its error: a few entries of a list, a long value cut in
#: its middle (a list of 100,000 paths with one wrong entry was shown whole, and a numpy
#: array in the inputs over many lines).
_SHORT = reprlib.Repr()  # its limits as keywords need Python 3.12
_SHORT.maxlevel, _SHORT.maxlong = 2, 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxdict = 5
_SHORT.maxstring = _SHORT.maxother = 160
_LINE_BREAKS = re.compile(r"\s*\n\s*")


def short_repr(value: object) -> str:
    """`repr(value)` on one line of bounded length, for an error's message."""
    return _LINE_BREAKS.sub(" ", _SHORT.repr(value))


class JobRejectedError(InferstreamError):
    """The controller rejected a job; `reason` says why."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id} rejected: {reason}")
        self.job_id = job_id
        self.reason = reason



class JobFailedError(InferstreamError):
    """A job failed after it was accepted; `reason` says why."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id} failed: {reason}")
        self.job_id = job_id
        self.reason = reason



class JobCancelledError(InferstreamError):
    """A job was cancelled before it completed; `done_items` of its `total_items` (None: not
    known yet) were done."""

    def __init__(self, job_id: str, done_items: int, total_items: int | None) -> None:
        total = "?" if total_items is None else str(total_items)
        super().__init__(f"job {job_id} cancelled after {done_items}/{total} items")
        self.job_id = job_id
        self.done_items = done_items
        self.total_items = total_items



class JobTimeoutError(InferstreamError):
    """Waiting for job `job_id` ran past its deadline, `timeout_s`; the job goes on, and was
    in `state` (a JobEventType's value, or SUBMITTED) with `done_items` done."""

    def __init__(self, job_id: str, timeout_s: float, state: str, done_items: int) -> None:
        super().__init__(f"job {job_id} not finished after {timeout_s:g} s ({state.lower()}); "
                         f"it goes on: follow it with `inferstream status {job_id}`")
        self.job_id = job_id
        self.timeout_s = timeout_s
        self.state = state
        self.done_items = done_items



class JobNotDeliveredError(InferstreamError):
    """The record of a job (`submit`) or of its cancel was not delivered: refused by the
    cluster (nothing was sent), or not acknowledged in time (it may still arrive); `job_id`,
    and `reason` from the producer."""

    def __init__(self, job_id: str, what: str, reason: str, refused: bool) -> None:
        then = "nothing was sent" if refused else \
            f"it may still arrive: `inferstream status {job_id}` tells"
        super().__init__(f"{what} of job {job_id} was not delivered ({reason}): {then}")
        self.job_id = job_id
        self.reason = reason



class InlineTooLargeError(InferstreamError):
    """An inline job does not fit in one Kafka message."""



class InputError(InferstreamError):
    """An input root of a job cannot be read at all: the controller rejects the job with this
    reason, and the client refuses an inline job whose file it cannot read."""



class UnknownJobError(InferstreamError):
    """No record of the job id: neither its submission nor any event of it."""

    def __init__(self, job_id: str, jobs_topic: str) -> None:
        super().__init__(f"no job {job_id} on topic {jobs_topic}: check the id and the "
                         "topic prefix (--topic-prefix or INFERSTREAM_TOPIC_PREFIX)")
        self.job_id = job_id



class JobNotAcceptedError(InferstreamError):
    """The job was submitted but no controller has accepted it yet, so it has no output."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} has not been accepted by a controller yet, so it has "
                         "no results: is `inferstream controller` running?")
        self.job_id = job_id



class InvalidJobError(InferstreamError):
    """A job cannot be submitted as asked; `option` names the offending argument, `value` is
    what was given. The message shows `shown` for it, by default its `short_repr`."""

    def __init__(self, option: str, value: object, rule: str, shown: str | None = None
                 ) -> None:
        super().__init__(f"{option} must be {rule}, got {shown or short_repr(value)}")
        self.option = option
        self.value = value
        self.rule = rule



class OutputFormatError(InferstreamError):
    """A job's outputs cannot be written in the format asked for (e.g. npz arrays of one
    width, from items of different widths)."""


class OutputPathError(InferstreamError):
    """A job's output cannot be written at the path given (a folder, or in a folder that is
    missing or not writable): said before the job's results are read."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class OutputIncompleteError(InferstreamError):
    """A completed job's results were not all read back in time: no output is written."""

    def __init__(self, job_id: str, missing: int, total: int, why: str = "") -> None:
        super().__init__(f"job {job_id} completed, but the results of {missing} of its {total} "
                         f"tasks were not read back in time{why}: no output written; "
                         f"`inferstream results {job_id} --output FILE` reads them again")
        self.job_id = job_id
        self.missing = missing


class ResultsDeletedError(InferstreamError):
    """A completed job's results are not all on the results topic any more: the broker
    deleted the records before the partition's log start (the topic's `retention.ms` or
    `retention.bytes`, or DeleteRecords), and no wait brings them back."""

    def __init__(self, job_id: str, missing: int, total: int, where: str, start: int) -> None:
        super().__init__(f"job {job_id} completed, but the results of {missing} of its {total} "
                         f"tasks are gone: {where} starts at offset {start}, the records "
                         "before it were deleted (the topic's retention.ms or retention.bytes); "
                         "no output written")
        self.job_id = job_id
        self.missing = missing
        self.start = start
