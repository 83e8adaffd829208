"""The worker's system-information publisher: a `SysInfoSample` to the sysinfo topic every
`sysinfo_interval_s`, keyed by worker id.

It runs beside the task path and never blocks or breaks it: its own asyncio task and thread
(collectors run there), a plain idempotent producer of its own, a bounded buffer (the oldest
sample goes first when the broker is away), and every failure logged and counted; a producer
that failed to deliver a sample is replaced before the next send (`_delivered`). At start it
calibrates every served model and sends the first sample before the worker joins its group;
a model or version loaded later is calibrated before the next sample.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from inferstream.config import Config
from inferstream.kafka.clients import AsyncConsumer, AsyncProducer, KafkaClients
from inferstream.kafka.settings import aiokafka_kwargs
from inferstream.kafka.stopping import stop_or_warn
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import Calibration, SysInfoSample, now_ms
from inferstream.serving.calibration import outdated
from inferstream.serving.collectors import (
    Collector,
    PerformanceWindows,
    QueueProbe,
    SampleContext,
    ServedModel,
    load_collectors,
)
from inferstream.serving.collectors.performance import MIN_WINDOW_S
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.served import ServedModels

log = logging.getLogger(__name__)

#: Samples kept while the broker does not take them; the oldest is dropped first.
BUFFER_SAMPLES = 16
#: Longest wait for the first sample (and the producer's start) before taking tasks.
FIRST_SAMPLE_TIMEOUT_S = 10.0


class SysInfoPublisher:
    """Samples the worker and produces the samples; `start` after the models load, `stop`
    at shutdown. Settings: `worker.sysinfo_interval_s` (0 or None: off), `worker.collectors`
    (ConfigError here for an unknown name), `worker.calibration_items`.

    `calibrations` holds each served model's calibration by `served_ref` (None where it
    could not be measured), `calibration` the first one's.

    `published`, `failed` (samples lost), `collector_errors` and `collect_cpu_s` (CPU time
    the publisher's thread spent collecting) count what happened.
    """

    def __init__(self, config: Config, worker_id: str, clients: KafkaClients, codec: Codec
                 ) -> None:
        self.config = config
        self.worker_id = worker_id
        self.clients = clients
        self.codec = codec
        self.interval_s = config.worker.sysinfo_interval_s or 0.0
        self.collectors: dict[str, Collector] = load_collectors(config.worker.collectors)
        self.performance = PerformanceWindows(max(MIN_WINDOW_S, 5 * self.interval_s))
        self.queue = QueueProbe()
        self.calibrations: dict[str, Calibration | None] = {}
        self.published = self.failed = self.collector_errors = 0
        self.collect_cpu_s = 0.0
        self._hooks = WorkerHooks()
        self._served: ServedModels | None = None
        self._consumer: Callable[[], AsyncConsumer | None] = lambda: None
        self._host = socket.gethostname()
        self._buffer: deque[bytes] = deque(maxlen=BUFFER_SAMPLES)
        self._producer: AsyncProducer | None = None
        #: why the producer is to be replaced before the next send (None: it is not)
        self._replace: BaseException | None = None
        self._thread = ThreadPoolExecutor(1, "inferstream-sysinfo")
        self._loop_task: asyncio.Task[None] | None = None
        #: the stops of replaced producers, each until its buffered batches are settled
        self._retiring: set[asyncio.Future[Any]] = set()
        self._failing = False

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self, served: ServedModels, consumer: Callable[[], AsyncConsumer | None],
                    hooks: WorkerHooks) -> None:
        """Calibrate, send the first sample (waiting at most FIRST_SAMPLE_TIMEOUT_S), then
        sample every interval in the background."""
        if not self.enabled:
            return
        self._served, self._consumer, self._hooks = served, consumer, hooks
        await self._calibrate()
        try:
            await asyncio.wait_for(self._publish_safely(), FIRST_SAMPLE_TIMEOUT_S)
        except TimeoutError:
            log.warning("first sysinfo sample not sent within %.0fs; the worker goes on",
                        FIRST_SAMPLE_TIMEOUT_S)
        self._loop_task = asyncio.get_running_loop().create_task(self._run(),
                                                                 name="sysinfo-publisher")

    @property
    def calibration(self) -> Calibration | None:
        """The first served model's calibration (None: not measured)."""
        return next(iter(self.calibrations.values()), None)

    async def _calibrate(self) -> None:
        """Calibrate each served model and version not calibrated yet or `outdated` since,
        on its pipeline's inference thread; forget those no longer served."""
        items = self.config.worker.calibration_items
        pipelines = dict(self._served.pipelines) if self._served and items else {}
        for ref in set(self.calibrations) - set(pipelines):
            del self.calibrations[ref]
        for ref, pipeline in pipelines.items():
            if ref not in self.calibrations or outdated(pipeline.model):
                self.calibrations[ref] = await pipeline.calibrate(items)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._publish_safely()

    async def _publish_safely(self) -> None:
        try:
            await self._calibrate()
            await self.publish_once()
        except Exception:  # never let the publisher die: the next interval tries again
            log.exception("sysinfo sample failed")
            self._lost()

    async def stop(self) -> None:
        """Stop sampling; flush what is buffered (briefly) and stop the producer."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        if self._producer is not None:
            try:
                await asyncio.wait_for(self._flush(), 2.0)
            except (TimeoutError, KafkaError) as exc:
                log.warning("sysinfo samples not flushed at stop: %r", exc)
            await stop_or_warn(self._producer.stop(), 5.0, "sysinfo producer not closed")
        if self._retiring:
            await stop_or_warn(asyncio.gather(*self._retiring), 2.0,
                               "replaced sysinfo producer not closed")
        for _ in self._buffer:
            self._lost()
        self._buffer.clear()
        self._thread.shutdown(wait=False, cancel_futures=True)

    # -- one sample -------------------------------------------------------------------------
    async def publish_once(self) -> None:
        """Take one sample, buffer it and send what the buffer holds."""
        sample = await self.sample()
        try:
            value = self.codec.encode("SysInfoSample", sample)
        except SchemaError as exc:  # a collector returned a value of the wrong type
            log.error("sysinfo sample does not fit its schema: %s", exc)
            self._lost()
            return
        if len(self._buffer) == self._buffer.maxlen:
            self._lost()  # the oldest goes
        self._buffer.append(value)
        await self._flush()

    async def sample(self) -> SysInfoSample:
        """One sample: a snapshot of the worker here, the collectors on the thread."""
        context = await self.context()
        fields, errors, cpu_s = await asyncio.get_running_loop().run_in_executor(
            self._thread, run_collectors, self.collectors, context)
        self.collect_cpu_s += cpu_s
        self._hooks.after_collect(cpu_s)
        for name in errors:
            self.collector_errors += 1
            self._hooks.after_collector_error(name)
        return build_sample(context, fields, self._host,
                            [c for c in self.calibrations.values() if c is not None])

    async def context(self) -> SampleContext:
        served = tuple(ServedModel(p.model.name, p.model.version)
                       for p in (self._served.pipelines.values() if self._served else ()))
        in_flight = self._served.items_in_flight if self._served else 0
        return SampleContext(
            worker=self.worker_id, pool=self.config.pool, device=_device(self._served),
            interval_s=self.interval_s, served=served,
            performance=self.performance.snapshot(served),
            queue=await self.queue.state(self._consumer(), in_flight))

    # -- producing --------------------------------------------------------------------------
    async def _flush(self) -> None:
        topic, key = self.config.topic("sysinfo"), self.worker_id.encode()
        while self._buffer:
            try:
                producer = await self._started_producer()
                delivery = await asyncio.wait_for(
                    producer.send(topic, self._buffer[0], key=key), max(self.interval_s, 1.0))
            except (KafkaError, TimeoutError, OSError) as exc:
                self._warn(exc)
                return
            self._buffer.popleft()
            asyncio.ensure_future(delivery).add_done_callback(
                functools.partial(self._delivered, producer))

    async def _started_producer(self) -> AsyncProducer:
        if self._producer is not None and self._replace is not None:
            self._retire_producer(self._producer, self._replace)
        if self._producer is None:
            producer = self.clients.aio_producer(aiokafka_kwargs(
                self.config, AIOKafkaProducer, enable_idempotence=True,
                client_id=f"{self.worker_id}-sysinfo"))
            try:
                await asyncio.wait_for(producer.start(), FIRST_SAMPLE_TIMEOUT_S)
            except BaseException:
                await asyncio.gather(producer.stop(), return_exceptions=True)
                raise
            self._producer = producer
        return self._producer

    def _retire_producer(self, producer: AsyncProducer, why: BaseException) -> None:
        """Let the next send start a new producer (a new producer id whose sequence numbers
        start again) and stop `producer` in the background: its stop waits for its buffered
        batches, which with the broker away take until the broker is back."""
        log.warning("sysinfo producer replaced: a sample it took was not delivered (%r)", why)
        self._producer, self._replace = None, None
        stopping = asyncio.ensure_future(producer.stop())
        self._retiring.add(stopping)
        stopping.add_done_callback(self._retired)

    def _retired(self, stopping: asyncio.Future[Any]) -> None:
        self._retiring.discard(stopping)
        if not stopping.cancelled() and stopping.exception() is not None:
            log.debug("replaced sysinfo producer stopped with %r", stopping.exception())

    def _delivered(self, producer: AsyncProducer, delivery: asyncio.Future[Any]) -> None:
        """Count a delivery. A failed one marks its producer, if still the current one, to
        be replaced: aiokafka's idempotent producer had numbered the lost batch, and the
        partition's leader refuses every later batch of that producer id as out of order
        (OutOfOrderSequenceNumber), for as long as the producer lives; aiokafka (0.14) never
        takes a new id. aiokafka fails a batch that way when its partition had no known
        leader for longer than the request timeout (a broker that stopped cleanly and stayed
        away)."""
        if delivery.cancelled() or delivery.exception() is not None:
            error = delivery.exception() if not delivery.cancelled() else None
            self._warn(error or "cancelled")
            self._lost()
            if producer is self._producer and self._replace is None:
                self._replace = error or asyncio.CancelledError()
            return
        self.published += 1
        self._failing = False
        self._hooks.after_sysinfo_sample(True)

    def _lost(self) -> None:
        self.failed += 1
        self._hooks.after_sysinfo_sample(False)

    def _warn(self, error: object) -> None:
        """The first failure of a streak is a warning, the rest debug (no log flood)."""
        log.log(logging.DEBUG if self._failing else logging.WARNING,
                "sysinfo sample not sent (kept up to %d, retried next interval): %r",
                BUFFER_SAMPLES, error)
        self._failing = True


def run_collectors(collectors: dict[str, Collector], context: SampleContext
                   ) -> tuple[dict[str, Any], list[str], float]:
    """Every collector's fields merged in order (`extra` merged too), the names of those
    that raised, and the CPU seconds this thread spent on them."""
    started = time.thread_time()
    fields: dict[str, Any] = {}
    extra: dict[str, float] = {}
    failed = []
    for name, collector in collectors.items():
        try:
            got: Mapping[str, Any] = collector.collect(context)
            extra.update({k: float(v) for k, v in got.get("extra", {}).items()})
        except Exception:
            log.exception("collector %s failed; the sample goes out without it", name)
            failed.append(name)
            continue
        fields.update(got)
    fields["extra"] = extra
    return fields, failed, time.thread_time() - started


def build_sample(context: SampleContext, fields: Mapping[str, Any], host: str,
                 calibrations: list[Calibration]) -> SysInfoSample:
    """The worker's identity and its models' `calibrations` (the first also as the v2
    field `calibration`), every field at its empty value, the collectors' fields on top."""
    names = [m.name for m in context.served]
    sample = SysInfoSample(
        worker=context.worker, pool=context.pool, host=host, timestamp=now_ms(),
        model=names[0] if names else None, device=context.device, cpu_percent=0.0,
        memory_bytes=0, gpu_utilization=None, gpu_memory_bytes=None,
        throughput_items_per_s=0.0, latency_seconds_p50=None, queue_depth=0,
        assigned_partitions=[], extra={}, interval_s=context.interval_s,
        host_cpu_percent=None, host_memory_available_bytes=None, accelerator=None,
        gpu_memory_total_bytes=None, latency_seconds_p95=None, consumer_lag=None,
        served_models=names, models=[], calibration=calibrations[0] if calibrations else None,
        calibrations=calibrations, software={})
    # Each collector's SampleFields is a group of the sample's fields, so the union is a
    # sample; mypy cannot merge TypedDicts that hold different keys.
    return cast(SysInfoSample, {**sample, **fields})


def _device(served: ServedModels | None) -> str:
    for pipeline in served.pipelines.values() if served else ():
        return str(pipeline.model.device)
    return "cpu"
