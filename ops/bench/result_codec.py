"""Benchmark: a TaskResult's cost to write and to read, per item (2026-12-06, issue 30.2).

One TaskResult of `--items` items, each of five predictions with ImageNet-like labels and a
path for its name (the shape a classifier's task answers with), written and read each way
that inferstream has, side by side in one process, best of `--repeats`:

- written by the codec alone (`Codec.encode`: fastavro walks every value), and by
  `records.encode_result` (its items by `schemas/item_writer.py`), which the worker uses;
- read in full (`read_record`: what `submit` and `results` read), and as the controller reads
  it (`read_result_summary`: the fields before the items, whatever their number).

The bytes of both writes are compared, and the summary with the full read's. Runs with the
`inferstream` command's garbage collector thresholds (`garbage.tune_collector`), as the worker
and controller do.

    python ops/bench/result_codec.py --items 8192 --repeats 7
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from inferstream.garbage import tune_collector
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    TaskResult,
    encode_result,
    read_record,
    read_result_summary,
    summary_of,
)


def example(items: int) -> TaskResult:
    labels = [f"n{c:08d} label of class {c}" for c in range(1000)]
    outcomes: list[Any] = []
    for index in range(items):
        first = index * 7919 % 1000
        top_k = [{"class_id": (first + j) % 1000, "label": labels[(first + j) % 1000],
                  "score": 0.5 ** (j + 1)} for j in range(5)]
        outcomes.append({"index": index, "name": f"/data/imagenet/train/img_{index:08d}.JPEG",
                         "status": "OK", "top_k": top_k, "embedding": None, "tensors": [],
                         "error": None})
    return TaskResult(job_id="20261206-000000-00000000", task_id=0, attempt=1, worker="w",
                      model="efficientnet_lite0", model_version=None, items=outcomes,
                      started_at=0, finished_at=0, decode_seconds=0.0, inference_seconds=0.0)


def best_us(run: Callable[[], object], repeats: int) -> float:
    """The fastest of `repeats` runs, in microseconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    tune_collector()
    codec, result = Codec(), example(args.items)
    written = encode_result(codec, result)
    counted = {**result, "ok_count": args.items, "error_count": 0}
    if codec.encode("TaskResult", counted) != written:
        raise SystemExit("the two writes differ")
    if read_result_summary(codec, written) != summary_of(result):
        raise SystemExit("the summary differs from the full read's")
    rows = [
        ("write: Codec.encode (fastavro)",
         lambda: codec.encode("TaskResult", counted)),
        ("write: encode_result (item_writer)", lambda: encode_result(codec, result)),
        ("read: read_record (in full)", lambda: read_record(codec, written, TaskResult)),
        ("read: read_result_summary (the controller)",
         lambda: read_result_summary(codec, written)),
    ]
    print(f"| way ({args.items:,} items of 5 predictions, {len(written) / args.items:.0f} "
          f"bytes an item) | us a result | us an item |\n|---|---:|---:|")
    for name, run in rows:
        took = best_us(run, args.repeats)
        print(f"| {name} | {took:,.0f} | {took / args.items:.3f} |")


if __name__ == "__main__":
    main()
