"""`PolicyTable`: the compacted policy topic followed into a local dict, latest entry per key.

Every worker keeps one, so whichever member the group elects leader can assign by it. The
reader is a `TopicFollower` (a daemon thread reading from the beginning, then following);
readers on the event loop only take a lock for a dict copy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.follower import TopicFollower
from inferstream.policy.view import ModelRange, WorkerPolicy, model_figure
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import PolicyEntry, PolicyKind, WorkerHealth, read_record

log = logging.getLogger(__name__)


class PolicyTable(TopicFollower):
    """The latest `PolicyEntry` per key of the policy topic (`<pool>/<worker>`, `<pool>`),
    read through the `PolicyView` it implements (`workers`, `model_ranges`, `task_size`).

    `start()` launches the reader thread, `stop()` ends it (the owner calls both);
    `caught_up` is set once the reader reached the end of the topic the first time.
    `max_age_s`: a pool whose newest entry is older than this has no policy (sysinfo is not
    running); None: entries never expire.
    """

    def __init__(self, config: Config, clients: KafkaClients = REAL_CLIENTS,
                 codec: Codec | None = None, *, max_age_s: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(config, config.topic("policy"), "policy", clients)
        self.codec = codec or Codec.for_config(config)
        self.max_age_s = max_age_s
        self._clock = clock
        self._entries: dict[str, PolicyEntry] = {}
        self._updated_at: float | None = None  # monotonic time of the last applied record
        self._lock = threading.Lock()

    # -- what the assignor asks ----------------------------------------------------------------
    def entry(self, pool: str, worker: str) -> PolicyEntry | None:
        with self._lock:
            return self._entries.get(f"{pool}/{worker}")

    def pool_entry(self, pool: str) -> PolicyEntry | None:
        with self._lock:
            return self._entries.get(pool)

    def entries(self, pool: str) -> list[PolicyEntry]:
        """The WORKER entries of `pool`, by worker id."""
        with self._lock:
            rows = [e for e in self._entries.values()
                    if e["pool"] == pool and e["kind"] == PolicyKind.WORKER]
        return sorted(rows, key=lambda e: e["worker"])

    def has_policy(self, pool: str) -> bool:
        """Whether `pool` has a POOL entry newer than `max_age_s` with a HEALTHY worker."""
        pool_entry = self.pool_entry(pool)
        if pool_entry is None or pool_entry["health"] != WorkerHealth.HEALTHY:
            return False
        if self.max_age_s is None:
            return True
        return self._clock() - pool_entry["updated_at"] / 1000 <= self.max_age_s

    def shares(self, pool: str) -> dict[str, float]:
        """Each worker's capacity share of `pool` (0 for one that is not HEALTHY)."""
        return {e["worker"]: e["share"] for e in self.entries(pool)}

    def workers(self, pool: str) -> dict[str, WorkerPolicy] | None:
        """What the assignor plans by: each worker's share, health and capacity; None when
        `pool` has no policy."""
        if not self.has_policy(pool):
            return None
        return {e["worker"]: WorkerPolicy(e["share"], e["health"] == WorkerHealth.HEALTHY,
                                          e["capacity_items_per_s"], tuple(e["models"]),
                                          {r["model"]: r["items_per_s"] for r in e["model_rates"]})
                for e in self.entries(pool)}

    def task_size(self, pool: str, model: str | None = None) -> int | None:
        """The policy's recommended items per task for `pool` (about `task_seconds` of work):
        `model`'s where the POOL entry has a size for it, else the pool's; None when the pool
        has no policy."""
        pool_entry = self.pool_entry(pool)
        if pool_entry is None or not self.has_policy(pool):
            return None
        sizes = {r["model"]: r["task_size"] for r in pool_entry["model_rates"]
                 if r["task_size"] is not None}
        size = model_figure(model, sizes) if model is not None else None
        return pool_entry["task_size"] if size is None else size

    def model_ranges(self, pool: str) -> tuple[ModelRange, ...]:
        """Each model's range of `pool`'s task partitions; none when the pool serves one
        model or has no policy (every task may go to any partition)."""
        pool_entry = self.pool_entry(pool)
        if pool_entry is None or not self.has_policy(pool):
            return ()
        return tuple(pool_entry["model_partitions"])

    def age_s(self) -> float | None:
        """Seconds since the reader applied its last entry; None before the first."""
        with self._lock:
            updated = self._updated_at
        return None if updated is None else time.monotonic() - updated

    # -- what the reader does ------------------------------------------------------------------
    def apply(self, key: bytes | None, value: bytes) -> None:
        """Take one record of the topic; an undecodable one is logged and skipped."""
        try:
            entry = read_record(self.codec, value, PolicyEntry)
        except (SchemaError, ValueError) as exc:
            log.warning("undecodable policy record key=%r: %s", key, exc)
            return
        if not key:
            log.warning("policy record without a key skipped: %s", entry)
            return
        name = key.decode(errors="replace")
        with self._lock:
            self._entries[name] = entry
            self._updated_at = time.monotonic()
