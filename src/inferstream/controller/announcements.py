"""`WorkerAnnouncements`: the compacted workers topic followed, so that the controller knows the
workers that are starting and the models they will serve (`worker.announce`), and the versions
of the repository models that each serves.

A worker is starting from its first STARTING announcement until it joins its pool's group
(then SERVING). Either counts while fresh: sent within `STALE_INTERVALS` of the worker's own
announcement interval, so one that died while loading stops counting within seconds. The
controller's book asks `starting(pool, model, now_ms)` (see `waiting`), and
`versions(pool, model)` (see `versions`): a worker's latest announcement, whatever its age,
says which versions it serves (the controller crosses it with the pool's group, where the
live workers are).
"""

from __future__ import annotations

import logging
import threading

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.follower import TopicFollower
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import (
    WorkerAnnouncement,
    WorkerState,
    model_ref,
    read_record,
    serves,
)

log = logging.getLogger(__name__)

#: An announcement older than this many of its intervals is stale: its worker died starting.
STALE_INTERVALS = 3.0
#: Announcements older than this are forgotten (their workers are long gone or long joined).
FORGET_AFTER_MS = 3_600_000
#: Announcements applied between two prunes of the forgotten ones.
PRUNE_EVERY = 100


class WorkerAnnouncements(TopicFollower):
    """The latest announcement of each worker; `start()` launches the reader thread, `stop()`
    ends it (the owner calls both)."""

    def __init__(self, config: Config, clients: KafkaClients = REAL_CLIENTS,
                 codec: Codec | None = None) -> None:
        super().__init__(config, config.topic("workers"), "workers", clients)
        self.codec = codec or Codec.for_config(config)
        self._latest: dict[str, WorkerAnnouncement] = {}
        self._lock = threading.Lock()
        self._applied = 0

    def starting(self, pool: str, model: str, now_ms: int) -> list[str]:
        """The workers of `pool` that are starting, or just joined, with a model that serves
        `model` (a `model_ref`), by their fresh announcements."""
        with self._lock:
            latest = list(self._latest.values())
        return sorted(a["worker"] for a in latest
                      if a["pool"] == pool and fresh(a, now_ms)
                      and any(serves(m, model) for m in announced_refs(a)))

    def versions(self, pool: str, model: str) -> dict[str, list[int]]:
        """The versions of repository model `model` that each worker of `pool` serves, by
        its latest announcement (a STOPPED worker serves none)."""
        with self._lock:
            latest = list(self._latest.values())
        return {a["worker"]: list(a["model_versions"][model]) for a in latest
                if a["pool"] == pool and a["state"] != WorkerState.STOPPED
                and a["model_versions"].get(model)}

    def apply(self, key: bytes | None, value: bytes) -> None:
        """Take one announcement; an undecodable one is logged and skipped."""
        try:
            announcement = read_record(self.codec, value, WorkerAnnouncement)
        except (SchemaError, ValueError) as exc:
            log.warning("undecodable worker announcement key=%r: %s", key, exc)
            return
        horizon = announcement["timestamp"] - FORGET_AFTER_MS
        with self._lock:
            self._latest[announcement["worker"]] = announcement
            self._applied += 1
            if self._applied % PRUNE_EVERY == 0:  # the ids of crashed workers pile up
                self._latest = {w: a for w, a in self._latest.items()
                                if a["timestamp"] >= horizon}


def announced_refs(announcement: WorkerAnnouncement) -> list[str]:
    """The models an announcement names, each version of a repository model as its own
    reference (`model_ref`); a model with no versions announced (yet) by its name alone."""
    versions = announcement["model_versions"]
    return [ref for model in announcement["models"]
            for ref in ([model_ref(model, v) for v in versions.get(model, ())] or [model])]


def fresh(announcement: WorkerAnnouncement, now_ms: int) -> bool:
    """Whether `announcement` stands for a worker starting now: not STOPPED, and sent within
    `STALE_INTERVALS` of its interval."""
    if announcement["state"] == WorkerState.STOPPED:
        return False
    window_ms = STALE_INTERVALS * announcement["interval_s"] * 1000
    return now_ms - announcement["timestamp"] <= window_ms
