"""The job book: every decision the controller takes about the jobs of its partitions.

Fed decoded records (jobs, cancels, results, declines) and the time, it writes what follows
from them into a round's `Outbox` (tasks, task controls, events, ledger entries, failed
results) and keeps each job's `JobState` and the tasks held for a model that no live worker
serves yet (`waiting`). It holds no Kafka client and starts no thread: the
replica (`replica`) consumes, hands the records here, and commits each home partition's
share of the outbox with the offsets it consumed.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Container

from inferstream.config import Config
from inferstream.controller.admission import rejection_reason
from inferstream.controller.backlog import Backlog
from inferstream.controller.deadlines import Deadlines
from inferstream.controller.declines import PoolView
from inferstream.controller.hooks import JobProgress, RoundState
from inferstream.controller.issuing import TaskIssuer, cursor
from inferstream.controller.ledger import JobState, LedgerCodec
from inferstream.controller.migration import Migration
from inferstream.controller.outbox import ControllerTopics, Outbox
from inferstream.controller.pacing import AHEAD_LARGEST_TASKS, Pacing
from inferstream.controller.refused import RefusedJobs
from inferstream.controller.sizing import choose_task_size, sized
from inferstream.controller.versions import NO_VERSIONS, JobVersions, ServedVersions
from inferstream.controller.waiting import NOBODY_STARTING, ModelWaits, Starting
from inferstream.policy.view import PolicyView
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    Job,
    JobEvent,
    JobEventType,
    LedgerStatus,
    ResultSummary,
    Task,
    TaskControl,
    TaskControlReason,
    TaskDeclined,
    model_ref,
    now_ms,
    read_record,
    task_ref,
)

log = logging.getLogger(__name__)


class JobBook:
    """The jobs of the partitions this replica owns, and what happens to them.

    `describe(group)` gives a consumer group's members and the task partitions each owns
    (or raises); `partitions(topic)` a topic's partition count (KafkaSetupError for a
    topic that does not exist), `grown(topic, count)` is told that a worker owns partition
    `count - 1` of a task topic of fewer; `policy` is read for task sizes, model ranges and the
    workers' speeds and health; `starting` names the workers that announce they are starting
    with a model (see `waiting`), `versions` the versions of a model each announces it serves
    (see `versions`)."""

    def __init__(self, config: Config, *, codec: Codec, policy: PolicyView,
                 describe: Callable[[str], dict[str, list[int]]],
                 partitions: Callable[[str], int],
                 grown: Callable[[str, int], None] = lambda topic, count: None,
                 starting: Starting = NOBODY_STARTING,
                 versions: ServedVersions = NO_VERSIONS) -> None:
        self.config = config
        self.options = options = config.controller
        self.codec = codec
        self.policy = policy
        self.partitions = partitions
        self.topics = ControllerTopics.of(config)
        self.ledger = LedgerCodec(codec)
        self.jobs: dict[str, JobState] = {}
        #: ended jobs past `retain_finished_s` whose JOB entry the next round deletes
        self._expired: dict[str, int] = {}
        self.pools = PoolView(describe)
        self.deadlines = Deadlines(self.pools, policy, config.worker_group,
                                   options.migration_slack, options.migration_floor_s,
                                   options.max_attempts,
                                   speculation_floor_s=options.speculation_floor_s,
                                   speculation_cap=options.speculation_cap)
        pacing = Pacing(self.deadlines, self.pools, policy, options.issue_ahead_s,
                        AHEAD_LARGEST_TASKS * options.max_chunk_size)
        self.issuer = TaskIssuer(config, codec, policy, self.deadlines, pacing, partitions,
                                 grown)
        self.versions = JobVersions(config, self.pools, versions)
        self.waits = ModelWaits(config, codec, self.pools, starting, self.issuer, partitions,
                                self.versions)
        self.migration = Migration(config, codec, self.issuer, self.waits)
        self.backlog = Backlog(config, policy, self.deadlines, partitions)
        self.refused = RefusedJobs(self.topics, int(options.retain_finished_s * 1000))

    def outbox(self) -> Outbox:
        """An empty outbox for one round."""
        return Outbox(self.topics, self.codec, self.partitions, self.refused.letter_bytes)

    # -- records ----------------------------------------------------------------------------
    def on_job(self, job: Job, partition: int, out: Outbox) -> None:
        """A job arrived on `partition` (its home): accepted with its first tasks, or
        rejected with the reason (its version among them, `versions`); seen before, ignored."""
        if job["job_id"] in self.jobs:
            log.info("job %s seen again: ignored", job["job_id"])
            return
        size = choose_task_size(job, self.policy, self.options.default_chunk_size,
                                self.options.max_chunk_size)
        state = JobState(sized(job, size), partition)
        self.jobs[state.job_id] = state
        reason = (rejection_reason(job, self.partitions, self.config.task_topic(job["pool"]))
                  or self.refused.reason(state.job_id))
        if reason is None and cursor(state).finished:
            reason = cursor(state).error or "empty input: the job names no items"
        versioned = reason is None and self.versions.choose(state)
        reason = reason or state.failure
        if reason is not None:
            state.end(LedgerStatus.REJECTED)  # its entry without its inputs
            out.event(state.event(JobEventType.REJECTED, reason), partition)
            out.ledger(*self.ledger.job_entry(state), partition)
            log.info("job %s rejected: %s", state.job_id, reason)
            return
        out.event(state.event(JobEventType.ACCEPTED), partition)
        out.count(partition, ("jobs_accepted",))
        if versioned:
            self.issuer.first(state, out)
        else:
            self._hold(state, out, now_ms())
        log.info("job %s accepted model=%s task_size=%d (%s)", state.job_id, state.model,
                 size.items, size)

    def on_unreadable_job(self, key: bytes | None, partition: int, reason: str,
                          out: Outbox) -> None:
        """A job record that cannot be read, keyed by what looks like a job id: tell whoever
        waits for that job, with a REJECTED event, instead of leaving it SUBMITTED forever."""
        job_id = _job_id_of(key)
        if job_id is None or job_id in self.jobs:
            return
        out.event(_unreadable(job_id, partition, reason), partition)
        log.info("job %s rejected: its record could not be read (%s)", job_id, reason)

    def on_cancel(self, control: TaskControl, partition: int, out: Outbox) -> None:
        """`inferstream cancel`: the job ends CANCELLED with what was done; workers skip
        the rest of its tasks. A job that is not active here (finished, or unknown) stays
        as it is."""
        state = self.jobs.get(control["job_id"])
        if control["reason"] != TaskControlReason.CANCELLED or control["task_id"] >= 0:
            log.warning("unexpected control record on %s: %s", self.topics.jobs, control)
            return
        if state is None or state.status != LedgerStatus.ACTIVE:
            log.info("cancel of job %s ignored: %s", control["job_id"],
                     "not active" if state else "not a job of this replica's partitions")
            return
        self._end(state, LedgerStatus.CANCELLED, out)
        log.info("job %s cancelled at %d/%s items", state.job_id, state.done_items,
                 state.total_items if state.total_items is not None else "?")

    def on_result(self, result: ResultSummary, out: Outbox) -> None:
        """A task's result: the first of each task counts, later ones are dropped."""
        version = result["model_version"]
        answered = model_ref(result["model"],
                             int(version) if version and version.isdecimal() else None)
        ok, errors = result["ok_count"], result["error_count"]
        self.pools.record_result(result["worker"], answered)
        self.deadlines.observe(result["worker"], answered, ok + errors,
                               result["inference_seconds"])
        state = self.jobs.get(result["job_id"])
        if state is None:
            return  # a job of another replica's partition, or long finished
        if not state.record_result(result["task_id"], ok, errors):
            out.count(state.partition, ("late_results_dropped",))
            why = ("duplicate result" if state.status == LedgerStatus.ACTIVE else
                   f"result after the job was {state.status.value.lower()}")
            log.info("%s dropped job=%s task=%d attempt=%d worker=%s", why, state.job_id,
                     result["task_id"], result["attempt"], result["worker"])
            return
        self.deadlines.done(state.job_id, result["task_id"])
        out.count(state.partition, ("tasks_done", state.job["pool"]))
        out.count(state.partition, ("items_done", "ok"), ok)
        out.count(state.partition, ("items_done", "error"), errors)
        key, value = self.ledger.task_entry(
            state.job_id, result["task_id"], LedgerStatus.DONE, ok=ok, errors=errors,
            worker=result["worker"], attempt=result["attempt"])
        out.ledger(key, value, state.partition)

    def on_declined(self, declined: TaskDeclined, out: Outbox) -> None:
        """A worker declined a task of a model it does not serve: the task again on a
        worker that may serve it; held while none may but one may come (see `waiting`);
        else its items failed (see `declines`)."""
        state = self.jobs.get(declined["job_id"])
        if (state is None or state.status != LedgerStatus.ACTIVE
                or declined["task_id"] in state.done or self.refused.reason(state.job_id)):
            return
        task = read_record(self.codec, declined["task"], Task)
        self.pools.record_decline(declined["worker"], task_ref(task), declined["served_models"])
        if self.waits.holds(state.job_id, declined["task_id"]):
            return  # an earlier attempt's: the one held goes out when a worker may serve it
        current = (self.deadlines.attempt(state.job_id, declined["task_id"])
                   or state.failed.get(declined["task_id"]))
        if (current is not None and declined["attempt"] < current) or (
                declined["task_id"] in state.held):
            return  # superseded (a worker that had not read its control): a later one is out
        self.waits.place(state, task, out, now_ms(), kind="declined",
                         why=f"declined by {declined['worker']}")

    # -- the round --------------------------------------------------------------------------
    def tick(self, out: Outbox, now: int) -> None:
        """What a round decides beyond its records, at `now` (ms): more tasks of the jobs
        not fully issued (but waiting for a worker of their model), held tasks issued again
        or failed, late tasks moved, progress and completion events; a job whose tasks
        cannot be written (its `failure`) ends FAILED with the reason."""
        for state in self.refused.failing(self.jobs.values(), now):
            self._end(state, LedgerStatus.FAILED, out)  # before more of it is written
        self.waits.release(out, now, self.jobs)
        more = [state for state in self.jobs.values()
                if state.status == LedgerStatus.ACTIVE
                and (not state.expanded or self.issuer.taken.holds(state.job_id))
                and not self.waits.waiting(state.job_id)]
        versioned: list[JobState] = []
        unversioned: list[JobState] = []
        for state in more:
            if self.versions.choose(state):
                versioned.append(state)
            elif state.failure is None:  # one that failed ends below
                unversioned.append(state)
        self.issuer.more(versioned, self.jobs, out, now)
        for state in unversioned:
            self._hold(state, out, now)
        self.migration.migrate(out, now, self.jobs)
        self.deadlines.forget_gone(now)
        self._emit_events(out, now)
        self._expire(out, now)

    def _hold(self, state: JobState, out: Outbox, now: int) -> None:
        """The next tasks of a job whose model's version cannot be chosen yet (no live
        worker of the model is known): held until one is (see `waiting`)."""
        for task in self.issuer.unplaced(state, out):
            self.waits.place(state, task, out, now, why="its model's version chosen",
                             kind="declined")

    def _emit_events(self, out: Outbox, now: int) -> None:
        interval_ms = self.options.progress_interval_s * 1000
        for state in self.jobs.values():
            if state.failure is None and state.expansion is not None:
                state.failure = state.expansion.error  # its input could not be read
            if state.failure is not None and state.status == LedgerStatus.ACTIVE:
                self._end(state, LedgerStatus.FAILED, out)
                log.info("job %s failed: %s", state.job_id, state.failure)
            elif state.complete:
                self._complete(state, out)
            elif state.status == LedgerStatus.ACTIVE and state.changed and (
                    now - state.last_event_ms >= interval_ms):
                out.event(state.event(JobEventType.PROGRESS, self.waits.reason(state.job_id)),
                          state.partition)
                out.ledger(*self.ledger.job_entry(state), state.partition)

    def _complete(self, state: JobState, out: Outbox) -> None:
        self._end(state, LedgerStatus.COMPLETED, out)
        log.info("job %s completed ok=%d error=%d", state.job_id, state.ok_items,
                 state.error_items)

    def _end(self, state: JobState, status: LedgerStatus, out: Outbox) -> None:
        """The job ends with `status`: its event, workers told to skip the rest of its
        tasks, what it keeps dropped, its task entries deleted from the ledger with the
        JOB entry that carries its final counts (`LedgerCodec.final_entries`)."""
        kind, reason, control = _ENDINGS[status]
        reason = state.failure if status == LedgerStatus.FAILED else reason
        done = state.end(status)
        out.event(state.event(kind, reason), state.partition)
        out.control(state.partition, state.job_id, -1, 0, control)
        for key, value in self.ledger.final_entries(state, done):
            out.ledger(key, value, state.partition)
        self.deadlines.forget_job(state.job_id)
        self.waits.forget([state.job_id])
        self.issuer.forget([state.job_id])

    # -- output files -----------------------------------------------------------------------
    def outputs_due(self, homes: Container[int]) -> list[JobState]:
        """The completed jobs of `homes` whose output file is to be written (not yet
        written, nor failed here)."""
        return [state for state in self.jobs.values()
                if state.output_due and not state.output_failed and state.partition in homes]

    def output_written(self, job_id: str, at_ms: int | None, out: Outbox) -> None:
        """A job's output file was written at `at_ms` (None: writing it failed here, a
        later owner tries again): the ledger records it."""
        state = self.jobs.get(job_id)
        if state is None or state.output_written_at is not None:
            return
        if at_ms is None:
            state.output_failed = True
        else:
            state.output_written_at = at_ms
            out.ledger(*self.ledger.job_entry(state), state.partition)

    # -- what the book holds ----------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """A job is active, or has an output file still to write."""
        return any(state.status == LedgerStatus.ACTIVE or (
            state.output_due and not state.output_failed) for state in self.jobs.values())

    def round_state(self, owned_partitions: int, standby_entries: int = 0) -> RoundState:
        by_state = Counter(str(state.status) for state in self.jobs.values())
        active = [JobProgress(state.job_id, state.done_items, state.total_items)
                  for state in self.jobs.values() if state.status == LedgerStatus.ACTIVE]
        return RoundState(dict(by_state), owned_partitions, active,
                          self.backlog.figures(self.jobs.values()), standby_entries)

    def adopt(self, records: list[tuple[bytes, int]], now: int) -> None:
        """The jobs of some partitions from their ledger records (value, partition), in
        offset order: the active ones, whose outstanding tasks get deadlines (see
        `issuing`), and those that ended within `retain_finished_s` of `now` (ms), a
        completed one's output file written by the next rounds where the ledger does not
        show it written; the JOB entries of those that ended before go (`_expire`)."""
        recent = now - self.options.retain_finished_s * 1000
        for job_id, state in self.ledger.rebuild(records).items():
            if state.status == LedgerStatus.ACTIVE:
                self.jobs[job_id] = state
                self.issuer.adopt(state, now)
            elif state.last_event_ms >= recent:
                self.jobs[job_id] = state
            else:
                self._expired[job_id] = state.partition

    def forget(self, homes: set[int]) -> None:
        """Drop the jobs of `homes` (partitions no longer owned, or to be rebuilt)."""
        gone = [j for j, s in self.jobs.items() if s.partition in homes]
        for job_id in gone:
            del self.jobs[job_id]
        self._expired = {j: home for j, home in self._expired.items() if home not in homes}
        self.deadlines.forget_homes(homes)
        self.waits.forget(gone)
        self.issuer.forget(gone)

    def _expire(self, out: Outbox, now: int) -> None:
        """The jobs that ended more than `retain_finished_s` before `now` (ms), their output
        file written (or failed here), leave memory and the ledger: their JOB entries are
        deleted (tombstones), so that neither a replica's memory nor its standby copy of
        the ledger, nor a replay, grows with every job ever run (2.4 KB of a replica's
        memory a job, one tester measured). Nothing reads them after that long: a job id
        seen again then runs again, and a takeover writes only recent output files."""
        horizon = now - self.options.retain_finished_s * 1000
        for job_id in [j for j, s in self.jobs.items()
                       if s.status != LedgerStatus.ACTIVE
                       and not (s.output_due and not s.output_failed)
                       and s.last_event_ms < horizon]:
            self._expired[job_id] = self.jobs.pop(job_id).partition
        for job_id, home in self._expired.items():
            out.ledger(job_id.encode(), None, home)
        self._expired.clear()


#: how a job ends: its event type and reason, and what workers are told of its tasks
_ENDINGS = {
    LedgerStatus.COMPLETED: (JobEventType.COMPLETED, None, TaskControlReason.FINISHED),
    LedgerStatus.CANCELLED: (JobEventType.CANCELLED, "cancelled on request",
                             TaskControlReason.CANCELLED),
    # the reason is the job's `failure`
    LedgerStatus.FAILED: (JobEventType.FAILED, None, TaskControlReason.FINISHED),
}


def _unreadable(job_id: str, partition: int, reason: str) -> JobEvent:
    """The REJECTED event of a job whose record on `partition` could not be read."""
    return JobEvent(
        job_id=job_id, type=JobEventType.REJECTED, timestamp=now_ms(), model=None,
        model_version=None, reason=f"the job record could not be read: {reason}",
        total_items=None, total_tasks=None, done_items=0, ok_items=0, error_items=0,
        rate_items_per_s=None, home_partition=partition, priority=0, weight=1.0)


def _job_id_of(key: bytes | None) -> str | None:
    """The job id a jobs record is keyed by, if its key is one (printable text)."""
    try:
        text = (key or b"").decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if 0 < len(text) <= 256 and text.isprintable() else None
