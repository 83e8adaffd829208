"""Which task partitions a worker owns, and the committer that holds each one.

All changes of ownership (a rebalance's revoke and assign, taking back a partition whose
producer was fenced while the group still assigns it to us) run one at a time under one lock,
and never while a rebalance is under way, so a worker cannot re-initialise a transactional id
that the group has just handed to another worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, TransactionalIdAuthorizationFailed

from inferstream.kafka.clients import AsyncConsumer
from inferstream.serving.committers.base import PartitionCommitter

log = logging.getLogger(__name__)
#: Partitions whose producers start at the same time when a rebalance assigns many.
TAKE_AT_ONCE = 16

#: Heartbeats of the group after which a fenced partition still assigned is taken back: a
#: member woken after its session ran out hears of its group's rebalance at its first one.
RETAKE_HEARTBEATS = 3

#: The least a release waits for a partition's commit under way before it stops the
#: partition's producer under it (`PartitionCommitter.close`), its grace spent or not.
CLOSE_WAIT_S = 0.1
#: The longest a worker's stop waits for the producers of revoked partitions still stopping
#: (each producer's stop is bounded at 10 s: `committers.exactly_once.quietly_stop`).
CLOSE_STOP_S = 10.0


class Ownership:
    """The worker's partitions: `committers[tp]` exists exactly for partitions it holds.

    A partition with no committed offset starts at its beginning (`start_at_end`: its end,
    committed when the partition is taken).
    """

    def __init__(self, consumer: AsyncConsumer,
                 new_committer: Callable[[TopicPartition], PartitionCommitter],
                 on_change: Callable[[int], None], stopping: asyncio.Event,
                 start_at_end: bool = False,
                 on_rebalance: Callable[[], None] = lambda: None,
                 heartbeat_s: float = 0.0) -> None:
        """`on_change(partitions)` after every change of what is held; `on_rebalance()` once
        per assignment a rebalance makes (not for its revoke, nor at shutdown); a fenced
        partition is taken back `RETAKE_HEARTBEATS` heartbeats (of `heartbeat_s`) later, if
        still assigned (`retake_later`)."""
        self.consumer = consumer
        self.retake_after_s = RETAKE_HEARTBEATS * heartbeat_s
        self.start_at_end = start_at_end
        self.new_committer = new_committer
        self.on_change = on_change
        self.on_rebalance = on_rebalance
        self.stopping = stopping
        self.committers: dict[TopicPartition, PartitionCommitter] = {}
        #: the committed offset of each held partition, as read when it was taken and as
        #: the worker's commits move it (for its consumer lag)
        self.offsets: dict[TopicPartition, int] = {}
        self.rebalancing = False
        #: the transactional id no ACL allows: a partition's producer was refused it
        self.refused_id: str | None = None
        self._lock = asyncio.Lock()
        self._retakes: set[asyncio.Task[None]] = set()
        #: commits a release started and stopped waiting for (`_background`)
        self._commits: set[asyncio.Task[None]] = set()
        #: revoked partitions' committers closing behind a release (`_background`)
        self._closing: set[asyncio.Task[None]] = set()
        self._retaking: set[TopicPartition] = set()

    def assigned(self, tp: TopicPartition) -> bool:
        """Whether the consumer group assigns `tp` to this worker now."""
        return tp in self.consumer.assignment()

    def active(self, tp: TopicPartition) -> PartitionCommitter | None:
        committer = self.committers.get(tp)
        return committer if committer is not None and not committer.lost else None

    async def acquire(self, partitions: set[TopicPartition]) -> None:
        """A rebalance assigned `partitions` (the whole new assignment). The rebalance ends
        here whatever a partition's take does: one that fails (its position not found in
        time while a broker restarts) is taken back `RETAKE_HEARTBEATS` later."""
        async with self._lock:
            try:
                for tp in [tp for tp in self.committers if tp not in partitions]:
                    await self._drop(tp)
                failed = await self._take_all(
                    [tp for tp in sorted(partitions) if self.active(tp) is None])
            finally:
                self.rebalancing = False  # else no partition was ours, nor taken back
        for tp in failed:
            self.retake_later(tp)
        self.on_rebalance()
        self.on_change(len(self.committers))
        log.info("assigned partitions=%s", sorted(tp.partition for tp in self.committers))

    async def _take_all(self, new: list[TopicPartition]) -> list[TopicPartition]:
        """Take `new` concurrently, a bounded number at a time: one init_transactions takes
        about 0.5 s and aiokafka sends no heartbeat while its listener runs, so 20 in a row
        outlast a 10 s session, and 120 took a minute on a loaded 2-core host. Returns those
        whose take failed, dropped."""
        gate = asyncio.Semaphore(TAKE_AT_ONCE)

        async def taken(tp: TopicPartition) -> bool:
            async with gate:
                await self._drop(tp)
                return await self._take(tp)
        outcomes = await asyncio.gather(*(taken(tp) for tp in new))
        return [tp for tp, ok in zip(new, outcomes, strict=True) if not ok]

    async def _take(self, tp: TopicPartition) -> bool:
        """`_own(tp)`; False, the partition dropped, where that raised (its position not
        found in time while a broker restarts): the caller takes it back later."""
        try:
            await self._own(tp)
        except Exception as exc:
            log.warning("cannot take partition %s now, again later: %r", tp, exc)
            await self._drop(tp)
            return False
        return True

    async def release(self, partitions: set[TopicPartition], grace_s: float,
                      commit: Callable[[PartitionCommitter], Awaitable[None]],
                      rebalance: bool = True) -> None:
        """Give partitions up: tasks under way may finish and commit for up to `grace_s`;
        those not started yet are left to the next owner, in a rebalance and in a graceful
        stop (`rebalance=False`) alike: a stop that finished the controller's
        `issue_ahead_s` of queued work held the partitions, and the survivors, that long.

        `grace_s` bounds the whole release: the partitions commit side by side, and a commit
        still under way when it ends is left to fail as its producer stops (the next owner's
        init fences it; it redoes those tasks), a stop that goes on behind the release. A
        commit waiting on a hung broker lasts up to `COMMIT_TIMEOUT_S` (30 s) a try, and a
        producer's stop under it up to 10 s: the revoke, one commit after another, held the
        group's rebalance, so every worker, 43 s past a 10 s grace (a broker SIGSTOPped for
        90 s)."""
        self.rebalancing = self.rebalancing or rebalance
        async with self._lock:
            owned = [self.committers[tp] for tp in sorted(partitions) if tp in self.committers]
            shed = sum(c.shed_unstarted() for c in owned)
            log.info("revoked partitions=%s%s", [c.tp.partition for c in owned],
                     f" ({shed} tasks not started left to the next owner)" if shed else "")
            deadline = time.monotonic() + grace_s
            while any(c.busy for c in owned) and time.monotonic() < deadline:
                commits = [self._background(commit(c), self._commits) for c in owned if c.busy]
                _, late = await asyncio.wait(commits, timeout=deadline - time.monotonic())
                if late:
                    break
                await asyncio.sleep(0.02)
            left = max(CLOSE_WAIT_S, deadline - time.monotonic())
            drops = [self._background(self._drop(c.tp, left), self._closing) for c in owned]
            if drops:
                await asyncio.wait(drops, timeout=left + CLOSE_WAIT_S)
        self.on_change(len(self.committers))

    @staticmethod
    def _background(work: Awaitable[None], tasks: set[asyncio.Task[None]]
                    ) -> asyncio.Task[None]:
        """`work` as a task in `tasks`, which may outlive a release that stops waiting for
        it (`close` cancels the commits and waits for the drops); an error it ends with is
        logged."""
        task = asyncio.ensure_future(work)
        tasks.add(task)

        def ended(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.warning("revoked partition: %r", task.exception())
        task.add_done_callback(ended)
        return task

    def retake_later(self, tp: TopicPartition) -> None:
        """The producer of `tp` was fenced or gave up: take it back if it is still ours.

        A zombie that woke up may have re-initialised our transactional id; we take it back
        (fencing the zombie) and carry on from the committed offset. Scheduled, not awaited,
        because the caller may be inside `release` holding the lock, and `retake_after_s`
        later: the fenced one may be the zombie itself (paused past its session, then woken),
        which has not heard of its group's rebalance yet and still sees the partition as its
        own; taken back at once, it fenced the partition's new owner, whose work in flight
        was lost, and so on until its next heartbeat. By then it has heard.
        """
        if tp in self._retaking:
            return
        self._retaking.add(tp)
        task = asyncio.get_running_loop().create_task(self._retake(tp))
        self._retakes.add(task)
        task.add_done_callback(self._retakes.discard)

    async def _retake(self, tp: TopicPartition) -> None:
        """Take `tp` back (`retake_later`). A take back that raises (its position not found
        while a broker restarts) is dropped and tried again later, as a rebalance's is
        (`acquire`): it ended this task with an error no one read, the partition held but
        never sought to where it starts."""
        failed = False
        try:
            await asyncio.sleep(self.retake_after_s)
            async with self._lock:
                if self.rebalancing or not self.assigned(tp) or self.active(tp) is not None:
                    return
                await self._drop(tp)
                failed = not await self._take(tp)
                if not failed and self.active(tp) is not None:  # _own gives up on a stop
                    log.info("retook partition=%d", tp.partition)  # or a revoke
        finally:
            self._retaking.discard(tp)
        if failed:
            self.retake_later(tp)

    async def _own(self, tp: TopicPartition) -> None:
        """Start the partition's producer, then seek to its committed offset; retries while
        the broker is unreachable and the partition is still ours. Once a transactional id
        was refused, takes no other partition: the worker stops (taking 120 partitions one
        refusal after another outlasted its session, and the rebalance came round again)."""
        attempt = 0
        while not self.stopping.is_set() and self.assigned(tp) and self.refused_id is None:
            attempt += 1
            committer = self.new_committer(tp)
            try:
                await asyncio.wait_for(committer.start(), 30)
                # Read after init_transactions: the fenced owner's last commit is final now.
                committed = await asyncio.wait_for(self.consumer.committed(tp), 30)
            except TransactionalIdAuthorizationFailed as exc:  # no retry brings an ACL
                await committer.close()
                self.refused_id = str(exc.args[0]) if exc.args else str(tp)
                return
            except (KafkaError, TimeoutError) as exc:
                await committer.close()
                log.warning("cannot take partition %s yet (attempt %d): %r", tp, attempt, exc)
                await asyncio.sleep(min(0.5 * attempt, 5))
                continue
            self.committers[tp] = committer
            # where the lag counts from: the committed offset, else where reading starts
            self.offsets[tp] = await self._start_reading(tp, committed)
            return

    async def _start_reading(self, tp: TopicPartition, committed: int | None) -> int:
        """Seek `tp` to its `committed` offset, else to its beginning or (`start_at_end`)
        its end, which is committed at once: left uncommitted, the next owner (after a stop
        or a rebalance before the first output's commit) starts at the end it sees then,
        skipping every record written in between. Returns the offset reading starts at."""
        if committed is not None:
            self.consumer.seek(tp, committed)
            return committed
        if not self.start_at_end:
            await self.consumer.seek_to_beginning(tp)
            return await asyncio.wait_for(self.consumer.position(tp), 30)
        await self.consumer.seek_to_end(tp)
        end = await asyncio.wait_for(self.consumer.position(tp), 30)
        try:
            await asyncio.wait_for(self.consumer.commit({tp: end}), 30)
        except (KafkaError, TimeoutError) as exc:
            log.warning("partition %s starts at its end, offset %d, not committed (%r): a "
                        "next owner before this one's first commit starts at the end then",
                        tp, end, exc)
        return end

    async def _drop(self, tp: TopicPartition, wait_s: float = 10.0) -> None:
        """`tp` no longer held: its committer closed after the commit under way, if any
        (up to `wait_s`)."""
        self.offsets.pop(tp, None)
        committer = self.committers.pop(tp, None)
        if committer is not None:
            await committer.close(wait_s)

    async def close(self) -> None:
        for task in [*self._retakes, *self._commits]:
            task.cancel()
        if self._closing:  # revoked partitions' producers still stopping
            await asyncio.wait(set(self._closing), timeout=CLOSE_STOP_S)
        async with self._lock:
            for tp in list(self.committers):
                await self._drop(tp)


class GroupOwner:
    """What a partition's committer asks of the group member that owns it
    (`committers.base.Owner`): the group's view of the partition, through the consumer."""

    def __init__(self, ownership: Ownership,
                 on_transaction_failed: Callable[[bool], None]) -> None:
        self.ownership = ownership
        self.on_transaction_failed = on_transaction_failed

    def owns(self, tp: TopicPartition) -> bool:
        return self.ownership.assigned(tp) and not self.ownership.rebalancing

    async def committed_offset(self, tp: TopicPartition) -> int | None:
        offset: int | None = await self.ownership.consumer.committed(tp)
        return offset

    async def commit_offset(self, tp: TopicPartition, offset: int) -> None:
        await self.ownership.consumer.commit({tp: offset})

    def transaction_failed(self, tp: TopicPartition, fenced: bool) -> None:
        log.debug("transaction on %s %s", tp, "fenced" if fenced else "aborted")
        self.on_transaction_failed(fenced)
