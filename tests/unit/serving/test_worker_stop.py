"""A worker's stop while the cluster is away, on the in-memory transport: a consumer whose stop
ends in aiokafka's own CancelledError (aiokafka#647) or never answers still ends the run,
with one warning, after its tasks were committed (no traceback, no exit 1 to restart); and
while its group rebalances, the stop does not wait for the rebalance to end."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker
from tests.unit.support.memory import as_worker, make_config
from tests.unit.support.records import put_tasks, results, task_counts

MakeWorker = Callable[..., Worker]
#: How the consumer's stop fails: as aiokafka's with a fetch in its back-off, or no answer.
LEAVE_FAULTS = pytest.mark.parametrize("fault", ["cancelled", "hangs"])


class StopsWhenAssigned(WorkerHooks):
    """SIGTERM as soon as the worker has its partitions (what `request_stop` is for)."""

    def __init__(self) -> None:
        self.worker: Worker | None = None

    def after_rebalance(self) -> None:
        assert self.worker is not None  # set before the run
        self.worker.request_stop()


class RebalancesWhenAssigned(WorkerHooks):
    """Once the worker has its partitions, its group rebalances and waits for a member that
    does not join again (its next fetch stalls, as aiokafka's getmany waits for the next
    assignment); SIGTERM comes while it waits."""

    def __init__(self, broker: MemoryBroker, group: str) -> None:
        self.broker, self.group = broker, group
        self.worker: Worker | None = None
        self.never = threading.Event()

    def after_rebalance(self) -> None:
        assert self.worker is not None  # set before the run
        self.broker.inject(self.group, "fetch", fail=None, stall=self.never)
        asyncio.get_running_loop().call_later(0.05, self.worker.request_stop)


class StopsAfterFirstTask(WorkerHooks):
    """SIGTERM once the worker has finished a task, with more of them queued behind it."""

    def __init__(self) -> None:
        self.worker: Worker | None = None

    def after_task(self, model: str, ok_items: int, error_items: int) -> None:
        assert self.worker is not None  # set before the run
        self.worker.request_stop()


def inject_leave_fault(broker: MemoryBroker, group: str, fault: str) -> threading.Event:
    never = threading.Event()
    if fault == "cancelled":
        broker.inject(group, "leave", error=asyncio.CancelledError())
    else:
        broker.inject(group, "leave", fail=None, stall=never)
    return never


@LEAVE_FAULTS
def test_a_bounded_worker_that_cannot_leave_its_group_still_ends_its_run(
        broker: MemoryBroker, make_worker: MakeWorker, caplog: pytest.LogCaptureFixture,
        fault: str) -> None:
    """Idle after its tasks, the worker exits (bounded mode) though its group cannot be left:
    its run returns, so the process exits 0 and no supervisor restarts it."""
    config = make_config(worker={"idle_exit_s": 0.3}, connect_timeout_s=0.2)
    put_tasks(broker, config, 6)
    never = inject_leave_fault(broker, config.worker_group(), fault)

    asyncio.run(asyncio.wait_for(make_worker(config).run(), 30))
    never.set()

    assert task_counts(results(broker, config)) == dict.fromkeys(range(6), 1)
    left_in = broker.members(config.worker_group())
    assert len(left_in) == 1  # the session timeout removes it, not the worker
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [w for w in warnings if "not left" in w] == [
        f"group {config.worker_group()} not left (its session timeout removes member w1): "
        "the cluster did not answer (" + ("no answer within 0.2s" if fault == "hangs" else
                                          "its stop ended cancelled, aiokafka#647")
        + ")"]


@LEAVE_FAULTS
def test_a_stop_request_ends_the_run_though_the_group_cannot_be_left(
        broker: MemoryBroker, make_worker: MakeWorker, fault: str) -> None:
    """SIGTERM (`request_stop`) once running: the run returns instead of raising."""
    config = make_config(connect_timeout_s=0.2)
    hooks = StopsWhenAssigned()
    worker = hooks.worker = make_worker(config, hooks=hooks)
    never = inject_leave_fault(broker, config.worker_group(), fault)

    asyncio.run(asyncio.wait_for(worker.run(), 30))
    never.set()

    assert len(broker.members(config.worker_group())) == 1


def test_a_stop_request_ends_a_fetch_that_waits_for_the_group_to_rebalance(
        broker: MemoryBroker, make_worker: MakeWorker) -> None:
    """SIGTERM while the fetch waits for the group's next assignment: the run drains and
    leaves the group instead of waiting for the rebalance to end (a stream member SIGCONTed
    after its session ran out waited in its rejoin until exit 143)."""
    config = make_config(connect_timeout_s=0.2)
    hooks = RebalancesWhenAssigned(broker, config.worker_group())
    worker = hooks.worker = make_worker(config, hooks=hooks)

    try:
        asyncio.run(asyncio.wait_for(worker.run(), 10))
    finally:
        hooks.never.set()

    assert broker.members(config.worker_group()) == []  # it left: its stop ran


def test_a_stop_leaves_the_tasks_not_started_to_the_next_owner(
        broker: MemoryBroker, make_worker: MakeWorker) -> None:
    """SIGTERM with a queue behind the task under way (the controller keeps a worker
    `issue_ahead_s` ahead): the worker commits what is under way and leaves the group,
    instead of holding its partitions, and its survivors, until its queue is done; the next
    owner runs the rest from the committed offset, each task once in all."""
    config = make_config(worker={"models": ("sim:ms=20",), "max_batch": 2})
    put_tasks(broker, config, 20)
    hooks = StopsAfterFirstTask()
    worker = hooks.worker = make_worker(config, hooks=hooks)

    asyncio.run(asyncio.wait_for(worker.run(), 30))
    by_the_first = task_counts(results(broker, config))
    successor = as_worker(config, "w2", idle_exit_s=0.5)
    asyncio.run(asyncio.wait_for(make_worker(successor).run(), 30))

    assert 0 < sum(by_the_first.values()) < 10
    assert task_counts(results(broker, config)) == dict.fromkeys(range(20), 1)
