"""Transactions of the in-memory broker: epochs per transactional id, fencing, markers.

`init` bumps the id's epoch, which aborts the previous holder's open transaction and makes
every later call of that holder fail with FencedError. Commit makes the records visible to
`read_committed` readers and the offsets committed, atomically; abort discards both.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from inferstream.testing.errors import (
    FAIL_WHEN,
    FAULT_CALLS,
    Fault,
    FencedError,
    TransactionStateError,
)
from inferstream.testing.log import ABORTED, COMMITTED, Key, PartitionLog, Transaction

#: What the coordinator needs of the broker: a partition's log, a group's offset commit.
LogOf = Callable[[str, int], PartitionLog]
CommitOffsets = Callable[[str, dict[Key, int]], None]


class TransactionCoordinator:
    """Epochs and open transactions of every transactional id; not thread-safe by itself
    (the broker calls it under its lock)."""

    def __init__(self, log_of: LogOf, commit_offsets: CommitOffsets) -> None:
        self._log_of = log_of
        self._commit_offsets = commit_offsets
        self.epochs: dict[str, int] = {}
        self.open: dict[str, Transaction] = {}
        self._faults: dict[str, list[Fault]] = {}

    # -- producer calls ----------------------------------------------------------------------
    def init(self, transactional_id: str) -> int:
        """A producer takes the id: the new epoch, after aborting what the old one left."""
        self._finish(transactional_id, commit=False)
        epoch = self.epochs.get(transactional_id, -1) + 1
        self.epochs[transactional_id] = epoch
        return epoch

    def begin(self, transactional_id: str, epoch: int, timeout_s: float) -> None:
        self._check_epoch(transactional_id, epoch)
        if transactional_id in self.open:
            raise TransactionStateError("a transaction is already open")
        self.open[transactional_id] = Transaction(transactional_id, epoch, timeout_s)

    def append(self, transactional_id: str, epoch: int, topic: str, partition: int,
               key: bytes | None, value: bytes | None,
               headers: tuple[tuple[str, bytes], ...] = ()) -> int:
        txn = self.current(transactional_id, epoch)
        txn.partitions.add((topic, partition))
        return self._log_of(topic, partition).append(key, value, txn=txn,
                                                     headers=headers).offset

    def add_offsets(self, transactional_id: str, epoch: int, group_id: str,
                    offsets: dict[Key, int]) -> None:
        txn = self.current(transactional_id, epoch)
        txn.offsets.setdefault(group_id, {}).update(offsets)

    def current(self, transactional_id: str, epoch: int) -> Transaction:
        """The open transaction of this epoch; FencedError for an older epoch."""
        self._check_epoch(transactional_id, epoch)
        txn = self.open.get(transactional_id)
        if txn is None:
            raise TransactionStateError("no transaction is open")
        return txn

    def end(self, transactional_id: str, epoch: int, commit: bool) -> None:
        """Commit or abort the open transaction of this epoch."""
        self.current(transactional_id, epoch)
        self._finish(transactional_id, commit)

    # -- the broker's own doings -------------------------------------------------------------
    def fence(self, transactional_id: str) -> None:
        """What a successor's init does to the current holder, without a successor."""
        self.init(transactional_id)

    def expire(self) -> bool:
        """Abort (and fence) transactions open past their timeout; whether any was."""
        now = time.monotonic()
        late = [tid for tid, txn in self.open.items() if now - txn.started > txn.timeout_s]
        for tid in late:
            self.fence(tid)
        return bool(late)

    def add_fault(self, name: str, fault: Fault) -> None:
        if fault.call not in FAULT_CALLS or fault.fail not in FAIL_WHEN:
            raise ValueError(f"call must be one of {FAULT_CALLS} and fail one of {FAIL_WHEN}")
        self._faults.setdefault(name, []).append(fault)

    def take_fault(self, name: str | None, call: str) -> Fault | None:
        """The fault for this call of `name` (a transactional or group id), if one is
        injected (counted down)."""
        for fault in self._faults.get(name or "", []):
            if fault.call == call and fault.times > 0:
                fault.times -= 1
                fault.reached.set()
                return fault
        return None

    # -- internals ---------------------------------------------------------------------------
    def _check_epoch(self, transactional_id: str, epoch: int) -> None:
        if self.epochs.get(transactional_id) != epoch:
            raise FencedError(f"{transactional_id}: epoch {epoch} was fenced")

    def _finish(self, transactional_id: str, commit: bool) -> None:
        txn = self.open.pop(transactional_id, None)
        if txn is None:
            return
        txn.state = COMMITTED if commit else ABORTED
        for topic, partition in sorted(txn.partitions):
            self._log_of(topic, partition).end_transaction(txn)
        if commit:
            for group_id, offsets in txn.offsets.items():
                self._commit_offsets(group_id, offsets)
