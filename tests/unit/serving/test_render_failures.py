"""A source's render that raises, a fault of the code, not of the task: the record is answered
with its items failed and the reason, and the model's later tasks still run; where even that
raises, the model's batch loop ends and the worker stops in words (its supervisor starts it
again), where it ended silently and every later task of the model waited for ever."""

from __future__ import annotations

import pytest

from inferstream.errors import InferstreamError
from inferstream.kafka.clients import Outgoing, Record
from inferstream.models import load_model
from inferstream.schemas.records import ItemStatus
from inferstream.serving.loop import Worker
from inferstream.serving.pipeline import TaskRun
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.serving.test_source import IN, OUT, EchoSource
from tests.unit.support.memory import CODEC, as_worker, make_config
from tests.unit.support.records import consumed
from tests.unit.support.running import Running


class Unwritable(EchoSource):
    """EchoSource whose render raises for a record `bad` while its item is ok (every time,
    with `always`), as an encoder refusing a value would."""

    def __init__(self, bad: bytes, always: bool = False) -> None:
        super().__init__()
        self.bad, self.always = bad, always

    def render(self, run: TaskRun, record: Record) -> list[Outgoing]:
        outcome = run.outcomes[0]
        ok = outcome is not None and outcome["status"] == ItemStatus.OK
        if record.value == self.bad and (self.always or ok):
            raise ValueError("surrogates not allowed")
        return super().render(run, record)


def _worker(source: EchoSource, clients: MemoryKafkaClients) -> Worker:
    config = make_config(worker={"models": ("sim:ms=1",), "calibration_items": 0})
    return Worker(as_worker(config, "r0"), load_model("sim:ms=1"), source, codec=CODEC,
                  clients=clients)


def _produce(broker: MemoryBroker, words: list[bytes]) -> None:
    broker.create_topic(IN, 1)
    broker.create_topic(OUT, 1)
    for word in words:
        broker.produce(IN, 0, word, word)


def test_a_record_whose_render_raises_is_answered_with_the_reason_and_the_rest_run(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    words = [f"w{n}".encode() for n in range(12)]
    _produce(broker, words)
    running.workers(_worker(Unwritable(b"w3"), clients))
    running.until(lambda: consumed(broker, EchoSource.group_id, IN))

    answers = [r.value for r in broker.records(OUT, read_committed=True)]
    assert answers == [w + (b":ERROR" if w == b"w3" else b":OK") for w in words]


def test_a_batch_loop_that_raises_stops_the_worker_in_words(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    _produce(broker, [b"a", b"b", b"c"])
    running.workers(_worker(Unwritable(b"b", always=True), clients))
    with pytest.raises(InferstreamError, match=r"batch-loop-sim:ms=1 ended: ValueError"):
        running.wait_for(lambda: False, timeout_s=20)
    assert b"c" not in {r.key for r in broker.records(OUT, read_committed=True)}


class UnwritableOnThread(Unwritable):
    """Unwritable, its results rendered on a thread (as large ones are)."""

    def render_on_thread(self, run: TaskRun) -> bool:
        return True


def test_a_render_on_a_thread_that_raises_stops_the_worker_in_words(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    """A large result is rendered on a thread: where even its failed items' render raised,
    the exception was lost with the thread's task (the worker went on, the record never
    answered and its partition's commits held for good). The worker stops in words."""
    _produce(broker, [b"a", b"b", b"c"])
    running.workers(_worker(UnwritableOnThread(b"b", always=True), clients))
    with pytest.raises(InferstreamError, match=r"render of .*@1 ended: ValueError"):
        running.wait_for(lambda: False, timeout_s=20)
