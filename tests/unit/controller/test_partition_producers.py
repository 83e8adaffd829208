"""The controller's per-partition producers: ids, fencing on open, closing a fenced one."""

from __future__ import annotations

import threading
from typing import cast

import pytest
from confluent_kafka import KafkaError, KafkaException

from inferstream.controller.transactions import PartitionProducers
from inferstream.kafka.clients import SyncProducer
from inferstream.kafka.errors import KafkaSetupError


class FakeProducer:
    def __init__(self, tid: str, fenced: bool = False) -> None:
        self.tid, self.fenced, self.flushed = tid, fenced, False

    def init_transactions(self, _timeout: float) -> None:
        pass

    def flush(self, _timeout: float) -> int:
        if self.fenced:  # what librdkafka raises once a newer instance fenced this one
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance",
                                            fatal=True))
        self.flushed = True
        return 0


def producers(made: list[FakeProducer], fenced: set[str]) -> PartitionProducers:
    def new(tid: str) -> SyncProducer:
        made.append(FakeProducer(tid, tid in fenced))
        return cast(SyncProducer, made[-1])
    return PartitionProducers("t.controller", new, threading.Event())


def test_each_owned_index_has_its_own_transactional_id() -> None:
    made: list[FakeProducer] = []
    pool = producers(made, set())
    pool.open({0, 2})
    assert pool.owned == {0, 2}
    assert sorted(p.tid for p in made) == ["t.controller.0", "t.controller.2"]
    pool.close({2, 5})
    assert pool.owned == {0} and [p.flushed for p in made if p.tid.endswith(".2")] == [True]


def test_closing_a_fenced_producer_forgets_it_without_raising() -> None:
    """A replica paused past its session finds its producer fenced on its next commit;
    dropping that partition must not crash it (it did: flush raised the fatal _FENCED)."""
    made: list[FakeProducer] = []
    pool = producers(made, {"t.controller.1"})
    pool.open({0, 1})
    pool.close({0, 1})
    assert pool.owned == set()
    assert {p.tid: p.flushed for p in made} == {"t.controller.0": True,
                                                "t.controller.1": False}




class RefusedProducer(FakeProducer):
    def init_transactions(self, _timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                        "Transactional Id authorization failed"))


def test_an_id_no_acl_allows_is_the_refusal_at_once_not_a_retry() -> None:
    made: list[FakeProducer] = []

    def new(tid: str) -> SyncProducer:
        made.append(RefusedProducer(tid))
        return cast(SyncProducer, made[-1])

    pool = PartitionProducers("t.controller", new, threading.Event(),
                              refused=lambda tid: KafkaSetupError(f"may not use {tid}"))
    with pytest.raises(KafkaSetupError, match=r"may not use t\.controller\.3"):
        pool.open({3})
    assert len(made) == 1 and pool.owned == set()
