"""Several finished tasks of a partition in one transaction (`commit_window_ms`,
`commit_max_tasks`): the offset after the last of them is committed with their results, in
offset order; a fenced or abandoned transaction leaves all of its tasks to be redone, and
every task still has exactly one committed result."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from inferstream.config import Config
from inferstream.kafka.clients import Outgoing
from inferstream.schemas.records import TaskResult, read_record
from inferstream.serving.committers.base import CommitWindow, PartitionCommitter, PendingTask
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker
from inferstream.testing.log import ABORTED, COMMITTED
from tests.unit.support.fencing import fenced_mid_commit
from tests.unit.support.memory import CODEC, make_config
from tests.unit.support.records import all_committed, put_tasks, results, task_counts
from tests.unit.support.running import Running

MakeWorker = Callable[..., Worker]


class Recorded(PartitionCommitter):
    """Commits nowhere: keeps each commit's records and offset."""

    def __init__(self, window: CommitWindow) -> None:
        super().__init__(SimpleNamespace(topic="t.tasks", partition=0), "g", owner=None,  # type: ignore[arg-type]
                         window=window)
        self.commits: list[tuple[list[bytes], int]] = []

    async def start(self) -> None:
        """Nothing to start."""

    async def _commit(self, records: list[Outgoing], offset: int) -> None:
        self.commits.append(([r.value for r in records], offset))

    async def _stop_producer(self) -> None:
        """Nothing to stop."""


def queued(committer: PartitionCommitter, count: int) -> list[PendingTask]:
    tasks = [PendingTask(SimpleNamespace(offset=offset)) for offset in range(count)]  # type: ignore[arg-type]
    for task in tasks:
        committer.append(task)
    return tasks


def answer(committer: PartitionCommitter, task: PendingTask) -> None:
    committer.finish(task, [Outgoing("t.results", 0, None, b"%d" % task.offset)])


def test_a_commit_waits_its_window_for_the_tasks_behind_and_no_longer() -> None:
    """The head task finishes; the one behind it finishes within the window and joins its
    transaction; the third, still running when the window ends, commits on its own."""
    async def scenario() -> list[tuple[list[bytes], int]]:
        committer = Recorded(CommitWindow(wait_s=0.2))
        tasks = queued(committer, 3)
        answer(committer, tasks[0])
        commit = asyncio.create_task(committer.commit_ready())
        await asyncio.sleep(0.01)
        assert not commit.done()  # waiting for tasks[1] and tasks[2]
        answer(committer, tasks[1])
        assert [t.offset for t in await commit] == [0, 1]
        answer(committer, tasks[2])
        await committer.commit_ready()
        return committer.commits

    assert asyncio.run(scenario()) == [([b"0", b"1"], 2), ([b"2"], 3)]


def test_a_commit_takes_at_most_max_tasks_in_order() -> None:
    async def scenario() -> list[tuple[list[bytes], int]]:
        committer = Recorded(CommitWindow(wait_s=5.0, max_tasks=2))
        for task in queued(committer, 5):
            answer(committer, task)
        while committer.has_ready:
            await committer.commit_ready()
        return committer.commits

    assert asyncio.run(scenario()) == [([b"0", b"1"], 2), ([b"2", b"3"], 4), ([b"4"], 5)]


def test_a_commit_waiting_its_window_gives_up_when_the_partition_is_dropped() -> None:
    """A revocation past its grace closes the committer: the waiting commit writes nothing,
    and the next owner redoes its tasks from the committed offset."""
    async def scenario() -> tuple[list[PendingTask], list[tuple[list[bytes], int]]]:
        committer = Recorded(CommitWindow(wait_s=30.0))
        tasks = queued(committer, 2)
        answer(committer, tasks[0])
        commit = asyncio.create_task(committer.commit_ready())
        await asyncio.sleep(0.01)
        await asyncio.wait_for(committer.close(), 1.0)
        return await commit, committer.commits

    assert asyncio.run(scenario()) == ([], [])


class Commits(WorkerHooks):
    """Each commit's task partition and offset, in the order they were made."""

    def __init__(self) -> None:
        self.offsets: dict[int, list[int]] = defaultdict(list)

    def after_commit(self, partition: int, offset: int, seconds: float) -> None:
        self.offsets[partition].append(offset)


def transactions(broker: MemoryBroker, config: Config, state: str) -> list[list[int]]:
    """The task ids of each transaction in `state` that wrote results, in log order."""
    found: dict[int, list[int]] = {}
    for record in broker.records(config.topic("results"), read_committed=False):
        if record.txn is not None and record.txn.state == state and record.value:
            task = read_record(CODEC, record.value, TaskResult)
            found.setdefault(id(record.txn), []).append(task["task_id"])
    return list(found.values())


def windowed(guarantee: str = "exactly-once", **worker: Any) -> Config:
    """Tasks that finish one after the other (one item a batch, 2 ms an item), gathered by
    a window far longer than that, at most 3 a transaction."""
    return make_config(worker={"models": ("sim:ms=2",), "max_batch": 1, "guarantee": guarantee,
                               "commit_window_ms": 2000.0, "commit_max_tasks": 3, **worker})


def test_tasks_finishing_within_the_window_commit_together_in_offset_order(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running) -> None:
    config = windowed()
    put_tasks(broker, config, 12)  # 6 on each task partition, task t at offset t // 2
    commits = Commits()
    running.workers(make_worker(config, hooks=commits))
    running.until(all_committed(broker, config))

    assert task_counts(results(broker, config)) == dict.fromkeys(range(12), 1)
    grouped = transactions(broker, config, COMMITTED)
    assert max(len(tasks) for tasks in grouped) == 3  # the cap, reached
    assert len(grouped) < 12
    for tasks in grouped:  # consecutive tasks of one partition
        assert tasks == list(range(tasks[0], tasks[0] + 2 * len(tasks), 2))
    for partition in (0, 1):  # each commit's offset is the one after its last task
        offsets = commits.offsets[partition]
        assert offsets == sorted(set(offsets)) and offsets[-1] == 6
        assert len(offsets) < 6


def test_a_fenced_transaction_of_several_tasks_redoes_them_all(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running) -> None:
    config = windowed()
    put_tasks(broker, config, 12)
    tid = f"{config.topic_prefix}{config.pool}.{config.task_topic()}.0"
    with fenced_mid_commit(broker, tid):
        running.workers(make_worker(config))
        running.until(all_committed(broker, config))

    (aborted,) = transactions(broker, config, ABORTED)
    assert len(aborted) > 1  # a window's worth of tasks, all redone:
    assert task_counts(results(broker, config)) == dict.fromkeys(range(12), 1)


def test_at_least_once_commits_a_window_of_tasks_with_one_offset_commit(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running) -> None:
    config = windowed("at-least-once")
    put_tasks(broker, config, 12)
    commits = Commits()
    running.workers(make_worker(config, hooks=commits))
    running.until(all_committed(broker, config))

    assert task_counts(results(broker, config)) == dict.fromkeys(range(12), 1)
    for partition in (0, 1):
        offsets = commits.offsets[partition]
        assert offsets == sorted(set(offsets)) and offsets[-1] == 6
        assert len(offsets) < 6
