"""The controller's ledger: what each job has issued and which tasks are done.

The ledger lives in memory as `JobState`s and in Kafka as `LedgerEntry` records on the
compacted `controller-ledger` topic, in the same partition as the job. Entries are written
in the controller's transactions together with the tasks, events and consumer offsets they
describe, so replaying the partition rebuilds exactly the state those offsets belong to.

A task has an entry once it is DONE (with its counts), or while it is ISSUED in the sense
of taken back and not yet issued again: a task of a lower-priority job that `sharing`
superseded on its worker's queue and holds to issue again (`attempts`: that next attempt).
Nothing else knows such a task is on no queue, so a replica that takes the job over issues
it when the job's turn comes instead of waiting out a queued task's deadline. The entry is
deleted when the task goes out again.

A job that ends (completed, cancelled) keeps only its JOB entry, which then carries its
final counts: its task entries are deleted (tombstones in the transaction of that entry,
which compaction drops with them), so a finished job costs the ledger, its standby copies
and the replica's memory the same whatever its size; `retain_finished_s` after it ended its
JOB entry goes too (`book`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inferstream.schemas import Codec
from inferstream.schemas.records import (
    Job,
    JobEvent,
    JobEventType,
    LedgerEntry,
    LedgerKind,
    LedgerStatus,
    model_ref,
    new_ledger_entry,
    now_ms,
    read_record,
)

if TYPE_CHECKING:
    from inferstream.controller.expansion import JobExpansion


@dataclass
class JobState:
    """One job owned by this controller."""

    job: Job
    partition: int
    status: LedgerStatus = LedgerStatus.ACTIVE
    accepted_at_ms: int = field(default_factory=now_ms)
    issued_tasks: int = 0
    issued_items: int = 0
    expanded: bool = False
    #: its items counted ahead of the cutting (`backlog`): its total until it is expanded;
    #: None until that count ends
    counted_items: int | None = None
    #: the tasks with a counted result, while the job is active (`end` releases it)
    done: set[int] = field(default_factory=set)
    done_tasks: int = 0
    ok_items: int = 0
    error_items: int = 0
    #: where cutting the job's input into tasks stands; the issuer's (`issuing.cursor`)
    expansion: JobExpansion | None = None
    last_event_ms: int = 0
    changed: bool = True
    #: the job record as encoded for the ledger, encoded once (inline jobs are large)
    job_bytes: bytes | None = None
    #: when the job's output file was written (ms); None until then, or without one
    output_written_at: int | None = None
    #: writing the output file failed here (logged); a later owner tries again
    output_failed: bool = False
    #: the highest attempt issued of any of its tasks (`issuing`); 0: not recorded by the
    #: controller that wrote its ledger entry
    max_attempt: int = 1
    #: the version of its repository model it runs on (`versions`); None: a built-in or
    #: simulated model, or not chosen yet
    model_version: int | None = None
    #: why the job cannot go on (its tasks cannot be written: `versions`, `issuing`); the
    #: round ends it FAILED with this reason (`book`)
    failure: str | None = None
    #: its tasks taken back for a job of a higher priority and not issued again since, each
    #: with the attempt it goes out as (an ISSUED task entry in the ledger each)
    held: dict[int, int] = field(default_factory=dict)
    #: its tasks failed out of attempts (`migration`), each with the attempt it was failed
    #: as: until that failure is read back, a decline of an attempt before it is superseded
    failed: dict[int, int] = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        return str(self.job["job_id"])

    @property
    def model(self) -> str:
        """The model and version its tasks ask for, as one reference (`model_ref`)."""
        return model_ref(self.job["model"], self.model_version)

    @property
    def done_items(self) -> int:
        return self.ok_items + self.error_items

    @property
    def total_items(self) -> int | None:
        """Its items: those issued once it is expanded, else those counted ahead (pacing
        issues its last task seconds before its end), else None while neither is known."""
        return self.issued_items if self.expanded else self.counted_items

    @property
    def output_due(self) -> bool:
        """Completed with an output path, and the file not written yet (as far as the
        ledger knows: a replica may have died between COMPLETED and the file)."""
        return (self.status == LedgerStatus.COMPLETED and bool(self.job.get("output_path"))
                and self.output_written_at is None)

    @property
    def complete(self) -> bool:
        return (self.status == LedgerStatus.ACTIVE and self.expanded
                and self.done_tasks == self.issued_tasks)

    def rate_items_per_s(self) -> float | None:
        """Items per second since acceptance; None until the first item is done."""
        if not self.done_items:
            return None
        elapsed = max(1e-3, (now_ms() - self.accepted_at_ms) / 1000)
        return self.done_items / elapsed

    def event(self, kind: JobEventType, reason: str | None = None) -> JobEvent:
        """A JobEvent of `kind` with the job's counts now; marks them as reported."""
        event = JobEvent(
            job_id=self.job_id, type=kind, timestamp=now_ms(), model=self.job["model"],
            model_version=self.model_version, reason=reason, total_items=self.total_items,
            total_tasks=self.issued_tasks if self.expanded else None,
            done_items=self.done_items, ok_items=self.ok_items, error_items=self.error_items,
            rate_items_per_s=self.rate_items_per_s(), home_partition=self.partition,
            priority=self.job["priority"], weight=self.job["weight"],
        )
        self.last_event_ms = event["timestamp"]
        self.changed = False
        return event

    def record_result(self, task_id: int, ok: int, errors: int) -> bool:
        """Count a task's first result; False for a task already done (a duplicate)."""
        if (self.status != LedgerStatus.ACTIVE or task_id in self.done
                or task_id >= self.issued_tasks):
            return False
        self.done.add(task_id)
        self.held.pop(task_id, None)  # its DONE entry takes the held one's key
        self.done_tasks += 1
        self.ok_items += ok
        self.error_items += errors
        self.changed = True
        return True

    def end(self, status: LedgerStatus) -> set[int]:
        """The job ends with `status` (nothing counts after it); returns the tasks with a
        ledger entry (done, or held), which it no longer keeps, nor its cutting cursor and
        inputs (an inline job's items: its ledger entry stays as long as the ledger)."""
        self.status = status
        done, self.done, self.expansion = self.done | set(self.held), set(), None
        self.held, self.failed = {}, {}
        if self.job["inputs"] or self.job["inline_items"]:
            self.job = Job(**{**self.job, "inputs": [], "inline_items": []})
            self.job_bytes = None
        return done


class LedgerCodec:
    """LedgerEntry records to and from JobState changes."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec

    def job_entry(self, state: JobState) -> tuple[bytes, bytes]:
        entry = new_ledger_entry(state.job_id, -1, LedgerKind.JOB, state.status)
        entry["job"] = self._job_bytes(state)
        entry["issued_tasks"], entry["issued_items"] = state.issued_tasks, state.issued_items
        entry["expanded"], entry["done_tasks"] = state.expanded, state.done_tasks
        entry["ok_items"], entry["error_items"] = state.ok_items, state.error_items
        entry["accepted_at"] = state.accepted_at_ms
        entry["output_written_at"] = state.output_written_at
        entry["max_attempt"] = state.max_attempt
        entry["model_version"] = state.model_version
        return state.job_id.encode(), self.codec.encode("LedgerEntry", entry)

    def _job_bytes(self, state: JobState) -> bytes:
        if state.job_bytes is None:
            state.job_bytes = self.codec.encode("Job", state.job)
        return state.job_bytes

    def task_entry(self, job_id: str, task_id: int, status: LedgerStatus, *, ok: int = 0,
                   errors: int = 0, worker: str | None = None,
                   attempt: int = 1) -> tuple[bytes, bytes]:
        """A task's entry; a DONE entry carries the task's own ok and error counts, from
        which a replay rebuilds the job's counts."""
        entry = new_ledger_entry(job_id, task_id, LedgerKind.TASK, status)
        entry["item_count"], entry["worker"], entry["attempts"] = ok + errors, worker, attempt
        entry["ok_items"], entry["error_items"] = ok, errors
        return _task_key(job_id, task_id), self.codec.encode("LedgerEntry", entry)

    @staticmethod
    def task_deletion(job_id: str, task_id: int) -> tuple[bytes, None]:
        """The deletion (a tombstone) of a task's entry."""
        return _task_key(job_id, task_id), None

    def final_entries(self, state: JobState,
                      done: set[int]) -> list[tuple[bytes, bytes | None]]:
        """What the ledger says of a job that ended (`JobState.end` gave `done`): a null
        value (a tombstone) for each of its task entries, then its JOB entry."""
        ended: list[tuple[bytes, bytes | None]] = [
            self.task_deletion(state.job_id, task_id) for task_id in sorted(done)]
        ended.append(self.job_entry(state))
        return ended

    def rebuild(self, records: list[tuple[bytes, int]]) -> dict[str, JobState]:
        """JobStates from replayed (value, partition) ledger records, in offset order.

        Compaction keeps only a job's latest JOB entry, which may come after the DONE
        entries of its early tasks, so done tasks are collected first and merged last. An
        ended job keeps its JOB entry's counts, with or without its task entries (deleted as
        it ends; a ledger written before they were still holds them).
        """
        states: dict[str, JobState] = {}
        done: dict[str, dict[int, tuple[int, int]]] = {}
        held: dict[str, dict[int, int]] = {}
        for value, partition in records:
            entry = read_record(self.codec, value, LedgerEntry)
            if entry["kind"] == LedgerKind.JOB:
                self._apply_job(states, entry, partition)
            elif entry["status"] == LedgerStatus.DONE:
                counts = (entry["ok_items"], entry["error_items"])
                done.setdefault(entry["job_id"], {})[entry["task_id"]] = counts
            elif entry["status"] == LedgerStatus.ISSUED:
                held.setdefault(entry["job_id"], {})[entry["task_id"]] = entry["attempts"]
        for job_id, state in states.items():
            if state.status != LedgerStatus.ACTIVE:
                continue
            # The counts come from the same entries as the set of done tasks: a JOB entry
            # is written less often than DONE entries, so its counts may be older.
            tasks = done.get(job_id, {})
            state.done = set(tasks)
            state.done_tasks = len(tasks)
            state.ok_items = sum(ok for ok, _ in tasks.values())
            state.error_items = sum(errors for _, errors in tasks.values())
            state.held = {task_id: attempt for task_id, attempt in held.get(job_id, {}).items()
                          if task_id not in tasks}
        return states

    def _apply_job(self, states: dict[str, JobState], entry: LedgerEntry,
                   partition: int) -> None:
        state = states.get(entry["job_id"])
        if state is None:
            job_bytes = entry["job"] or b""  # a JOB entry always carries its job
            job = read_record(self.codec, job_bytes, Job)
            state = states[entry["job_id"]] = JobState(job, partition, job_bytes=job_bytes)
        state.status = entry["status"]
        state.accepted_at_ms = entry["accepted_at"]
        state.issued_tasks = entry["issued_tasks"]
        state.issued_items = entry["issued_items"]
        state.expanded = entry["expanded"]
        state.done_tasks = entry["done_tasks"]
        state.ok_items, state.error_items = entry["ok_items"], entry["error_items"]
        state.output_written_at = entry["output_written_at"]
        state.max_attempt = entry["max_attempt"]
        state.model_version = entry["model_version"]
        state.last_event_ms = entry["updated_at"]
        state.changed = False


def _task_key(job_id: str, task_id: int) -> bytes:
    return f"{job_id}/{task_id}".encode()
