"""A source of one's own plugs into the worker: a source that is neither the task source nor
the stream's gets exactly one committed output per input record, through two members
sharing its group and a fenced commit, and records it answers at once keep their order."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from inferstream.kafka.clients import Outgoing, Record
from inferstream.models import load_model
from inferstream.schemas.records import Task, TaskItem, now_ms
from inferstream.serving.committers.base import PendingTask
from inferstream.serving.loop import Worker
from inferstream.serving.pipeline import TaskRun
from inferstream.serving.source import Source
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.fencing import fenced_mid_commit
from tests.unit.support.memory import CODEC, as_worker, make_config
from tests.unit.support.records import consumed
from tests.unit.support.running import Running

IN, OUT = "words", "answers"


class EchoSource(Source):
    """Runs each word of `words` through the model and answers `word:STATUS` on the same
    partition of `answers`; an empty record is answered `:EMPTY` at once."""

    group_id = "t.echo"
    topic = IN
    outputs = (OUT,)

    def __init__(self) -> None:
        self.committed: list[tuple[int, int]] = []

    def admit(self, record: Record) -> Task | list[Outgoing]:
        if not record.value:
            return [self._answer(record, b":EMPTY")]
        item = TaskItem(index=0, name=record.value.decode(), data=None)
        return Task(job_id="echo", task_id=record.offset, attempt=1, pool="echo",
                    model=self.worker.served.names[0], model_version=None, top_k=1,
                    items=[item],
                    issued_at=now_ms(), deadline_ms=None, home_partition=None)

    def render(self, run: TaskRun, record: Record) -> list[Outgoing]:
        outcome = run.outcomes[0]
        assert outcome is not None
        return [self._answer(record, (record.value or b"") + b":" + outcome["status"].encode())]

    def after_commit(self, committed: Sequence[PendingTask]) -> None:
        self.committed.extend((p.record.partition, p.offset) for p in committed)

    def _answer(self, record: Record, value: bytes) -> Outgoing:
        partition = record.partition % self.worker.partitions[OUT]
        return Outgoing(OUT, partition, record.key, value)


def test_a_source_of_ones_own_gets_one_committed_output_per_input_record(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    config = make_config(worker={"models": ("sim:ms=1",), "calibration_items": 0})
    broker.create_topic(IN, 2)
    broker.create_topic(OUT, 2)
    inputs = {(p, offset): b"" if offset % 7 == 3 else f"w{p}-{offset}".encode()
              for offset in range(30) for p in (0, 1)}
    for (partition, _), value in sorted(inputs.items(), key=lambda kv: kv[0][::-1]):
        broker.produce(IN, partition, value, value)
    sources = [EchoSource(), EchoSource()]
    members = [Worker(as_worker(config, f"e{i}"), load_model("sim:ms=1"), source, codec=CODEC,
                      clients=clients) for i, source in enumerate(sources)]
    with fenced_mid_commit(broker, f"{config.topic_prefix}{config.pool}.{IN}.1"):
        running.workers(*members)
        running.until(lambda: consumed(broker, EchoSource.group_id, IN))

    found = broker.records(OUT, read_committed=True)
    for partition in (0, 1):  # each input once, answered in its partition's offset order
        assert [r.value for r in found if r.partition == partition] == [
            value + (b":OK" if value else b":EMPTY")
            for (p, _), value in sorted(inputs.items()) if p == partition]
    assert len(broker.records(OUT, read_committed=False)) > len(inputs)  # the fenced ones
    committed = Counter(c for source in sources for c in source.committed)
    assert committed == Counter(set(inputs))  # told of each commit once
    assert all(source.committed for source in sources)  # the members shared the partitions
