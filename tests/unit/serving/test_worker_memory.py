"""The worker on the in-memory transport: every task gets exactly one committed result
through fencing, unknown commit outcomes and rebalances; at-least-once mode redoes a task
whose offset was never committed, and the job output still counts it once."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import weakref
from collections.abc import Callable

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import TransactionalIdAuthorizationFailed
from prometheus_client import CollectorRegistry, generate_latest

from inferstream.config import Config
from inferstream.jobs.output import job_results, output_lines
from inferstream.kafka.errors import KafkaSetupError
from inferstream.serving import fetch, ownership
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loop import Worker
from inferstream.serving.pipeline import TaskRun
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.worker.metrics import WorkerMetrics
from tests.unit.promtool import check_metrics, sample
from tests.unit.support.fencing import fenced_mid_commit
from tests.unit.support.memory import CODEC, as_worker, make_config
from tests.unit.support.records import JOB_ID, all_committed, put_tasks, results, task_counts
from tests.unit.support.running import Running

MakeWorker = Callable[..., Worker]
#: Tasks committed as they finish, or gathered a window's worth (at most 3) a transaction.
WINDOWS = pytest.mark.parametrize("window", [{}, {"commit_window_ms": 2000.0,
                                                  "commit_max_tasks": 3}],
                                  ids=["no-window", "window"])


def transactional_id(config: Config, partition: int) -> str:
    return f"{config.topic_prefix}{config.pool}.{config.task_topic()}.{partition}"


def test_a_fenced_worker_loses_only_its_uncommitted_results(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running) -> None:
    """A successor takes the partition's transactional id while a commit is under way: the
    open transaction is aborted, the worker takes the partition back and redoes its tasks."""
    config = make_config()
    put_tasks(broker, config, 12)
    tid = transactional_id(config, 0)
    with fenced_mid_commit(broker, tid):
        running.workers(make_worker(config))
        running.until(all_committed(broker, config))

    assert task_counts(results(broker, config)) == dict.fromkeys(range(12), 1)
    aborted = len(results(broker, config, read_committed=False)) - 12
    assert aborted >= 1  # the fenced transaction's results are in the log, never visible
    assert broker.epoch(tid) == 2  # the worker's init, the successor's, the worker's retake


@pytest.mark.parametrize("fail", ["before", "after"])
def test_an_unknown_commit_outcome_is_resolved_from_the_committed_offset(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running, fail: str) -> None:
    """The commit times out, having taken effect or not: the worker re-initialises the
    producer, reads the committed offset, and commits each task exactly once."""
    config = make_config()
    put_tasks(broker, config, 8)
    fault = broker.inject(transactional_id(config, 1), "commit", fail=fail)
    running.workers(make_worker(config))
    running.until(all_committed(broker, config))

    assert fault.reached.is_set()
    assert task_counts(results(broker, config)) == dict.fromkeys(range(8), 1)
    group = config.worker_group()
    assert [broker.committed_offset(group, config.task_topic(), p) for p in (0, 1)] == [4, 4]


class StartsAnotherWorker(WorkerHooks):
    """After the first committed task, a second worker joins the group."""

    def __init__(self, other: Worker, running: Running) -> None:
        self.other, self.running, self.started = other, running, False

    def after_task(self, model: str, ok_items: int, error_items: int) -> None:
        if not self.started:
            self.started = True
            self.running.workers(self.other)


@WINDOWS
@pytest.mark.parametrize("grace_s", [10.0, 0.0], ids=["commits-in-flight", "abandons"])
def test_a_rebalance_mid_batch_leaves_one_result_per_task(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running,
        caplog: pytest.LogCaptureFixture, grace_s: float, window: dict[str, float]) -> None:
    """A second worker joins while the first has a window of tasks in flight: the first
    commits those under way within its revoke grace (or abandons them) and leaves those not
    started to their next owner, which does them; each task once."""
    caplog.set_level("INFO", logger="inferstream.serving.ownership")
    config = make_config(worker={"models": ("sim:ms=1",), "revoke_grace_s": grace_s,
                                 "max_batch": 1, **window})
    put_tasks(broker, config, 48)  # more items than the first worker takes in at once
    second = make_worker(as_worker(config, "w2"))
    running.workers(make_worker(config, hooks=StartsAnotherWorker(second, running)))
    running.until(all_committed(broker, config))

    found = results(broker, config)
    assert task_counts(found) == dict.fromkeys(range(48), 1)
    assert {r["worker"] for r in found} == {"w1", "w2"}
    assert "tasks not started left to the next owner" in caplog.text


@WINDOWS
def test_at_least_once_redoes_a_task_whose_offset_was_never_committed(
        broker: MemoryBroker, clients: MemoryKafkaClients, make_worker: MakeWorker,
        running: Running, window: dict[str, float]) -> None:
    """The worker is paused between sending results and committing the offset, past its
    session: the group gives its partitions to a new worker, which redoes those tasks. The
    results topic holds duplicates; the job's output has each item once."""
    config = make_config(worker={"guarantee": "at-least-once", **window})
    put_tasks(broker, config, 10)
    group = config.worker_group()
    stall = threading.Event()
    fault = broker.inject(group, "offset_commit", fail=None, stall=stall)
    running.workers(make_worker(config))
    running.wait_for(fault.reached.is_set)
    broker.expire_member(group, broker.members(group)[0])
    stall.set()  # the paused worker wakes up; its offset commit is refused
    running.workers(make_worker(as_worker(config, "w2")))
    running.until(all_committed(broker, config))

    counts = task_counts(results(broker, config))
    assert set(counts) == set(range(10))
    assert max(counts.values()) == 2  # redone: the price of at-least-once
    lines = list(output_lines(job_results(config, JOB_ID, 10, CODEC, clients)))
    assert sorted(line["item"] for line in lines) == sorted(
        f"item-{t}-{i}" for t in range(10) for i in range(2))


def test_an_unretrieved_fencing_future_is_one_log_line_not_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """aiokafka leaves a fenced producer's error on a future nobody awaits; the worker's loop
    logs it in one line, and any other unretrieved error as asyncio always does."""
    from aiokafka.errors import ProducerFenced

    from inferstream.serving.committers.exactly_once import quiet_fenced_futures

    loop = asyncio.new_event_loop()
    try:
        quiet_fenced_futures(loop)
        message = "Future exception was never retrieved"
        with caplog.at_level("INFO"):
            loop.call_exception_handler({"message": message, "exception": ProducerFenced()})
            loop.call_exception_handler({"message": message, "exception": KeyError("x")})
    finally:
        loop.close()
    fenced = [r for r in caplog.records if "ProducerFenced" in r.getMessage()]
    assert len(fenced) == 1 and fenced[0].levelname == "INFO" and not fenced[0].exc_info
    others = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(others) == 1 and others[0].exc_info  # asyncio's own report, traceback and all


def test_a_broker_refusal_that_ends_aiokafkas_sender_is_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    """aiokafka's sender logs a broker's unexpected answer with a traceback and ends the
    producer; the worker's filter makes it one warning naming the answer, and keeps the
    traceback of anything that is not the broker's answer."""
    import logging

    from aiokafka.errors import InvalidTxnState

    from inferstream.serving.committers.exactly_once import quiet_sender_refusals

    quiet_sender_refusals()
    quiet_sender_refusals()  # idempotent: one filter
    sender = logging.getLogger("aiokafka.producer.sender")
    assert len(sender.filters) == 1
    with caplog.at_level("INFO"):
        for error in (InvalidTxnState(), KeyError("x")):
            try:
                raise error
            except Exception:
                sender.exception("Unexpected error in sender routine")
    refused, other = caplog.records[-2:]
    assert refused.levelname == "WARNING" and not refused.exc_info
    assert "InvalidTxnState" in refused.getMessage()
    assert "\n" not in caplog.handler.format(refused)
    assert other.levelname == "ERROR" and other.exc_info  # a bug keeps its traceback


def test_the_worker_counts_its_fencing_and_commits_with_its_id_and_pool(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch, "LOAD_INTERVAL_S", 0.0)  # a lag report every fetch
    config = make_config()
    put_tasks(broker, config, 12)
    metrics = WorkerMetrics(CollectorRegistry(), "w1", config.pool)
    r, who = metrics.registry, {"worker": "w1", "pool": config.pool}

    def nothing_behind() -> bool:
        """every task committed, and a lag report since"""
        lags = [r.get_sample_value("inferstream_consumer_lag_records",
                                   {**who, "partition": p}) for p in ("0", "1")]
        return all_committed(broker, config)() and lags == [0, 0]

    with fenced_mid_commit(broker, transactional_id(config, 0)):
        running.workers(make_worker(config, hooks=metrics))
        running.until(nothing_behind)

    # each committed item once, though the fenced transaction's were processed twice
    assert sample(r, "inferstream_items_processed_total", **who, model="sim:ms=0",
                 status="ok") == 24
    assert sample(r, "inferstream_tasks_committed_total", **who, model="sim:ms=0") == 12
    assert sample(r, "inferstream_transactions_fenced_total", **who) >= 1
    assert sample(r, "inferstream_rebalances_total", **who) == 1  # its retake is none
    assert sample(r, "inferstream_commit_duration_seconds_count") >= 2
    for partition in ("0", "1"):  # both owned, every task committed: nothing behind
        assert sample(r, "inferstream_consumer_lag_records", **who, partition=partition) == 0
    assert sample(r, "inferstream_in_flight_items", **who) == 0
    check_metrics(generate_latest(r))


def test_an_unknown_commit_outcome_counts_as_aborted(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running) -> None:
    config = make_config()
    put_tasks(broker, config, 4)
    broker.inject(transactional_id(config, 1), "commit", fail="before")
    metrics = WorkerMetrics(CollectorRegistry(), "w1", config.pool)
    running.workers(make_worker(config, hooks=metrics))
    running.until(all_committed(broker, config))
    assert sample(metrics.registry, "inferstream_transactions_aborted_total", worker="w1",
                 pool=config.pool) == 1


def test_a_transactional_id_no_acl_allows_stops_the_worker_in_words(
        broker: MemoryBroker, make_worker: MakeWorker) -> None:
    """Retrying the partition, as for a broker away, would hold the rebalance for ever."""
    config = make_config(sasl_username="w1")
    put_tasks(broker, config, 4)
    tid = transactional_id(config, 1)
    broker.inject(tid, "init", times=1000, error=TransactionalIdAuthorizationFailed(tid))
    worker = make_worker(config)
    with pytest.raises(KafkaSetupError) as raised:
        asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert str(raised.value) == (
        f"User:w1 may not use transactional id {tid} at mem:1: no ACL allows it; an admin "
        "grants the worker's ACLs with `inferstream acls --principal User:w1 --role worker "
        "--topic-prefix 't.' --apply`")


@pytest.mark.parametrize("call", ["send_offsets", "commit"])
def test_a_transactional_id_refused_at_commit_stops_the_worker_and_loses_nothing(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running, call: str) -> None:
    """An ACL removed while the worker runs: its commit is refused the partition's
    transactional id, which is no fence (taking the partition back is refused for ever). The
    worker stops in words; the partition's next owner, allowed the id, does what was not
    committed, and every task has one result."""
    config = make_config(sasl_username="w1")
    put_tasks(broker, config, 8)
    tid = transactional_id(config, 1)
    fault = broker.inject(tid, call, times=1000, error=TransactionalIdAuthorizationFailed(tid))
    with pytest.raises(KafkaSetupError) as raised:
        asyncio.run(asyncio.wait_for(make_worker(config).run(), 30))
    assert str(raised.value) == (
        f"User:w1 may not use transactional id {tid} at mem:1: no ACL allows it; an admin "
        "grants the worker's ACLs with `inferstream acls --principal User:w1 --role worker "
        "--topic-prefix 't.' --apply`")
    assert fault.reached.is_set()
    fault.times = 0  # granted again, to whoever owns the partition next
    running.workers(make_worker(as_worker(config, "w2")))
    running.until(all_committed(broker, config))
    assert task_counts(results(broker, config)) == dict.fromkeys(range(8), 1)


def test_after_a_refused_transactional_id_the_worker_takes_no_other_partition(
        broker: MemoryBroker, make_worker: MakeWorker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker stops anyway: taking 120 partitions one refusal after another outlasted its
    session on a loaded host, and the group's rebalance came round again before it could."""
    monkeypatch.setattr(ownership, "TAKE_AT_ONCE", 1)  # the partitions in turn
    config = make_config(sasl_username="w1")
    put_tasks(broker, config, 4)
    tids = [transactional_id(config, partition) for partition in (0, 1)]
    faults = [broker.inject(tid, "init", times=1000, error=TransactionalIdAuthorizationFailed(tid))
              for tid in tids]
    with pytest.raises(KafkaSetupError, match=f"use transactional id {tids[0]} "):
        asyncio.run(asyncio.wait_for(make_worker(config).run(), 30))
    assert faults[0].reached.is_set()
    assert not faults[1].reached.is_set()


def test_a_committed_tasks_run_is_freed_without_the_cyclic_garbage_collector(
        broker: MemoryBroker, make_worker: MakeWorker, running: Running,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run, with every item's outcome, goes as its task is committed: nothing of the data
    path holds it in a reference cycle, which only a collection (a full one, by then) frees."""
    runs: list[weakref.ref[TaskRun]] = []
    made = TaskRun.__post_init__

    def tracked(run: TaskRun) -> None:
        made(run)
        runs.append(weakref.ref(run))
    monkeypatch.setattr(TaskRun, "__post_init__", tracked)
    config = make_config()
    put_tasks(broker, config, 6, items=4)
    gc.collect()
    gc.disable()
    try:
        running.workers(make_worker(config))
        running.until(all_committed(broker, config))
        running.wait_for(lambda: all(run() is None for run in runs))
    finally:
        gc.enable()
    assert len(runs) == 6


def test_a_fenced_partition_revoked_within_the_retake_delay_is_not_taken_back() -> None:
    """A member woken after its session ran out finds its transaction fenced by the
    partition's new owner before it hears of the rebalance: taken back at once, it fenced
    that owner in turn. It waits `RETAKE_HEARTBEATS` heartbeats; revoked by then, it takes
    nothing (a partition still assigned then is taken back: the tests above)."""
    tp = TopicPartition("t.tasks", 0)

    class Consumer:
        def __init__(self) -> None:
            self.held = {tp}

        def assignment(self) -> set[TopicPartition]:
            return self.held

    taken: list[TopicPartition] = []

    async def fenced_then_revoked() -> None:
        consumer = Consumer()
        owner = ownership.Ownership(
            consumer, taken.append, lambda _: None, asyncio.Event(),  # type: ignore[arg-type]
            heartbeat_s=0.05)
        owner.retake_later(tp)
        await asyncio.sleep(0.05)
        consumer.held = set()  # the rebalance, heard at the next heartbeat
        await asyncio.sleep(0.3)
        await owner.close()

    asyncio.run(fenced_then_revoked())
    assert taken == []


def test_a_retake_that_takes_nothing_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A retake whose partition `_own` gives up (the worker stops meanwhile) logs no
    "retook partition": the operator reading the log would think the worker owns it."""
    tp = TopicPartition("t.tasks", 0)

    class Consumer:
        def assignment(self) -> set[TopicPartition]:
            return {tp}

    stopping = asyncio.Event()
    taken: list[TopicPartition] = []

    async def fenced_while_stopping() -> None:
        owner = ownership.Ownership(
            Consumer(), taken.append, lambda _: None, stopping,  # type: ignore[arg-type]
            heartbeat_s=0.01)
        owner.retake_later(tp)
        stopping.set()
        await asyncio.sleep(0.2)
        await owner.close()

    with caplog.at_level(logging.INFO, logger=ownership.__name__):
        asyncio.run(fenced_while_stopping())
    assert taken == []
    assert "retook" not in caplog.text
