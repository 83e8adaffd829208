"""Benchmark P8: the same images through a job and through a stream, one worker each.

Side by side on one local broker: (1) a job of `--images` JPEGs (ops/bench/p1_photos.py) run by
a controller and one worker, timed from submission to COMPLETED; (2) the same JPEGs, as raw
bytes, produced as fast as the producer goes to the input topic of one stream member, timed
from the first record produced to the last output visible to a read_committed consumer. Both
processes are started and in their group before the clock starts, with the same worker
settings. Then the stream's end-to-end latency (record produced -> its output visible) at
fractions of the throughput just measured, each for `--seconds`: p50 and p95, against the
goal at half the saturation rate, 2 x max-wait-ms + one batch time (max-batch images at the
saturation rate). With `--latency-target-ms`, a second member with online batch tuning
(`inferstream stream --latency-target-ms`) is measured the same way on topics of its own, at
the input rates of the fixed-settings member, so the two latency tables compare; `--no-job`
leaves the job out. Prints Markdown tables for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from failover_common import Fleet, source_version, start_broker, wait_for_group
from p1_photos import make_images
from p1_stack import BenchError

from inferstream.config import Config
from inferstream.kafka.settings import LIBRDKAFKA_LOG

FRACTIONS = (0.25, 0.5, 0.75)


class Outputs:
    """Reads the output topic (read_committed) on a thread: when each key became visible."""

    def __init__(self, config: Config, topic: str) -> None:
        self.seen: dict[bytes, float] = {}
        self._consumer = Consumer(config.confluent_config(**{
            "group.id": f"p8-reader-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "logger": LIBRDKAFKA_LOG}))
        self._consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> Outputs:
        self._thread.start()
        return self

    def _read(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(500, 0.2):
                key = message.key()
                if message.error() is None and key is not None:
                    self.seen.setdefault(key, time.monotonic())

    def wait_for(self, keys: list[bytes], timeout_s: float) -> float:
        """The moment the last of `keys` became visible."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(key in self.seen for key in keys):
                return max(self.seen[key] for key in keys)
            time.sleep(0.05)
        missing = sum(1 for key in keys if key not in self.seen)
        raise BenchError(f"{missing} of {len(keys)} outputs never became visible")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def run_job(bootstrap: str, logdir: Path, images: list[Path], model: str,
            worker_args: list[str]) -> float:
    fleet = Fleet(bootstrap, 4, logdir, "p8-job")
    try:
        fleet.create_topics()
        fleet.start("controller", "controller")
        fleet.worker("w1", model, *worker_args)
        wait_for_group(fleet, ["w1"], timeout_s=300)
        started = time.monotonic()
        job = fleet.client.submit(model, [str(p) for p in images])
        job.wait(timeout_s=3600)
        seconds = time.monotonic() - started
        ok = sum(1 for line in job.results() if line["status"] == "ok")
        if ok != len(images):
            raise BenchError(f"the job labelled {ok} of {len(images)} images")
        return seconds
    finally:
        fleet.stop_all()


class StreamCase:
    """One stream member on its own topics, and a producer and a reader for them."""

    def __init__(self, bootstrap: str, logdir: Path, model: str, worker_args: list[str],
                 name: str = "p8-stream") -> None:
        self.fleet = Fleet(bootstrap, 4, logdir, name)
        self.fleet.create_topics()
        config = self.fleet.config
        self.input, self.output = config.topic("uploads"), config.topic("labels")
        admin = AdminClient(config.confluent_config(logger=LIBRDKAFKA_LOG))
        for future in admin.create_topics([NewTopic(t, num_partitions=4)
                                           for t in (self.input, self.output)]).values():
            future.result(60)
        self.fleet.start("s1", "stream", "--model", model, "--worker-id", "s1",
                         "--input-topic", self.input, "--output-topic", self.output,
                         "--decode-threads", "2", *worker_args)
        wait_for_group(self.fleet, ["s1"], timeout_s=300)
        self.producer = Producer(config.confluent_config(
            logger=LIBRDKAFKA_LOG, **{"linger.ms": 2, "message.max.bytes": 16 << 20}))
        self.outputs = Outputs(config, self.output).start()
        self.sequence = 0

    def produce(self, payloads: list[bytes], rate: float | None = None
                ) -> dict[bytes, float]:
        """Produce `payloads` (at `rate` records/s, else as fast as it goes); send times."""
        sent: dict[bytes, float] = {}
        started = time.monotonic()
        for i, payload in enumerate(payloads):
            if rate is not None:
                delay = started + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            key = f"r{self.sequence:07d}".encode()
            self.sequence += 1
            self.producer.produce(self.input, payload, key)
            sent[key] = time.monotonic()
            self.producer.poll(0)
        self.producer.flush(60)
        return sent

    def close(self) -> None:
        self.outputs.stop()
        self.fleet.stop_all()


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="length of each latency run")
    parser.add_argument("--latency-target-ms", type=float, default=None,
                        help="also measure a member tuning its batches for this target")
    parser.add_argument("--no-job", action="store_true", help="measure the stream only")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    worker_args = ["--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms),
                   "--sysinfo-interval", "0"]
    with tempfile.TemporaryDirectory(prefix="p8-") as tmp:
        images = make_images(Path(tmp) / "images", args.images)
        payloads = [p.read_bytes() for p in images]
        broker = start_broker(Path(tmp) / "kafka")
        try:
            job_s = None if args.no_job else run_job(broker.bootstrap, Path(tmp), images,
                                                     args.model, worker_args)
            if job_s is not None:
                print(f"job: {args.images} images in {job_s:.1f} s", flush=True)
            fixed = run_stream(args, broker.bootstrap, Path(tmp), payloads, worker_args)
            tuned = None if args.latency_target_ms is None else run_stream(
                args, broker.bootstrap, Path(tmp), payloads,
                [*worker_args, "--latency-target-ms", f"{args.latency_target_ms:g}"],
                at_saturation=len(payloads) / fixed[0])
        finally:
            broker.clean()
    print(table(args, job_s, *fixed))
    if tuned is not None:
        print(tuned_table(args, fixed, tuned))
    return 0


def run_stream(args: argparse.Namespace, bootstrap: str, logdir: Path, payloads: list[bytes],
               worker_args: list[str], at_saturation: float | None = None
               ) -> tuple[float, Latencies]:
    """One member's seconds for `payloads` and its latencies (see `measure_stream`)."""
    name = "p8-stream" if at_saturation is None else "p8-tuned"
    case = StreamCase(bootstrap, logdir, args.model, worker_args, name)
    try:
        return measure_stream(case, payloads, args.seconds, at_saturation)
    finally:
        case.close()


Latencies = dict[float, tuple[float, float, float]]


def measure_stream(case: StreamCase, payloads: list[bytes], seconds: float,
                   at_saturation: float | None = None) -> tuple[float, Latencies]:
    """The seconds the member takes for `payloads` at once, and its latency (rate, p50,
    p95) for `seconds` at each fraction of that rate (of `at_saturation`'s, if given)."""
    started = time.monotonic()
    sent = case.produce(payloads)
    stream_s = case.outputs.wait_for(list(sent), 3600) - started
    print(f"stream: {len(payloads)} images in {stream_s:.1f} s", flush=True)
    saturation = at_saturation or len(payloads) / stream_s
    latencies: Latencies = {}
    for fraction in FRACTIONS:
        rate = fraction * saturation
        count = max(10, int(rate * seconds))
        sent = case.produce([payloads[i % len(payloads)] for i in range(count)], rate)
        case.outputs.wait_for(list(sent), 600)
        waits = [case.outputs.seen[k] - t for k, t in sent.items()]
        latencies[fraction] = (rate, percentile(waits, 50), percentile(waits, 95))
        print(f"latency at {fraction:.2f} x saturation ({rate:.1f}/s): "
              f"p50 {latencies[fraction][1] * 1000:.0f} ms, "
              f"p95 {latencies[fraction][2] * 1000:.0f} ms", flush=True)
    return stream_s, latencies


def table(args: argparse.Namespace, job_s: float | None, stream_s: float,
          latencies: Latencies) -> str:
    saturation = args.images / stream_s
    batch_s = args.max_batch / saturation
    goal_s = 2 * args.max_wait_ms / 1000 + batch_s
    job_rate = args.images / job_s if job_s else None
    lines = [
        f"P8 at {source_version()}: {args.images} JPEGs (ops/bench/p1_photos.py), model "
        f"{args.model}, one worker / one stream member, --max-batch {args.max_batch} "
        f"--max-wait-ms {args.max_wait_ms:g}, one local broker, 4 partitions", "",
        "| path | seconds | images/s | over the job |", "|---|---:|---:|---:|",
        *([f"| job (controller + worker) | {job_s:.1f} | {job_rate:.1f} | 1.00 |"]
          if job_s and job_rate else []),
        f"| stream (one member) | {stream_s:.1f} | {saturation:.1f} | "
        f"{f'{saturation / job_rate:.2f}' if job_rate else '-'} |", "",
        "| input rate | records/s | p50 latency ms | p95 latency ms |", "|---|---:|---:|---:|",
        *(f"| {f:.2f} x saturation | {r:.1f} | {p50 * 1000:.0f} | {p95 * 1000:.0f} |"
          for f, (r, p50, p95) in latencies.items()), "",
        f"Goal at 0.5 x saturation: p95 < 2 x max-wait + one batch time = "
        f"{goal_s * 1000:.0f} ms (batch time {batch_s * 1000:.0f} ms = {args.max_batch} "
        f"images at {saturation:.1f}/s)."]
    return "\n".join(lines)


def tuned_table(args: argparse.Namespace, fixed: tuple[float, Latencies],
                tuned: tuple[float, Latencies]) -> str:
    """The two members side by side: throughput, and latency at the same input rates."""
    lines = [
        f"Online tuning (--latency-target-ms {args.latency_target_ms:g}) against the fixed "
        f"--max-batch {args.max_batch} --max-wait-ms {args.max_wait_ms:g}, same run:", "",
        "| input rate | records/s | fixed p50 / p95 ms | tuned p50 / p95 ms |",
        "|---|---:|---:|---:|",
        f"| saturation (images/s) | | {args.images / fixed[0]:.1f} | "
        f"{args.images / tuned[0]:.1f} |"]
    for f, (rate, p50, p95) in fixed[1].items():
        _, t50, t95 = tuned[1][f]
        lines.append(f"| {f:.2f} x saturation | {rate:.1f} | {p50 * 1000:.0f} / "
                     f"{p95 * 1000:.0f} | {t50 * 1000:.0f} / {t95 * 1000:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
