"""`StartAnnouncer`: a worker says that it is starting, and with which models, before it loads
them.

A worker loads its models and compiles their forward pass (15-60 s on a CPU) before it joins
its pool's group, and until then nothing else says it exists. So, as soon as the process is set
up, it sends a `WorkerAnnouncement` (STARTING, the models) to the compacted `workers` topic,
keyed by worker id, again every `announce_interval_s` while it loads, SERVING once it has its
first assignment, and STOPPED when it stops. The controller holds a task of those models while
the announcement is fresh instead of failing it (`controller.announcements`); a worker that
dies while starting stops counting once its last announcement is a few intervals old. Each
announcement lists the versions of the repository models the worker serves, and a joined
worker announces SERVING again whenever they change (`after_versions_changed`): the controller
runs a job on the newest version among the live workers (`controller.versions`).

The announcements go out from a thread of their own with a plain producer: model loading
blocks the main thread, and a broker that is away costs the start nothing (each failure is
logged).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients, SyncProducer
from inferstream.kafka.settings import producer_config
from inferstream.schemas import Codec
from inferstream.schemas.records import WorkerAnnouncement, WorkerState, now_ms
from inferstream.serving.hooks import WorkerHooks

log = logging.getLogger(__name__)

#: Longest wait for the last announcements (STOPPED) to reach the broker at stop.
STOP_FLUSH_S = 5.0
#: How often the idle announcer's producer is polled for what librdkafka logs.
LOG_POLL_S = 1.0


class StartAnnouncer:
    """Announces the workers `worker_ids` of this process (one, or each of `--members`) from
    `start()` until each has joined its group (`hooks(worker_id)` tells it); `stop()` says
    STOPPED for all. Settings: `worker.announce_interval_s` (0: no announcement at all)."""

    def __init__(self, config: Config, worker_ids: Sequence[str],
                 clients: KafkaClients = REAL_CLIENTS, codec: Codec | None = None) -> None:
        self.config = config
        self.clients = clients
        self.codec = codec or Codec.for_config(config)
        self.interval_s = config.worker.announce_interval_s
        self.worker_ids = list(worker_ids)
        self.started_at = now_ms()
        self._starting = set(self.worker_ids)
        self._joined: set[str] = set()  # joined since the last round: SERVING is due
        self._versions: dict[str, dict[str, list[int]]] = {}  # of each worker's models
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._producer: SyncProducer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Say STARTING for every worker now, then again every interval on a thread."""
        if self.interval_s <= 0:
            return
        self._producer = self.clients.producer(producer_config(
            self.config, **{"client.id": f"{self.worker_ids[0]}-announcer"}))
        self._round()
        self._thread = threading.Thread(target=self._run, name="inferstream-announcer",
                                        daemon=True)
        self._thread.start()

    def hooks(self, worker_id: str) -> WorkerHooks:
        """The hooks that tell this announcer when worker `worker_id` joined its group."""
        return _Joined(self, worker_id)

    def joined(self, worker_id: str) -> None:
        """`worker_id` has its first assignment: SERVING goes out, and it is announced no
        more. Thread-safe (called on the worker's event loop)."""
        with self._lock:
            if worker_id not in self._starting:
                return
            self._starting.discard(worker_id)
            self._joined.add(worker_id)
        self._wake.set()

    def versions_changed(self, worker_id: str, versions: dict[str, list[int]]) -> None:
        """`worker_id` serves `versions` of its repository models now: in its announcements
        from now on, and at once where it has joined. Thread-safe."""
        with self._lock:
            self._versions[worker_id] = versions
            joined = worker_id not in self._starting
        if joined:
            self._send(worker_id, WorkerState.SERVING)

    def stop(self) -> None:
        """Stop announcing and say STOPPED for every worker (waiting briefly)."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(STOP_FLUSH_S)
        if self._producer is None:
            return
        for worker_id in self.worker_ids:
            self._send(worker_id, WorkerState.STOPPED)
        if self._producer.flush(STOP_FLUSH_S):
            log.warning("worker announcements not delivered at stop (the broker is away)")

    def _run(self) -> None:
        self._delivered()
        while not self._stopped.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stopped.is_set():
                return
            if not self._round():
                break  # every worker joined: nothing more to say until the stop
        self._serve()

    def _serve(self) -> None:
        """Poll the idle producer until the stop: librdkafka's log lines (a broker away)
        wait in its queue for a poll, and an announcer that stopped polling once its workers
        joined logged a broker outage's lines minutes later, all at the stop, under the
        stop's time."""
        producer = self._producer
        while producer is not None and not self._stopped.wait(LOG_POLL_S):
            producer.poll(0)

    def _delivered(self) -> None:
        """Log the first announcements once they are on the broker (a fresh producer's first
        delivery can take half a second), waiting at most until the next round: the log line
        says the controller may know of the workers now."""
        assert self._producer is not None  # noqa: S101 - started before the thread
        if self._producer.flush(self.interval_s):
            log.warning("worker announcements not delivered yet (the broker is away?): "
                        "announcing again every %gs", self.interval_s)
            return
        log.info("announced as starting on %s: workers=%s models=%s",
                 self.config.topic("workers"), ",".join(self.worker_ids),
                 ",".join(self.config.worker.models))

    def _round(self) -> bool:
        """Announce the workers still starting and those that just joined; whether any is
        still starting."""
        with self._lock:
            starting, joined = sorted(self._starting), sorted(self._joined)
            self._joined.clear()
        for worker_id in starting:
            self._send(worker_id, WorkerState.STARTING)
        for worker_id in joined:
            self._send(worker_id, WorkerState.SERVING)
        return bool(starting)

    def _send(self, worker_id: str, state: WorkerState) -> None:
        with self._lock:
            versions = self._versions.get(worker_id, {})
        announcement = WorkerAnnouncement(
            worker=worker_id, pool=self.config.pool, models=list(self.config.worker.models),
            model_versions=versions, state=state, started_at=self.started_at, timestamp=now_ms(),
            interval_s=self.interval_s)
        producer = self._producer
        if producer is None:
            return
        try:
            producer.produce(self.config.topic("workers"),
                             self.codec.encode("WorkerAnnouncement", announcement),
                             worker_id.encode())
            producer.poll(0)
        except Exception as exc:  # BufferError, KafkaException: the start goes on without it
            log.warning("worker announcement %s of %s not sent: %r", state, worker_id, exc)


class _Joined(WorkerHooks):
    """Tells the announcer when its worker got its first assignment."""

    def __init__(self, announcer: StartAnnouncer, worker_id: str) -> None:
        self.announcer = announcer
        self.worker_id = worker_id

    def after_rebalance(self) -> None:
        self.announcer.joined(self.worker_id)

    def after_versions_changed(self, versions: dict[str, list[int]]) -> None:
        self.announcer.versions_changed(self.worker_id, versions)
