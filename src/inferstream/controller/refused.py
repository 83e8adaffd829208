"""Jobs whose records the cluster refuses for good, whatever the attempt.

A record over its topic's `max.message.bytes` (a job's ledger entry carries its whole record,
inline images and all; a task its items) or one the broker holds invalid fails every attempt
of the transaction that holds it. The replica rolled its partition back to the last commit and
redid the round, which wrote the same record again: the partition's transactions rolled back
twice a second for ever, and no other job of the partition moved. Such a record
(`transactions.TransactionRecords` notes them) is about one job, the one its key names (a
job's records are keyed by its id, or by `<job id>/<task id>`): it is remembered here across
the rollback, so that the round redone ends that job with the reason (rejected where it was
being accepted, else failed, `book`) and the others go on. A dead letter has no job: one
refused lowers the size past which the dead letters' records go without the unreadable
record's value (`outbox`).
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable

from inferstream.controller.ledger import JobState
from inferstream.controller.outbox import ControllerTopics
from inferstream.kafka.clients import Outgoing
from inferstream.kafka.limits import RECORD_HEADROOM, record_bytes, size_text
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES
from inferstream.schemas.records import LedgerStatus

log = logging.getLogger(__name__)

#: A record the cluster refused, with the name of the error it was refused with.
Refused = tuple[Outgoing, str]


class RefusedJobs:
    """The jobs whose records were refused, each with the reason, kept `keep_ms` (a job
    ends in the round redone after the refusal, rejected where it was being accepted, else
    failed; a replica that takes it over meanwhile learns it from its own refusal)."""

    def __init__(self, topics: ControllerTopics, keep_ms: int) -> None:
        self.topics = topics
        self.keep_ms = keep_ms
        #: job id -> (why it ends, when its record was refused in ms)
        self._jobs: dict[str, tuple[str, int]] = {}
        #: the most bytes a dead letter's record may take, as far as this replica knows
        self.letter_bytes = LARGE_MESSAGE_BYTES - RECORD_HEADROOM

    def note(self, refused: list[Refused], jobs: Container[str], now: int) -> None:
        """The records `refused` in a transaction about to be rolled back, at `now` (ms):
        each job of `jobs` (those the replica holds) whose record one was is remembered."""
        for record, error in refused:
            size = record_bytes(record)
            if record.topic == self.topics.dlq:
                self.letter_bytes = min(self.letter_bytes, size - 1)
                log.warning("a dead letter of %s was refused (%s): those of that size or "
                            "more go without the unreadable record's value", size_text(size),
                            error)
                continue
            job_id = _job_of(record.key, jobs)
            if job_id is None:
                log.warning("a record of %s on %s was refused (%s), of no job this replica "
                            "holds", size_text(size), record.topic, error)
            elif job_id not in self._jobs:
                reason = self._reason(record, size, error)
                self._jobs[job_id] = (reason, now)
                log.warning("job %s: %s: it ends", job_id, reason)

    def reason(self, job_id: str) -> str | None:
        """Why the job ends, if a record of it was refused."""
        refused = self._jobs.get(job_id)
        return None if refused is None else refused[0]

    def failing(self, states: Iterable[JobState], now: int) -> list[JobState]:
        """The active jobs of `states` whose records were refused, their `failure` the
        reason, to end now, before anything more of them is written (a job taken over from
        the ledger); the others refused more than `keep_ms` before `now` (ms) forgotten. A
        job still active is never forgotten: its record would be refused again, and the
        partition rolled back for ever, where `keep_ms` (`retain_finished_s`) is shorter
        than the rollback and the round redone."""
        ending = [state for state in states if state.status == LedgerStatus.ACTIVE
                  and state.job_id in self._jobs]
        active = {state.job_id for state in ending}
        for job_id in [j for j, (_, at) in self._jobs.items()
                       if now - at > self.keep_ms and j not in active]:
            del self._jobs[job_id]
        for state in ending:
            state.failure = self._jobs[state.job_id][0]
            log.info("job %s failed: %s", state.job_id, state.failure)
        return ending

    def _reason(self, record: Outgoing, size: int, error: str) -> str:
        topics = self.topics
        what = {topics.ledger: "ledger entry", topics.events: "event",
                topics.results: "failed result", topics.controls: "task control"}.get(
                    record.topic, "task")
        if error == "MSG_SIZE_TOO_LARGE":
            return (f"its {what} ({size_text(size)}) is larger than a record of topic "
                    f"{record.topic} may be ({error}: raise the topic's max.message.bytes, "
                    "which `inferstream topics describe` shows, or send less inline)")
        return f"the cluster refuses its {what} on topic {record.topic} ({error})"


def _job_of(key: bytes | None, jobs: Container[str]) -> str | None:
    """The job of `jobs` a record keyed `key` is about: its id, or `<id>/<task id>`."""
    text = (key or b"").decode("utf-8", "replace")
    for candidate in (text, text.rpartition("/")[0]):
        if candidate and candidate in jobs:
            return candidate
    return None
