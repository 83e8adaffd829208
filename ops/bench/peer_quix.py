"""Issue 30.6: inferstream's stream mode against a Quix Streams application, exactly once.

One local broker; each side is one process on topics of its own (4 partitions), fed the same
`--images` JPEGs of ops/bench/p1_photos.py as raw records: an inferstream stream member (P8's
`StreamCase`, same settings) and a Quix Streams `Application` with
`processing_guarantee="exactly-once"` that labels each record with the model as inferstream
loads it (`models.registry.load_model`, the same preprocessing), one record at a time as a
Quix `apply` does. Each is warm (one record through it) before the clock starts. Throughput:
every record produced as fast as the producer goes, to the last output visible to a
read_committed reader. Latency (produced -> output visible, p50 / p95) for `--seconds` at
fractions of the Quix app's throughput, the same input rates for both in a round. Start-up:
from the process's launch to the warm-up record's output (the stream member's includes
joining its group, and loading its compiled forward pass kept by an earlier start). The sides
alternate `--rounds` times; the fastest throughput run of each counts. Top-1 classes compared
per record.

Quix runs in a venv of its own (`--quix-python`; see peer_ray_data.py for the .pth that lends
it .venv's torch and inferstream): `var/peers/quix-venv/bin/pip install quixstreams`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from failover_common import source_version, start_broker
from p1_photos import make_images
from p8_stream import FRACTIONS, Latencies, Outputs, StreamCase, measure_stream
from peer_ray_data import ROOT, WORKER_ARGS, Run, ratio_table, top_class

from inferstream.config import Config
from inferstream.kafka.settings import LIBRDKAFKA_LOG


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="length of each latency run")
    parser.add_argument("--rounds", type=int, default=2, help="times the sides alternate")
    parser.add_argument("--quix-commit-interval", type=float, default=5.0,
                        help="seconds between the Quix app's transactions (Quix's default: 5)")
    parser.add_argument("--quix-python", type=Path,
                        default=ROOT / "var/peers/quix-venv/bin/python")
    parser.add_argument("--quix-side", nargs=3, metavar=("BOOTSTRAP", "INPUT", "OUTPUT"),
                        default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def top1(value: bytes) -> int:
    """The top-1 class id of an output record (inferstream's JSON output, or the Quix app's
    in the same shape)."""
    return int(json.loads(value)["top_k"][0]["class_id"])


def quix_side(args: argparse.Namespace, bootstrap: str, source: str, sink: str) -> None:
    """In Quix's venv: the application, until it is killed."""
    import torch
    application = importlib.import_module("quixstreams").Application  # only in Quix's venv

    from inferstream.models.registry import load_model

    model = load_model(args.model)
    torch.set_num_threads(2)
    app = application(broker_address=bootstrap, consumer_group=f"quix-{source}",
                      processing_guarantee="exactly-once", auto_offset_reset="earliest",
                      commit_interval=args.quix_commit_interval,
                      auto_create_topics=False)
    inputs = app.topic(source, value_deserializer="bytes", key_deserializer="bytes")
    outputs = app.topic(sink, value_serializer="json", key_serializer="bytes")

    def label(data: bytes) -> dict[str, Any]:
        [output] = model.predict_items([model.preprocess(data)], 1)
        class_id, name, score = top_class(output)
        return {"top_k": [{"class_id": class_id, "label": name, "score": score}]}

    app.dataframe(inputs).apply(label).to_topic(outputs)
    app.run()


class LabelledOutputs(Outputs):
    """P8's reader of the output topic that also keeps each record's top-1 class."""

    def __init__(self, config: Config, topic: str) -> None:
        super().__init__(config, topic)
        self.top1: dict[bytes, int] = {}

    def _read(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(500, 0.2):
                key, value = message.key(), message.value()
                if message.error() is None and key is not None and value is not None:
                    self.seen.setdefault(key, time.monotonic())
                    self.top1[key] = top1(value)


def stream_case(bootstrap: str, logdir: Path, model: str) -> StreamCase:
    case = StreamCase(bootstrap, logdir, model, WORKER_ARGS, "peer-stream")
    case.outputs.stop()
    case.outputs = LabelledOutputs(case.fleet.config, case.output).start()
    return case


class QuixCase(StreamCase):
    """The Quix app on topics of its own, with P8's producer and reader."""

    def __init__(self, bootstrap: str, logdir: Path, args: argparse.Namespace) -> None:
        config = Config(bootstrap_servers=bootstrap)
        tag = f"quix-{time.monotonic_ns()}"
        self.input, self.output = f"{tag}.uploads", f"{tag}.labels"
        admin = AdminClient(config.confluent_config(logger=LIBRDKAFKA_LOG))
        for future in admin.create_topics([NewTopic(t, num_partitions=4)
                                           for t in (self.input, self.output)]).values():
            future.result(60)
        with open(logdir / f"{tag}.log", "wb") as log:
            self.proc = subprocess.Popen(
                [str(args.quix_python), __file__, "--model", args.model,
                 "--quix-commit-interval", str(args.quix_commit_interval),
                 "--quix-side", bootstrap, self.input, self.output],
                stdout=log, stderr=subprocess.STDOUT, cwd=logdir)  # its state/ folder there
        self.producer = Producer(config.confluent_config(
            logger=LIBRDKAFKA_LOG, **{"linger.ms": 2, "message.max.bytes": 16 << 20}))
        self.outputs = LabelledOutputs(config, self.output).start()
        self.sequence = 0

    def close(self) -> None:
        self.outputs.stop()
        self.proc.kill()
        self.proc.wait(60)


def measured(make_case: Callable[[], StreamCase], side: str, payloads: list[bytes],
             seconds: float, at_saturation: float | None) -> tuple[Run, Latencies]:
    """Launch a case and warm it with one record (its start-up: launch to that output), then
    P8's throughput and latency runs; the run and the latencies."""
    started = time.monotonic()
    case = make_case()
    try:
        case.outputs.wait_for(list(case.produce(payloads[:1])), 600)
        startup_s = time.monotonic() - started
        first = case.sequence
        stream_s, latencies = measure_stream(case, payloads, seconds, at_saturation)
        keys = [f"r{first + i:07d}".encode() for i in range(len(payloads))]
        assert isinstance(case.outputs, LabelledOutputs)  # noqa: S101 - both cases make one
        labels = {key.decode(): case.outputs.top1[key] for key in keys}
        return Run(side, stream_s, labels, startup_s), latencies
    finally:
        case.close()


def latency_rows(rounds: list[list[tuple[Run, Latencies]]]) -> list[str]:
    """Markdown rows: p50 / p95 of each side in the round whose first side (Quix, which
    set the round's input rates) was fastest."""
    fastest = min(rounds, key=lambda results: results[0][0].seconds)
    sides = [run.side for run, _ in fastest]
    rows = ["| input rate | records/s | " + " | ".join(f"{s} p50 / p95 ms" for s in sides) + " |",
            "|---|---:|" + "---:|" * len(sides)]
    for fraction in FRACTIONS:
        rate = fastest[0][1][fraction][0]
        cells = [f"{latencies[fraction][1] * 1000:.0f} / {latencies[fraction][2] * 1000:.0f}"
                 for _, latencies in fastest]
        rows.append(f"| {fraction:.2f} x Quix's throughput | {rate:.1f} | "
                    + " | ".join(cells) + " |")
    return rows


def bench(args: argparse.Namespace) -> int:
    rounds: list[list[tuple[Run, Latencies]]] = []
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        payloads = [p.read_bytes() for p in make_images(Path(tmp) / "images", args.images)]
        broker = start_broker(Path(tmp) / "kafka")
        try:
            for _ in range(args.rounds):
                quix = measured(partial(QuixCase, broker.bootstrap, Path(tmp), args),
                                "Quix Streams", payloads, args.seconds, None)
                rate = args.images / quix[0].seconds
                rounds.append([quix, measured(
                    partial(stream_case, broker.bootstrap, Path(tmp), args.model),
                    "inferstream stream", payloads, args.seconds, rate)])
        finally:
            broker.clean()
    runs = [run for results in rounds for run, _ in results]
    print(f"\nQuix Streams (exactly-once) against inferstream's stream mode at "
          f"{source_version()}: {args.images} JPEGs (ops/bench/p1_photos.py), {args.model}, "
          f"one process each, one local broker, 4 partitions, Quix commit interval "
          f"{args.quix_commit_interval:g} s, best of {args.rounds} alternating rounds\n")
    print("\n".join(ratio_table(runs, "inferstream stream", args.images)))
    print()
    print("\n".join(latency_rows(rounds)))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quix_side is not None:
        quix_side(args, *args.quix_side)
        return 0
    return bench(args)


if __name__ == "__main__":
    raise SystemExit(main())
