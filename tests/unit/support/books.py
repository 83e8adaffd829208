"""A job book on a pool the test changes as it goes, for the tests of waits and versions."""

from __future__ import annotations

from inferstream.config import Config
from inferstream.controller.book import JobBook
from inferstream.controller.versions import NO_VERSIONS, ServedVersions
from inferstream.controller.waiting import Starting
from inferstream.policy.view import NO_POLICY, PolicyView
from tests.unit.support.memory import CODEC


def live_book(config: Config, pool: dict[str, list[int]], starting: Starting,
              policy: PolicyView = NO_POLICY,
              versions: ServedVersions = NO_VERSIONS) -> JobBook:
    """A book whose pool is `pool` as it is at each call (the test changes it); `starting`
    (and `versions`) usually the one WorkerAnnouncements the test's workers announce to."""
    book = JobBook(config, codec=CODEC, policy=policy, describe=lambda _group: dict(pool),
                   partitions=lambda topic: 4 if topic == config.task_topic() else 2,
                   starting=starting, versions=versions)
    book.pools.ttl_s = 0.0  # the group as it is now, not as it was described 2 s ago
    return book
