"""Exactly-once commits of task results: one transactional producer per owned task partition.

aiokafka's `send_offsets_to_transaction` carries no consumer-group generation, so a zombie
worker cannot be fenced by generation (KIP-447). Instead each task partition has its own
transactional id, `<prefix><pool>.<topic>.<partition>`: the new owner's `init_transactions`
bumps the epoch, which aborts the old owner's open transaction and makes its next commit
fail with ProducerFenced (Kafka Streams' "EOS alpha" scheme).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    BrokerResponseError,
    InvalidProducerEpoch,
    KafkaConnectionError,
    KafkaError,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)

from inferstream.config import Config
from inferstream.kafka.clients import AsyncProducer, KafkaClients, Outgoing
from inferstream.kafka.errors import PartitionLostError, TransactionalIdRefusedError
from inferstream.kafka.settings import aiokafka_kwargs
from inferstream.kafka.stopping import stop_client
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES
from inferstream.serving.committers.base import (
    COMMIT_TIMEOUT_S,
    NO_WINDOW,
    CommitWindow,
    Owner,
    PartitionCommitter,
    retry_delay_s,
)

log = logging.getLogger(__name__)

_FENCED = (ProducerFenced, InvalidProducerEpoch)
#: What ends a producer for good: fenced, or refused its transactional id by the cluster.
_FATAL = (*_FENCED, TransactionalIdAuthorizationFailed)


class TransactionalCommitter(PartitionCommitter):
    """Commits a partition's finished tasks with their offset, a window's worth (`window`)
    in each transaction."""

    def __init__(self, config: Config, clients: KafkaClients, tp: Any, group_id: str,
                 owner: Owner, max_attempts: int = 8, window: CommitWindow = NO_WINDOW
                 ) -> None:
        super().__init__(tp, group_id, owner, max_attempts, window)
        self.transactional_id = f"{config.worker_transactional_prefix()}{tp.topic}.{tp.partition}"
        self._config = config
        self._clients = clients
        self._producer: AsyncProducer | None = None

    def _new_producer(self) -> AsyncProducer:
        return self._clients.aio_producer(aiokafka_kwargs(
            self._config, AIOKafkaProducer,
            transactional_id=self.transactional_id,
            enable_idempotence=True,
            max_request_size=LARGE_MESSAGE_BYTES,
        ))

    async def start(self) -> None:
        """Initialise transactions: fences the previous owner and aborts its open transaction.

        Completes or aborts whatever the previous holder of the transactional id left, so
        the committed offset read afterwards is final.
        """
        producer = self._new_producer()
        try:
            await producer.start()
        except BaseException:
            await quietly_stop(producer)
            raise
        self._producer = producer

    async def _commit(self, records: list[Outgoing], offset: int) -> None:
        """Commit, or find out that the commit happened; never commit the same tasks twice.

        Fenced: another worker owns the partition. Refused the transactional id (an ACL
        removed): TransactionalIdRefusedError, the transaction is never committed. Anything
        else (a timeout, a broker gone, an abortable error) leaves the outcome unknown, so the
        producer is re-initialised, which aborts our transaction if it is still open and
        waits for it if it was committing, and the committed offset then says whether the
        tasks are in.
        """
        for attempt in range(1, self.max_attempts + 1):
            if self.lost:
                raise PartitionLostError(f"{self.tp}: closed")
            try:
                await asyncio.wait_for(self._transaction(records, {self.tp: offset}),
                                       COMMIT_TIMEOUT_S)
                return
            except TransactionalIdAuthorizationFailed as exc:
                raise self._refused() from exc
            except _FENCED as exc:
                self._mark_lost()
                self.owner.transaction_failed(self.tp, fenced=True)
                raise PartitionLostError(f"{self.tp}: fenced by a new owner") from exc
            except Exception as exc:  # any other failure leaves the outcome unknown
                self.owner.transaction_failed(self.tp, fenced=False)
                log.warning("commit outcome unknown tp=%s attempt=%d error=%r",
                            self.tp, attempt, exc)
            if await self._committed_after_restart(offset):
                return
            await asyncio.sleep(retry_delay_s(attempt))
        self._mark_lost()
        raise PartitionLostError(f"{self.tp}: commit failed {self.max_attempts} times")

    def _refused(self) -> TransactionalIdRefusedError:
        """The partition given up for want of its transactional id's ACL."""
        self._mark_lost()
        self.owner.transaction_failed(self.tp, fenced=False)
        return TransactionalIdRefusedError(self.transactional_id)

    async def _committed_after_restart(self, target: int) -> bool:
        """Re-initialise the producer (only while we own the partition), then ask whether
        the committed offset already covers `target`."""
        if self.lost:  # closed while this commit waited: no new producer for it
            raise PartitionLostError(f"{self.tp}: closed")
        if not self.owner.owns(self.tp):
            self._mark_lost()
            raise PartitionLostError(f"{self.tp}: no longer assigned")
        await self._stop_producer()
        try:
            await asyncio.wait_for(self.start(), COMMIT_TIMEOUT_S)
            committed = await asyncio.wait_for(self.owner.committed_offset(self.tp),
                                               COMMIT_TIMEOUT_S)
        except TransactionalIdAuthorizationFailed as exc:
            raise self._refused() from exc
        except (KafkaError, TimeoutError) as exc:
            log.warning("cannot re-initialise producer tp=%s error=%r", self.tp, exc)
            return False
        return committed is not None and committed >= target

    async def _transaction(self, records: list[Outgoing], offsets: dict[Any, int]) -> None:
        producer = self._producer
        if producer is None:
            raise KafkaConnectionError(f"no producer for {self.tp}")
        async with producer.transaction():
            sends = [
                await producer.send(r.topic, r.value, key=r.key, partition=r.partition,
                                    headers=list(r.headers) or None)
                for r in records
            ]
            await asyncio.gather(*sends)
            await producer.send_offsets_to_transaction(offsets, self.group_id)

    async def _stop_producer(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await quietly_stop(producer)


def quiet_fenced_futures(loop: asyncio.AbstractEventLoop) -> None:
    """Log aiokafka's unretrieved fencing futures in one line, not as a traceback.

    When a producer is fenced (a worker SIGCONTed after its session ran out), aiokafka's
    `TransactionManager.fatal_error` (aiokafka/producer/transaction_manager.py) sets the
    fencing error on its transaction waiter, which no caller awaits once the committer has
    its own ProducerFenced; asyncio then prints "Future exception was never retrieved" with a
    traceback at garbage collection. The committer has handled the fencing already (the
    partition is retaken or left), so the waiter's copy is only noise; the same goes for a
    producer refused its transactional id (the worker stops in words). No upstream issue was
    found (aiokafka 0.12). A handler set by the caller is kept.
    """
    if loop.get_exception_handler() is not None:
        return

    def handler(current: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), _FATAL) and "never retrieved" in str(
                context.get("message", "")):
            log.info("a fenced or refused producer's error was left unretrieved by aiokafka: %r",
                     context["exception"])
            return
        current.default_exception_handler(context)

    loop.set_exception_handler(handler)


class _SenderRefusals(logging.Filter):
    """One line, not a traceback, for a broker's answer that ends aiokafka's sender."""

    def filter(self, record: logging.LogRecord) -> bool:
        refusal = record.exc_info[1] if record.exc_info else None
        if isinstance(refusal, BrokerResponseError) and str(record.msg).startswith(
                "Unexpected error in sender routine"):
            record.msg = ("a transactional producer ended on the broker's answer %r; its "
                          "committer checks what was committed and starts another")
            record.args = (refusal,)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_sender_refusals() -> None:
    """Log a broker's refusal that ends aiokafka's sender in one line (idempotent).

    aiokafka's transaction handlers (aiokafka/producer/sender.py) raise any error code they
    do not expect (INVALID_TXN_STATE, an unmapped code, ...) out of the sender's routine,
    which logs it with `log.exception("Unexpected error in sender routine")` and fails the
    producer: a traceback for what is the broker's answer, seen once in a stream member
    SIGCONTed after its producers were fenced (aiokafka#1004 and #907 report the same routine
    ending on other codes). The committer already treats that failure as an unknown outcome
    (`TransactionalCommitter._commit`), so the traceback says nothing it does not. Errors
    that are not the broker's answers (a bug in aiokafka or here) keep their traceback.
    """
    sender_log = logging.getLogger("aiokafka.producer.sender")
    if not any(isinstance(f, _SenderRefusals) for f in sender_log.filters):
        sender_log.addFilter(_SenderRefusals())


async def quietly_stop(producer: AsyncProducer) -> None:
    error = await stop_client(producer.stop(), 10)
    if error is not None:
        log.debug("producer stop failed error=%r", error)
